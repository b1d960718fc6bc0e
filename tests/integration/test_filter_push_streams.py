"""Push streams (ingest/filter/pusher.py PeerPusher) with real py-libp2p hosts over TCP, noise and
yamux / mplex, no Kafka: a client that keeps reading (nwaku, js-waku) gets every push over one
reused stream; clients that read one push per stream and close (go-waku), that close only late
(racing the bridge's reuse), or that reset streams unread (go-waku's rate limiter) still get every
push, exactly once."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import multiaddr
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import PeerInfo

from ingest.filter.codec import FILTER_PUSH_CODEC, MAX_PUSH_BYTES, push_v2
from ingest.filter.pusher import PeerPusher, PushItem, PushStats
from ingest.filter.settings import FilterSettings
from ingest.framing import FrameReader, frame
from ingest.host import build_host, listen_addrs
from schemas import filter_v2_pb2 as fv2
from schemas.waku_message_pb2 import WakuMessage

pytestmark = pytest.mark.integration

PT = "/waku/2/default-waku/proto"
N = 30


class Client:
    """A light client's filter-push handler. mode: "keep" reads every push of a stream until it
    ends; "one" reads one push and closes; "late" reads one push, waits `delay` s, then closes
    (what a slow go-waku may do: the bridge may have reused the stream meanwhile); "reset" resets
    every `every`-th stream unread, else reads one and closes."""

    def __init__(self, mode: str, muxer: str = "yamux", delay: float = 0.0, every: int = 3) -> None:
        self.mode, self.delay, self.every = mode, delay, every
        self.addrs = listen_addrs("127.0.0.1", 0, -1)
        self.host = build_host(create_new_key_pair(), self.addrs, (muxer,))
        self.received: list[str] = []
        self.streams = 0
        self.host.set_stream_handler(FILTER_PUSH_CODEC, self.on_push)

    async def on_push(self, stream) -> None:
        self.streams += 1
        if self.mode == "reset" and self.streams % self.every == 0:
            await stream.reset()
            return
        frames = FrameReader(stream, MAX_PUSH_BYTES)
        try:
            while True:
                data = await frames.read_frame()
                if data is None:
                    break
                self.received.append(fv2.MessagePush.FromString(data).waku_message.payload.decode())
                if self.mode != "keep":
                    if self.mode == "late":
                        await trio.sleep(self.delay)
                    break
        except Exception:  # noqa: BLE001 - reset: stop reading
            pass
        await stream.close()


def item(i: int) -> PushItem:
    msg = WakuMessage(payload=f"m{i}".encode(), content_topic="/push-streams/1/t/proto", timestamp=i + 1)
    return PushItem(frame(push_v2(PT, msg)), FILTER_PUSH_CODEC)


async def run_pusher(client: Client, settings: FilterSettings, pushes: int, spacing_s: float,
                     expect: int | None = None, timeout: float = 40.0,
                     at_end: Callable[[Any, Any], None] | None = None) -> PushStats:
    """A bridge host and `client` connected (the client dials, as light clients do); `pushes`
    pushes offered `spacing_s` apart to one PeerPusher; returns once the client has them all.
    `at_end(bridge host, client's peer id)` runs then, before the pusher ends."""
    bridge_addrs = listen_addrs("127.0.0.1", 0, -1)
    bridge = build_host(create_new_key_pair(), bridge_addrs, ("yamux", "mplex"))
    stats = PushStats()
    reports: list[bool] = []
    async with bridge.run(bridge_addrs), client.host.run(client.addrs), trio.open_nursery() as nursery:
        addr = multiaddr.Multiaddr(str(bridge.get_addrs()[0]).split("/p2p/")[0])
        await client.host.connect(PeerInfo(bridge.get_id(), [addr]))
        peer_id = client.host.get_id()
        network = bridge.get_network()
        pusher = PeerPusher(peer_id, bridge, settings, stats, FILTER_PUSH_CODEC,
                            lambda: bool(network.connections.get(peer_id)), reports.append)
        send, recv = trio.open_memory_channel(1000)
        nursery.start_soon(pusher.run, recv, send)
        for i in range(pushes):
            send.send_nowait(item(i))
            await trio.sleep(spacing_s)
        with trio.fail_after(timeout):
            while len(client.received) < (expect or pushes):
                await trio.sleep(0.05)
        await trio.sleep(0.5)  # nothing more (no duplicates) arrives
        if at_end is not None:
            at_end(bridge, peer_id)
        send.close()
        nursery.cancel_scope.cancel()
    assert reports == [], f"pushes failed: {stats.outcomes}"
    return stats


def settings(**kw) -> FilterSettings:
    base = dict(push_rate_per_peer=200.0, push_burst_per_peer=20, push_retries=2, push_reuse_after_s=0.3,
                push_unconfirmed_s=2.0, push_timeout_s=5.0)
    base.update(kw)
    return FilterSettings(**base)


@pytest.mark.parametrize("muxer", ["yamux", "mplex"])
def test_a_client_that_keeps_reading_gets_every_push_over_one_stream(muxer):
    client = Client("keep", muxer)
    stats = trio.run(run_pusher, client, settings(), N, 0.02)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(N))
    assert client.streams == 1 and stats.outcomes["streams"] == 1
    assert stats.outcomes["reused"] == N - 1 and stats.outcomes["pushed"] == N


@pytest.mark.parametrize("muxer", ["yamux", "mplex"])
def test_pushes_queued_for_a_kept_stream_go_out_together_in_order(muxer):
    """A burst offered at once (no spacing): while the probe stream opens the rest queue, and go
    out on the kept stream several to a write (`write_on_stream`: one yamux frame; mplex: the
    stream's own write), each once and in the order offered."""
    client = Client("keep", muxer)
    n = 200
    stats = trio.run(run_pusher, client, settings(), n, 0.0)
    assert client.received == [f"m{i}" for i in range(n)]
    assert client.streams == 1 and stats.outcomes["reused"] == n - 1 and stats.outcomes["pushed"] == n
    assert 0 < stats.outcomes["kept_writes"] < n - 1


def test_a_client_that_reads_one_push_per_stream_gets_every_push():
    client = Client("one")
    stats = trio.run(run_pusher, client, settings(), N, 0.02)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(N))  # each once
    # a push written on the first stream before the client's close arrived is sent again
    assert client.streams == N and stats.outcomes["resent"] >= stats.outcomes["reused"]


def test_a_client_closing_late_loses_nothing_to_the_reuse_race():
    # The client closes its first stream only after 0.8 s: the bridge writes further pushes on
    # it that the client never reads; they are sent again on new streams once the close arrives
    # (unconfirmed until push_reuse_after_s + push_unconfirmed_s after the stream's opening).
    client = Client("late", delay=0.8)
    stats = trio.run(run_pusher, client, settings(), 12, 0.05)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(12))  # each exactly once
    assert stats.outcomes["reused"] > 0 and stats.outcomes["resent"] == stats.outcomes["reused"]


def test_streams_reset_unread_are_pushed_again():
    # go-waku resets a push stream when its rate limiter refuses it: the push was not read.
    client = Client("reset", every=3)
    stats = trio.run(run_pusher, client, settings(push_retries=3), 10, 0.05)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(10))
    assert stats.outcomes["retried"] >= 3


def test_without_reuse_every_push_gets_its_own_stream():
    client = Client("keep")
    stats = trio.run(run_pusher, client, settings(push_reuse_stream=False), 10, 0.02)
    assert sorted(client.received) == sorted(f"m{i}" for i in range(10))
    assert client.streams == 10 and stats.outcomes["reused"] == 0
