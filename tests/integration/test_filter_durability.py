"""A subscription change is answered 200 only once Kafka acknowledged it: a change the broker
refuses (here: the subscriptions topic takes no record batch over 1,000 bytes) is undone on the bridge
and answered 503, so what the bridge answers is what Spark learns; other peers are served
meanwhile."""
from __future__ import annotations

import uuid

import pytest
import trio

from core.config import load_config
from core.kafka import ensure_topics
from ingest.filter.client import FilterClient
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.settings import BridgeSettings
from tests.integration.test_bridge import consume_all

pytestmark = pytest.mark.integration

PT = "/waku/2/default-waku/proto"


def test_refused_subscription_is_answered_503_and_undone(kafka, tmp_path):
    tag = uuid.uuid4().hex[:8]
    subs_topic = f"test.durable.{tag}.subscriptions"
    ensure_topics(kafka, {subs_topic: 1}, topic_configs={"max.message.bytes": "1000"})
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages=test.durable.{tag}.messages",
                       f"topics.subscriptions={subs_topic}", f"topics.push_prefix=test.durable.{tag}.push.",
                       f"bridge.key_file={tmp_path / 'key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
                       "bridge.ws_port=-1", "bridge.metrics_port=-1", "store_service.enabled=false",
                       "filter.record_timeout_s=20"], environ={})
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=BridgeMetrics(), out=open("/dev/null", "w"))
    long_topic = "/durable/1/" + "x" * 2000 + "/proto"
    out: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            with trio.fail_after(60):
                await bridge.filter.ready.wait()
            a, b = FilterClient(), FilterClient()
            async with a.running(), b.running():
                await a.connect(str(bridge.addrs[0]))
                await b.connect(str(bridge.addrs[0]))
                out["refused"] = await a.request(1, PT, [long_topic])
                out["ping_after_refusal"] = await a.ping()
                out["accepted"] = await b.request(1, PT, ["/durable/1/short/proto"])
                out["ping_accepted"] = await b.ping()
            bridge.stop()

    trio.run(main)
    assert (out["refused"].status_code, out["refused"].status_desc) == (
        503, "SERVICE_UNAVAILABLE: the subscription could not be recorded")
    assert out["ping_after_refusal"].status_code == 404     # the bridge did not keep it
    assert out["accepted"].status_code == 200 and out["ping_accepted"].status_code == 200
    from schemas import pipeline_records_pb2 as pr
    events = [pr.SubscriptionEvent.FromString(r.value) for r in consume_all(kafka, subs_topic, 2)]
    assert [(e.op, list(e.content_topics)) for e in events if e.op == pr.SUBSCRIBE] == [
        (pr.SUBSCRIBE, ["/durable/1/short/proto"])]
