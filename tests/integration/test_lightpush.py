"""Lightpush v3 and v2 on a real bridge (real libp2p hosts, the embedded Kafka): an accepted
message is answered 200 only once Kafka acknowledged it, is stored with source LIGHTPUSH, and is
relayed to the bridge's relay peer; autosharding picks the pubsub topic when the request has
none; refusals carry the reference status codes and leave the bridge serving."""
from __future__ import annotations

import time
import uuid

import multiaddr
import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

from core.config import load_config
from core.records import ingest_key
from core.topics import autoshard
from ingest.framing import FrameReader, frame
from ingest.lightpush import codec
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.publisher import Publisher
from ingest.settings import BridgeSettings
from schemas import lightpush_pb2 as lp
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_bridge import consume_all, create_topic

pytestmark = pytest.mark.integration

CT = "/lightpush-test/1/chat/proto"
SHARD = f"/waku/2/rs/1/{autoshard(CT, 8)}"


async def send(host, peer_id, codec_id: str, data: bytes) -> bytes | None:
    stream = await host.new_stream(peer_id, [TProtocol(codec_id)])
    try:
        await stream.write(frame(data))
        return await FrameReader(stream, 1 << 20).read_frame()
    finally:
        await stream.close()


def test_lightpush_stores_relays_and_refuses(kafka, tmp_path):
    topic = f"test.lightpush.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"bridge.key_file={tmp_path / 'key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
                       "bridge.ws_port=-1", "bridge.metrics_port=-1", "bridge.cluster_id=1", "rln.enabled=false",
                       "bridge.pubsub_topics=", "bridge.all_shards=true", "filter.enabled=false",
                       "store_service.enabled=false"], environ={})
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))
    msgs = [WakuMessage(payload=b"lp-%d" % i, content_topic=CT, timestamp=time.time_ns()) for i in range(3)]
    out: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            addr = str(bridge.addrs[0])
            bridge_id = info_from_p2p_addr(multiaddr.Multiaddr(addr)).peer_id
            relay_peer = Publisher()
            async with relay_peer.running([SHARD]):
                await relay_peer.connect(addr)
                await relay_peer.wait_for_mesh(SHARD)
                host = relay_peer.host
                r1 = lp.LightpushResponse.FromString(
                    await send(host, bridge_id, codec.LIGHTPUSH_V3_CODEC, codec.v3_request("a", msgs[0], SHARD)))
                r2 = lp.LightpushResponse.FromString(  # no pubsub topic: autosharding
                    await send(host, bridge_id, codec.LIGHTPUSH_V3_CODEC, codec.v3_request("b", msgs[1])))
                r3 = lp.PushRPC.FromString(
                    await send(host, bridge_id, codec.LIGHTPUSH_V2_CODEC, codec.v2_request("c", msgs[2], SHARD)))
                out["ok"] = [(r1.request_id, r1.status_code, r1.relay_peer_count),
                             (r2.request_id, r2.status_code, r2.relay_peer_count),
                             (r3.request_id, r3.response.is_success)]
                bad = {
                    "topic": codec.v3_request("d", msgs[0], "/waku/2/rs/1/99"),
                    "oversized": codec.v3_request("e", WakuMessage(payload=b"x" * 200_000, content_topic=CT), SHARD),
                    "invalid": codec.v3_request("f", WakuMessage(payload=b"x", content_topic=""), SHARD),
                    "no message": lp.LightpushRequest(request_id="g").SerializeToString(),
                    "no shard": codec.v3_request("h", WakuMessage(payload=b"x", content_topic="free-form")),
                }
                out["bad"] = {}
                for name, data in bad.items():
                    r = lp.LightpushResponse.FromString(await send(host, bridge_id, codec.LIGHTPUSH_V3_CODEC, data))
                    out["bad"][name] = (r.status_code, r.status_desc)
                v2_bad = lp.PushRPC.FromString(await send(host, bridge_id, codec.LIGHTPUSH_V2_CODEC, codec.v2_request(
                    "i", msgs[0], "/waku/2/rs/1/99")))
                out["v2_bad"] = (v2_bad.response.is_success, v2_bad.response.info)
                with trio.fail_after(10):
                    while relay_peer.received < 3:
                        await trio.sleep(0.05)
                out["relayed"] = relay_peer.received
            bridge.stop()

    trio.run(main)
    assert out["ok"] == [("a", 200, 1), ("b", 200, 1), ("c", True)]
    assert out["relayed"] == 3
    assert {k: v[0] for k, v in out["bad"].items()} == {
        "topic": 421, "oversized": 413, "invalid": 420, "no message": 400, "no shard": 400}
    assert out["bad"]["topic"][1] == "UNSUPPORTED_PUBSUB_TOPIC: this node does not relay /waku/2/rs/1/99"
    assert out["v2_bad"] == (False, "not_published_to_any_peer")  # nwaku's legacy text
    records = consume_all(kafka, topic, 3)
    assert len(records) == 3
    for rec in records:
        value = pr.IngestRecord.FromString(rec.value)
        assert value.source == pr.LIGHTPUSH and value.pubsub_topic == SHARD
        assert rec.key == ingest_key(SHARD, value.message)
    assert sorted(pr.IngestRecord.FromString(r.value).message.payload for r in records) == [b"lp-0", b"lp-1", b"lp-2"]
    assert metrics.value("waku_lightpush_requests_total", version="v3", status="200") == 2
