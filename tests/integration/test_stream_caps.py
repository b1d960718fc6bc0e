"""Caps on inbound streams (bridge.max_streams_per_peer, bridge.max_streams_total): a peer that
opens streams and sends nothing on them cannot hold more than its share, the bridge as a whole
holds no more than its total, and everyone else keeps being served."""
from __future__ import annotations

import time

import multiaddr
import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

from core.config import load_config
from core.topics import autoshard
from ingest.framing import FrameReader, frame
from ingest.lightpush import codec
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.publisher import Publisher
from ingest.settings import BridgeSettings
from schemas import filter_v2_pb2 as fv2
from schemas import lightpush_pb2 as lp
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_bridge import create_topic
from tests.waiting import until

pytestmark = pytest.mark.integration

CT = "/stream-caps/1/chat/proto"
SHARD = f"/waku/2/rs/1/{autoshard(CT, 8)}"
PER_PEER, TOTAL = 3, 6


async def hold(host, peer_id) -> object:
    """A lightpush stream opened and left silent (its handler waits for a request)."""
    return await host.new_stream(peer_id, [TProtocol(codec.LIGHTPUSH_V3_CODEC)])


async def push(host, peer_id, request_id: str) -> int | None:
    """One lightpush request; its status (a stream over the caps: 429, answered unread), or None
    when the stream was reset / closed unanswered."""
    try:
        stream = await host.new_stream(peer_id, [TProtocol(codec.LIGHTPUSH_V3_CODEC)])
        await stream.write(frame(codec.v3_request(request_id, WakuMessage(
            payload=b"caps", content_topic=CT, timestamp=time.time_ns()), SHARD)))
        with trio.fail_after(10):
            data = await FrameReader(stream, 1 << 20).read_frame()
    except Exception:  # noqa: BLE001 - a refused stream: reset by the bridge
        return None
    return None if data is None else lp.LightpushResponse.FromString(data).status_code


def test_stream_caps_per_peer_and_total(kafka, tmp_path):
    topic = "test.stream_caps"
    create_topic(kafka, topic)
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"bridge.key_file={tmp_path / 'key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
                       "bridge.ws_port=-1", "bridge.metrics_port=-1", "bridge.cluster_id=1", "rln.enabled=false",
                       "bridge.pubsub_topics=", "bridge.all_shards=true", "filter.enabled=false",
                       "store_service.enabled=false", f"bridge.max_streams_per_peer={PER_PEER}",
                       f"bridge.max_streams_total={TOTAL}"], environ={})
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))
    out: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            addr = str(bridge.addrs[0])
            bridge_id = info_from_p2p_addr(multiaddr.Multiaddr(addr)).peer_id
            greedy, modest, late = Publisher(), Publisher(), Publisher()
            async with greedy.running([SHARD]), modest.running([SHARD]), late.running([SHARD]):
                for p in (greedy, modest, late):
                    await p.connect(addr)
                gate = bridge.stream_gate
                # identify done, relay streams open (one inbound per peer)
                await until(lambda: gate.total >= 3, "a relay stream from each peer")
                out["relay_only"] = gate.total
                # greedy holds its share (relay holds one more stream per peer, so PER_PEER - 1)
                held = [await hold(greedy.host, bridge_id) for _ in range(PER_PEER - 1)]
                await until(lambda: gate.total == 3 + PER_PEER - 1, "greedy's held streams in their handlers")
                out["greedy_over"] = await push(greedy.host, bridge_id, "g")  # over its share: 429
                out["modest"] = await push(modest.host, bridge_id, "m")  # another peer: served
                # fill the total: greedy 3 (relay + 2 held), modest 2 (relay + 1 held), late 1 relay
                held.append(await hold(modest.host, bridge_id))
                await until(lambda: gate.total == TOTAL, "modest's held stream in its handler")
                out["open"] = gate.total
                out["late_over_total"] = await push(late.host, bridge_id, "l")
                for s in held:
                    await s.reset()
                await until(lambda: gate.total <= 3, "the held streams' handlers ended")
                out["greedy_after"] = await push(greedy.host, bridge_id, "g2")  # slots freed: served
            bridge.stop()

    trio.run(main)
    print(out)
    assert out["relay_only"] == 3
    assert out["greedy_over"] == 429  # refused unread with nwaku's answer, not reset
    assert out["modest"] == 200
    assert out["open"] == TOTAL
    assert out["late_over_total"] == 429
    assert out["greedy_after"] == 200
    refused = {scope: metrics.value("waku_bridge_streams_refused_total", protocol=codec.LIGHTPUSH_V3_CODEC,
                                    scope=scope) for scope in ("peer", "total")}
    assert refused == {"peer": 1, "total": 1}


def test_a_failing_handler_costs_its_stream_not_the_bridge(kafka, tmp_path):
    """py-libp2p runs stream handlers in the connection's nursery: before the gate caught them,
    one StreamReset (a filter answer written to a client that had given up waiting, found by
    tests/benchmarks/faults.py) killed the swarm and the bridge exited. Now the stream is reset,
    counted, and everyone, the same peer included, is served on."""
    from libp2p.network.stream.exceptions import StreamReset

    from ingest.filter.client import FilterClient

    cfg = load_config([f"kafka.bootstrap_servers={kafka}", "topics.messages=test.stream_caps.fail",
                       "topics.subscriptions=test.stream_caps.fail.subs",
                       "topics.push_prefix=test.stream_caps.fail.push.",
                       f"bridge.key_file={tmp_path / 'key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
                       "bridge.ws_port=-1", "bridge.metrics_port=-1", "store_service.enabled=false",
                       "filter.max_requests_per_peer_per_minute=1000"], environ={})
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))
    out: dict = {"answers": []}

    async def broken(stream) -> None:
        await stream.read(1)
        raise StreamReset("Cannot write to stream; stream is reset")

    async def buggy(stream) -> None:
        await stream.read(1)
        raise KeyError("a bug")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            with trio.fail_after(60):
                await bridge.filter.ready.wait()
            bridge.host.set_stream_handler(TProtocol("/test/broken/1"), broken)
            bridge.host.set_stream_handler(TProtocol("/test/buggy/1"), buggy)
            client = FilterClient()
            async with client.running():
                await client.connect(str(bridge.addrs[0]))
                for proto in ("/test/broken/1", "/test/buggy/1", "/test/buggy/1"):
                    s = await client.host.new_stream(bridge.peer_id, [TProtocol(proto)])
                    await s.write(b"x")

                def failed() -> float:
                    return (metrics.value("waku_bridge_stream_failures_total", protocol="/test/broken/1",
                                          kind="network")
                            + metrics.value("waku_bridge_stream_failures_total", protocol="/test/buggy/1",
                                            kind="handler"))
                await until(lambda: failed() == 3, "the three failing handlers counted")
                # a client that gives up on its answers: subscribe, then reset at once, many times
                for i in range(30):
                    s = await client.host.new_stream(bridge.peer_id,
                                                     [TProtocol("/vac/waku/filter-subscribe/2.0.0-beta1")])
                    await s.write(frame(fv2.FilterSubscribeRequest(
                        request_id=f"r{i}", filter_subscribe_type=fv2.FilterSubscribeRequest.SUBSCRIBE,
                        pubsub_topic="/waku/2/default-waku/proto", content_topics=[f"/t/1/{i}/proto"])
                        .SerializeToString()))
                    await s.reset()
                # Let their handlers meet the resets (no count to wait for: a stream reset before
                # its protocol was agreed reaches no handler); what follows holds either way.
                await trio.sleep(1.0)
                out["ping"] = (await client.ping()).status_code
            out["running"] = not bridge.stopped.is_set()
            bridge.stop()

    trio.run(main)
    assert out["running"] and out["ping"] in (200, 404)
    assert metrics.value("waku_bridge_stream_failures_total", protocol="/test/broken/1", kind="network") == 1
    assert metrics.value("waku_bridge_stream_failures_total", protocol="/test/buggy/1", kind="handler") == 2
