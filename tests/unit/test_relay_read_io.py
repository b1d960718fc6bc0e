"""The bridge's read path I/O (issue 41, relay read rate), replacements of py-libp2p 0.8.1 code in
ingest/p2p_patches.py (their upstream source fingerprinted in its REGISTRY,
tests/unit/test_p2p_patches.py): TCP reads through a buffer (one syscall for many noise frames)
and yamux WINDOW_UPDATEs at half the window (go-yamux's rule); `QuickLock` in place of the locks
the constructors of yamux sessions, yamux streams and TCP streams make; and no notifee fan-out
for stream events when every notifee's callback is a known no-op."""
from __future__ import annotations

import multiaddr
import trio
import trio.testing
from libp2p.io.trio import TrioTCPStream
from libp2p.security.secure_session import SecureSession
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, YamuxStream

from ingest import p2p_patches
from ingest.host import build_host


class _Quiet(p2p_patches.ConnectionNotifee):
    """Acts on connections only."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def connected(self, network, conn) -> None:
        self.events.append("connected")

    async def disconnected(self, network, conn) -> None: ...


class _Loud(_Quiet):
    """Acts on connections, and on stream opens."""

    async def opened_stream(self, network, stream) -> None:
        self.events.append("opened_stream")


class _Swarm:
    def __init__(self, *notifees) -> None:
        self.notifees = list(notifees)


def test_stream_events_reach_only_a_swarm_with_a_notifee_that_acts_on_them():
    """Stream opens and closes are not fanned out (no task, no pass through the scheduler)
    when every notifee's callback is a known no-op; connection events always are; one notifee
    that acts on stream events gets them (py-libp2p's own fan-out)."""
    async def main() -> None:
        quiet, loud = _Quiet(), _Loud()
        only_quiet = _Swarm(quiet)
        before = trio.lowlevel.current_statistics().tasks_living
        with trio.testing.assert_no_checkpoints():
            await p2p_patches._notify_who_listens(only_quiet, "opened_stream", None)
            await p2p_patches._notify_who_listens(only_quiet, "closed_stream", None)
        assert trio.lowlevel.current_statistics().tasks_living == before
        await p2p_patches._notify_who_listens(only_quiet, "connected", None)
        assert quiet.events == ["connected"]
        both = _Swarm(quiet, loud)
        await p2p_patches._notify_who_listens(both, "opened_stream", None)
        await p2p_patches._notify_who_listens(both, "closed_stream", None)
        assert loud.events == ["opened_stream"]

    trio.run(main)


def test_the_bridges_own_host_has_only_quiet_stream_callbacks():
    """The notifees a bridge's host registers (py-libp2p's identify, tag store and pubsub; the
    metadata service's) all do nothing on stream events: every stream skips the fan-out."""
    from libp2p.crypto.secp256k1 import create_new_key_pair

    from ingest.metadata.service import _Connected
    from ingest.relay.gossipsub import new_relay

    h = build_host(create_new_key_pair(), [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")])
    new_relay(h)
    network = h.get_network()
    network.register_notifee(_Connected(trio.open_memory_channel(1)[0]))
    kinds = {type(n).__name__ for n in network.notifees}
    assert {"PubsubNotifee", "TagStoreNotifee", "_IdentifyNotifee", "_Connected"} <= kinds
    for n in network.notifees:
        for method in ("opened_stream", "closed_stream"):
            assert getattr(type(n), method) in p2p_patches._QUIET_STREAM_CALLBACKS, (type(n).__name__, method)


class _Socket:
    """A trio SocketStream stand-in: receive_some returns the next chunk, b"" at the end."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.calls: list[int | None] = []

    async def receive_some(self, n: int | None = None) -> bytes:
        self.calls.append(n)
        await trio.lowlevel.checkpoint()
        return self.chunks.pop(0) if self.chunks else b""


def test_buffered_reads_serve_exact_sizes_from_one_socket_read():
    p2p_patches.apply()
    data = bytes(range(256)) * 40  # 10,240 bytes in two socket chunks
    sock = _Socket([data[:6000], data[6000:]])
    stream = TrioTCPStream(sock)  # type: ignore[arg-type]

    async def main() -> list[bytes]:
        out = []
        for n in (2, 1000, 5000, 2998, 100, None, 7):  # a read never spans two socket chunks
            out.append(await stream.read(n))
        return out

    parts = trio.run(main)
    assert [len(p) for p in parts] == [2, 1000, 4998, 2998, 100, 1142, 0]
    assert b"".join(parts) == data
    assert sock.calls == [p2p_patches.TCP_READ_BYTES] * 3  # two chunks and the end, whatever n asked
    assert stream.read.__func__ is p2p_patches._buffered_tcp_read  # type: ignore[attr-defined]


def test_read_of_zero_bytes_reads_nothing():
    p2p_patches.apply()
    sock = _Socket([b"abc"])
    stream = TrioTCPStream(sock)  # type: ignore[arg-type]
    assert trio.run(stream.read, 0) == b""
    assert sock.calls == []


class _Conn:
    def __init__(self) -> None:
        self.stream_buffers: dict[int, bytearray] = {1: bytearray()}


class _Stream:
    """What _window_update_at_half reads and writes of a YamuxStream."""

    _apply_autotune_epoch = YamuxStream._apply_autotune_epoch
    _effective_rtt = lambda self: 0.0  # noqa: E731 - no RTT measured: no auto-tuning

    def __init__(self) -> None:
        self.window_lock = trio.Lock()
        self.conn = _Conn()
        self.stream_id = 1
        self.target_recv_window = DEFAULT_WINDOW_SIZE
        self.recv_window = DEFAULT_WINDOW_SIZE
        self._pending_recv_release = 0
        self.epoch_start = 0.0
        self.sent: list[int] = []

    async def send_window_update(self, increment: int, skip_lock: bool = False) -> None:
        self.sent.append(increment)


def test_window_update_only_once_half_the_window_is_consumed():
    """Reads of 1 KiB messages as they arrive: an update every 128 KiB, each restoring the
    window to its target (py-libp2p 0.8.1 sent one per read and over-credited the peer)."""
    s = _Stream()

    async def main() -> None:
        for _ in range(1000):
            s.recv_window -= 1024  # a 1 KiB frame arrived ...
            await p2p_patches._window_update_at_half(s, bytes_read=1024)  # type: ignore[arg-type]  # ... and was read
            assert 0 < s.recv_window <= s.target_recv_window

    trio.run(main)
    half = DEFAULT_WINDOW_SIZE // 2
    assert s.sent == [half] * (1000 * 1024 // half)


def test_window_update_counts_what_is_buffered_unread():
    s = _Stream()
    s.recv_window = 0  # the peer used the whole window; half of it still unread

    async def main() -> None:
        s.conn.stream_buffers[1] += b"x" * (DEFAULT_WINDOW_SIZE // 2 + 1)
        await p2p_patches._window_update_at_half(s, bytes_read=0)  # type: ignore[arg-type]
        assert s.sent == []
        del s.conn.stream_buffers[1][:2]
        await p2p_patches._window_update_at_half(s, bytes_read=2)  # type: ignore[arg-type]

    trio.run(main)
    assert s.sent == [DEFAULT_WINDOW_SIZE // 2 + 1]
    assert s.recv_window == DEFAULT_WINDOW_SIZE // 2 + 1


def test_frame_body_in_the_noise_buffer_is_taken_without_reading():
    """The body that came with its header in one noise message: taken from the session's
    buffer; one that did not: read from the connection as py-libp2p does."""
    class _Noise:
        def __init__(self, msgs: list[bytes]) -> None:
            self.msgs = msgs

        async def read_msg(self) -> bytes:
            return self.msgs.pop(0)

    session = SecureSession.__new__(SecureSession)
    session._reset_internal_buffer()
    session.conn = _Noise([b"H" * 12 + b"body", b"more"])  # type: ignore[assignment]

    class _Mux:
        secured_conn = session

    async def main() -> list[bytes]:
        header = await session.read(12)
        first = await p2p_patches._data_body_from_noise_buffer(_Mux(), 4)  # type: ignore[arg-type]
        second = await p2p_patches._data_body_from_noise_buffer(_Mux(), 4)  # type: ignore[arg-type]
        return [header, first, second]

    assert trio.run(main) == [b"H" * 12, b"body", b"more"]


def test_quick_locks_replace_the_per_frame_locks():
    p2p_patches.apply()
    tcp = TrioTCPStream(_Socket([]))  # type: ignore[arg-type]
    assert isinstance(tcp.read_lock, p2p_patches.QuickLock) and isinstance(tcp.write_lock, p2p_patches.QuickLock)


def test_a_free_quick_lock_is_taken_without_yielding_and_a_held_one_is_waited_for():
    order: list[str] = []

    async def main() -> None:
        lock = p2p_patches.QuickLock()

        async def other() -> None:
            order.append("other ran")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)  # runs at main's next pass through the scheduler
            p2p_patches._quick_takes = 1  # the next take is not a yielding one
            async with lock:
                order.append("took")
        async with trio.open_nursery() as nursery:
            await lock.acquire()

            async def waiter() -> None:
                async with lock:
                    order.append("waiter took")

            nursery.start_soon(waiter)
            await trio.sleep(0.01)
            order.append("releasing")
            lock.release()

    trio.run(main)
    assert order == ["took", "other ran", "releasing", "waiter took"]


def test_every_sixteenth_free_take_yields():
    ran = 0

    async def main() -> None:
        nonlocal ran

        async def other() -> None:
            nonlocal ran
            while True:
                ran += 1
                await trio.lowlevel.checkpoint()

        lock = p2p_patches.QuickLock()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            p2p_patches._quick_takes = 0
            for _ in range(p2p_patches.QUICK_YIELD_EVERY * 4):
                await lock.acquire()
                lock.release()
            seen = ran
            nursery.cancel_scope.cancel()
        ran = seen

    trio.run(main)
    assert 2 <= ran <= 6, ran  # a pass through the scheduler every 16th take, not at each of the 64
