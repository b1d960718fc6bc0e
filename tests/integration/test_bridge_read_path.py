"""The bridge's relay read path when it is slower than its peers (issue 36 item 10): a peer
publishing flat out can queue no more than the relay stream's receive window ahead of the
bridge's reading (py-libp2p grew it to 16 MiB: seconds of messages waiting unread under load,
and go-yamux's keepalive ping behind them); each message's receive time is when its frame came
off the stream, not when the read loop got round to it; and a message the bridge accepted
waits for Kafka as long as it takes instead of being dropped.

The slow read path is a sink that takes its time (as the bridge's does on a loaded machine);
the counts are in messages, so they hold however busy the machine is."""
from __future__ import annotations

import time
import uuid

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.tools.anyio_service import background_trio_service

from ingest.host import build_host, listen_addrs
from ingest.publisher import Publisher
from ingest.relay.codec import DEFAULT_PUBSUB_TOPIC
from ingest.relay.gossipsub import RECEIVE_WINDOW, new_relay
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_bridge_kafka import Proxy, count_records, create_topic
from tests.waiting import progress

pytestmark = pytest.mark.integration

CONTENT_TOPIC = "/readpath/1/test/proto"


def message(i: int, size: int = 1024) -> WakuMessage:
    return WakuMessage(payload=i.to_bytes(4, "big") * (size // 4), content_topic=CONTENT_TOPIC,
                       timestamp=time.time_ns())


async def run_pair(sink, body, per_rpc: int = 1) -> None:
    """A relay node with `sink` (the bridge's read path) and a Publisher connected to it; then
    body(publisher)."""
    la = listen_addrs("127.0.0.1", 0, -1)
    host = build_host(create_new_key_pair(), la)
    _, pubsub = new_relay(host, sink=sink)
    router = pubsub.router
    async with host.run(la), background_trio_service(pubsub), background_trio_service(router):
        await pubsub.wait_until_ready()
        await pubsub.join(DEFAULT_PUBSUB_TOPIC)
        addr = f"{host.get_addrs()[0]}"
        pub = Publisher()
        pub.pubsub.max_messages_per_rpc = per_rpc
        async with pub.running():
            await pub.connect(addr)
            await pub.wait_for_mesh(timeout=60)
            await body(pub)


def test_a_flat_out_publisher_queues_no_more_than_the_receive_window():
    """1,200 messages of 1 KiB published as fast as py-libp2p goes to a read path taking 200 a
    second: what the publisher has written and the read path not yet taken stays within the
    relay stream's window (256 KiB) plus the frame reader's chunk, about 480 messages; with
    py-libp2p's auto-tuned window it was nearly all of them."""
    n, rate = 1200, 200.0
    taken = 0
    written = 0
    backlog = 0
    next_at = 0.0

    async def slow_sink(*args) -> None:
        nonlocal taken, backlog, next_at
        backlog = max(backlog, written - taken)
        taken += 1
        next_at = max(next_at, trio.current_time()) + 1 / rate
        await trio.sleep_until(next_at)

    async def body(pub: Publisher) -> None:
        nonlocal written
        write = pub.pubsub.write_msg

        async def counted(stream, rpc) -> bool:
            nonlocal written
            ok = await write(stream, rpc)
            written += len(rpc.publish)
            return ok

        pub.pubsub.write_msg = counted
        for i in range(n):
            await pub.publish(message(i))
        await progress(lambda: taken, n, "messages taken by the read path")

    trio.run(run_pair, slow_sink, body)
    window_messages = 2 * RECEIVE_WINDOW // 1100
    print(f"largest backlog: {backlog} messages (bound ~{window_messages})")
    assert taken == n
    assert backlog <= window_messages + 150, backlog


def test_the_receive_time_is_when_the_frame_came_off_the_stream():
    """20 messages in one or a few RPC frames, each taking the read path 30 ms: every message
    carries its frame's arrival time (plus 1 µs per message before it in the same read), not the
    time its turn came (which was up to ~0.6 s later)."""
    seen: list[tuple[float, float]] = []  # (received_time, when the read path took it)

    async def slow_sink(topic, msg, data, mid, received_time, arrival) -> None:
        seen.append((received_time, time.time()))
        await trio.sleep(0.03)

    async def body(pub: Publisher) -> None:
        for i in range(20):  # queued without a checkpoint between them: coalesced into few frames
            await pub.publish(message(i, 64))
        await progress(lambda: len(seen), 20, "messages taken by the read path")

    trio.run(run_pair, slow_sink, body, 20)
    # Messages of one read are stamped 1 µs apart (distinct, in order): a gap above 0.1 ms is
    # another read.
    stamps = [r for r, _ in seen]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    frames = 1 + sum(1 for a, b in zip(stamps, stamps[1:], strict=False) if b - a > 1e-4)
    waited = max(t - r for r, t in seen)
    print(f"{frames} frames; the longest a message waited for its turn: {waited:.3f} s")
    assert all(r <= t for r, t in seen)
    assert frames < 20
    assert waited >= 0.2, seen


def test_accepted_messages_wait_for_kafka_instead_of_being_dropped(kafka, tmp_path):
    """Kafka unreachable for longer than backpressure_timeout_s with 20 records outstanding at
    most: the relay stops reading (its peers wait in flow control) and, once Kafka is back,
    every accepted message is produced; none is dropped for the backlog."""
    from tests.integration.test_bridge import local_bridge

    topic = f"test.bridge.readpath.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)
    proxy = Proxy(kafka)
    bridge, metrics = local_bridge(f"127.0.0.1:{proxy.port}", topic, tmp_path,
                                   "bridge.producer_max_outstanding=20", "bridge.backpressure_timeout_s=0.5",
                                   "store_service.enabled=false", "filter.enabled=false")
    n = 200

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            pub = Publisher()
            async with pub.running():
                await pub.connect(str(bridge.addrs[0]))
                await pub.wait_for_mesh(timeout=60)
                for i in range(n):
                    await pub.publish(message(i, 100))
                await progress(lambda: bridge.producer.outstanding, 20, "records outstanding")
                await trio.sleep(2.0)  # four times backpressure_timeout_s with Kafka away
                assert metrics.value("waku_bridge_accepted_total") < n  # held back, not dropped
                proxy.start()
                await progress(lambda: metrics.value("waku_bridge_produced_total"), n, "records produced")
            bridge.stop()

    try:
        trio.run(main)
    finally:
        proxy.close()
    dropped = sum(metrics.value("waku_bridge_dropped_total", reason=r) for r in ("kafka_backlog", "shutdown"))
    assert dropped == 0
    assert metrics.value("waku_bridge_accepted_total") == metrics.value("waku_bridge_produced_total") == n
    assert count_records(kafka, topic) == n
