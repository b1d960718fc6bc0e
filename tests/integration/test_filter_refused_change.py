"""A filter change answered 503 leaves nothing behind: when Kafka does not acknowledge a
SUBSCRIBE within filter.record_timeout_s, the bridge answers 503 and undoes it in its view;
the record stays buffered and may land later, and then the bridge records the changes that
undo it, so that waku.subscriptions (what the subscriptions job applies) ends at what the
client was told. Real Kafka (the shared embedded broker) and real libp2p hosts; no Spark."""
from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
import trio

from core.config import Config, load_config
from ingest.filter.client import FilterClient
from ingest.filter.state import Change, FilterLimits, SubscriptionView
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.relay.codec import DEFAULT_PUBSUB_TOPIC
from ingest.settings import BridgeSettings
from schemas import pipeline_records_pb2 as pr
from tests.integration.test_bridge import consume_all, create_topic
from tests.integration.test_filter_service import Net, wait_until

pytestmark = pytest.mark.integration


def replay(records: list, peer: str) -> set[tuple[str, str]]:
    """The subscriptions of `peer` after the topic's events, in order (what the job applies)."""
    view = SubscriptionView(FilterLimits())
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        ev = pr.SubscriptionEvent.FromString(rec.value)
        if ev.peer_id == peer:
            view.apply(peer, Change(ev.op, ev.pubsub_topic, tuple(ev.content_topics), ev.request_id, ev.protocol), 0)
    state = view.peers.get(peer)
    return set(state.criteria) if state else set()


def test_a_subscribe_answered_503_that_reaches_kafka_late_is_undone(config: Config, kafka: str, tmp_path):
    tag = uuid.uuid4().hex[:8]
    subs_topic = f"test.refused.{tag}.subscriptions"
    cfg = load_config([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages=test.refused.{tag}.messages",
        f"topics.subscriptions={subs_topic}", f"topics.push_prefix=test.refused.{tag}.push.",
        f"bridge.key_file={tmp_path / 'b.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
        "bridge.ws_port=-1", "bridge.metrics_port=-1", f"bridge.pubsub_topics={DEFAULT_PUBSUB_TOPIC}",
        "store_service.enabled=false",
    ], environ={})
    create_topic(kafka, cfg.get("topics.messages"), 1)
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=BridgeMetrics(), out=open("/dev/null", "w"))
    client = FilterClient()
    net = Net()

    async def setup(nursery: trio.Nursery) -> None:
        await nursery.start(bridge.run)
        with trio.fail_after(120):
            await bridge.filter.ready.wait()
        # Once serving: an acknowledgement can never come within 1 ms (the producer lingers
        # 5 ms), so every change is answered 503 and then acknowledged late.
        bridge.filter.settings = dataclasses.replace(bridge.filter.settings, record_timeout_s=0.001)

    net.start(setup)
    try:
        net.run(net.start_client, client)
        net.run(client.connect, str(bridge.addrs[0]))
        topics = [f"/refused/1/{i}/proto" for i in range(3)]
        answer = net.run(client.subscribe, DEFAULT_PUBSUB_TOPIC, topics)
        assert answer.status_code == 503, answer
        peer = str(client.host.get_id())
        assert not bridge.filter.view.has(peer)
        # The late acknowledgement, then the undoing records; the bridge's restart record is
        # on the topic too.
        metrics = bridge.filter.metrics
        wait_until(lambda: metrics.value("waku_filter_late_changes_undone_total") >= 1, 120,
                   "the late SUBSCRIBE undone")
        records = consume_all(kafka, subs_topic, expected=3)
        ops = [pr.SubscriptionEvent.FromString(r.value).op for r in records
               if pr.SubscriptionEvent.FromString(r.value).peer_id == peer]
        assert ops == [pr.SUBSCRIBE, pr.UNSUBSCRIBE], ops
        assert replay(records, peer) == set()
    finally:
        trio.from_thread.run_sync(bridge.stop, trio_token=net.token)
        net.stop()
        time.sleep(0.1)
