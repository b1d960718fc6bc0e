"""py-libp2p 0.8.1 as the bridge runs it: the one file to read at a py-libp2p upgrade.

It holds the *replacements* (functions of ours assigned onto py-libp2p's classes, or onto one
host's objects) and how they are applied, and `REGISTRY`: one `Adaptation` record for every
replacement, every method our subclasses override (they stay in their classes:
`ingest/relay/gossipsub.py`, `ingest/host.py`, here) and every piece of py-libp2p code ours
copies or relies on. Each record carries the fingerprint of the upstream source it was written
against (`fingerprint`: sha256 of `inspect.getsource`, the first 12 hex digits, libp2p 0.8.1);
`tests/unit/test_p2p_patches.py` asserts they still match the installed py-libp2p, so an upgrade
fails one test that names exactly which records to re-read. docs/bridge.md ("How py-libp2p 0.8.1
was adapted") is the registry as a table.

Applied in two places, as before this module existed:
- `apply(host, wrap_handler)`, by `ingest.host.build_host` for every host it builds (the bridge's,
  every client's, the tests'): the process-wide replacements (idempotent: the same functions are
  assigned again), and that host's own: its auto-connector's redials off, and, with
  `wrap_handler` (the bridge's `StreamGate.wrap`), every stream handler through it;
- `bound_receive_windows(n)`, by `ingest.relay.gossipsub.RelayPubsub` when a relay is built: it
  takes the relay's setting (`relay_receive_window_bytes`).
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import IHost, IMuxedConn, INetStream, INetwork, INotifee
from libp2p.custom_types import StreamHandlerFn, TProtocol
from libp2p.host.basic_host import _IdentifyNotifee
from libp2p.io.trio import TrioTCPStream
from libp2p.network.swarm import RawConnection, Swarm
from libp2p.network.swarm import logger as swarm_logger
from libp2p.network.tag_store import TagStoreNotifee
from libp2p.pubsub.pubsub_notifee import PubsubNotifee
from libp2p.security.secure_session import SecureSession
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, Yamux, YamuxStream
from multiaddr import Multiaddr
from trio._sync import _LockImpl

LIBP2P_VERSION = "0.8.1"  # the version the registry's fingerprints were taken from

# py-libp2p 0.8.1's own, kept before `apply` replaces them (the replacements call them).
_PLAIN_TCP_READ = TrioTCPStream.read
_PLAIN_TCP_INIT = TrioTCPStream.__init__
_PLAIN_WINDOW_UPDATE = YamuxStream._auto_tune_and_send_window_update
_PLAIN_AUTOTUNE = YamuxStream._apply_autotune_epoch
_PLAIN_YAMUX_STREAM_INIT = YamuxStream.__init__
_PLAIN_READ_DATA_BODY = Yamux._read_data_body
_PLAIN_YAMUX_INIT = Yamux.__init__
_PLAIN_SWARM_NOTIFY = Swarm._notify
_PLAIN_INBOUND = Swarm._do_handle_inbound_connection


# -- the read path: one syscall for many noise frames, go-yamux's window updates -------------

# What one socket read asks for (py-libp2p 0.8.1 asks for exactly what the layer above wants:
# a noise frame's 2-byte length, then its body; two syscalls a relay message).
TCP_READ_BYTES = 64 * 1024


async def _buffered_tcp_read(self: TrioTCPStream, n: int | None = None) -> bytes:
    """Replaces TrioTCPStream.read: reads up to TCP_READ_BYTES from the socket into a buffer
    and serves reads of `n` bytes from it (one syscall for many noise frames; py-libp2p reads
    each frame's length prefix and body with a syscall each)."""
    if n == 0:
        return b""
    while True:
        buf: bytes = self._waku_rbuf  # type: ignore[attr-defined]
        pos: int = self._waku_rpos  # type: ignore[attr-defined]
        if pos < len(buf):
            end = len(buf) if n is None else min(len(buf), pos + n)
            self._waku_rpos = end  # type: ignore[attr-defined]
            return buf[pos:end] if pos or end < len(buf) else buf
        data = await _PLAIN_TCP_READ(self, TCP_READ_BYTES if n is None else max(n, TCP_READ_BYTES))
        if self._waku_rpos < len(self._waku_rbuf):  # type: ignore[attr-defined]
            # another task's read filled the buffer meanwhile: ours come after its bytes
            self._waku_rbuf = self._waku_rbuf[self._waku_rpos:] + data  # type: ignore[attr-defined]
            self._waku_rpos = 0  # type: ignore[attr-defined]
            continue
        if not data:
            return data
        self._waku_rbuf, self._waku_rpos = data, 0  # type: ignore[attr-defined]


async def _window_update_at_half(self: YamuxStream, *, bytes_read: int = 0) -> None:
    """Replaces YamuxStream._auto_tune_and_send_window_update: go-yamux's rule, a WINDOW_UPDATE
    once the window the peer has left (plus what is buffered unread) is half the target or
    less. py-libp2p 0.8.1 sends one after nearly every read (its "partial slack" branch credits
    the bytes read twice): with a reader that keeps pace, one noise-encrypted frame and a
    syscall per relay message, and a receive window that creeps past its target. Auto-tuning
    (`_apply_autotune_epoch`, bounded by `bound_receive_windows`) applies when an update goes
    out, as before. No update due: no lock taken (a trio lock is a trip through the scheduler;
    nothing can change the window between this check and the return)."""
    due = self.target_recv_window - (self.recv_window + len(self.conn.stream_buffers.get(self.stream_id, b"")))
    if due <= 0 or due < self.target_recv_window // 2:
        return
    async with self.window_lock:
        buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
        delta = self.target_recv_window - (self.recv_window + buffered)
        if delta <= 0 or delta < self.target_recv_window // 2:
            return
        self.recv_window += delta
        self._pending_recv_release = 0
        delta += self._apply_autotune_epoch(buffered)
    await self.send_window_update(delta, skip_lock=True)


async def _data_body_from_noise_buffer(self: Yamux, length: int) -> bytes:
    """Replaces Yamux._read_data_body: a DATA frame's body that is in the noise session's
    buffer already (it came in the noise message that carried the header: go-yamux writes
    header and body together) is taken from it at once; py-libp2p 0.8.1 opened a timeout scope
    and went through two reads for it. Otherwise as before (bounded by its timeout)."""
    conn = self.secured_conn
    if isinstance(conn, SecureSession) and conn.high_watermark - conn.low_watermark >= length:
        return conn._drain(length)
    return await _PLAIN_READ_DATA_BODY(self, length)


# A yamux stream's receive window, at most (`bound_receive_windows`); None: py-libp2p's auto-tuning.
_receive_window_limit: int | None = None


def _bounded_autotune(self: YamuxStream, buffered: int) -> int:
    """Replaces YamuxStream._apply_autotune_epoch: py-libp2p 0.8.1's, with the stream's window
    kept at most `_receive_window_limit` (see `bound_receive_windows`)."""
    limit = _receive_window_limit
    if limit is None:
        return _PLAIN_AUTOTUNE(self, buffered)
    if self.target_recv_window >= limit:
        self.epoch_start = trio.current_time()
        return 0
    extra = _PLAIN_AUTOTUNE(self, buffered)
    over = self.target_recv_window - limit
    if over > 0:
        cut = min(over, extra)
        self.target_recv_window = limit
        self.recv_window -= cut
        extra -= cut
    return extra


def bound_receive_windows(max_bytes: int) -> None:
    """Keep the yamux receive window of every stream of this process at most `max_bytes` (at
    least yamux's initial 256 KiB): what a peer may send ahead of our reads. py-libp2p 0.8.1
    doubles a stream's window (``YamuxStream._apply_autotune_epoch``, up to 16 MiB) whenever a
    window update follows the last within 4 RTTs, i.e. whenever the reader keeps reading
    (multistream negotiation alone takes it to 4 MiB), however much slower than the peer sends
    it reads. The bridge's only bulk inbound data is relay: requests of the other protocols are
    small, and what it sends is bounded by the peer's window, not this one. Called by each
    relay built (`RelayPubsub`): the last call's bound holds."""
    global _receive_window_limit
    _receive_window_limit = max(max_bytes, DEFAULT_WINDOW_SIZE)
    YamuxStream._apply_autotune_epoch = _bounded_autotune  # type: ignore[method-assign]


# -- locks taken without a pass through trio's scheduler when free ---------------------------

class QuickLock(_LockImpl):
    """A trio lock whose acquire, when the lock is free, takes it without a pass through the
    scheduler (trio's yields there every time). py-libp2p's yamux takes a lock for nearly every
    frame it reads or writes (the session's stream table, the stream's window, the socket's
    read and write): under a filter load of 50 msg/s to 20 go-waku clients most of the trio
    thread's ~1,300 loop turns a second. Every QUICK_YIELD_EVERY-th free take still yields, so
    a task that takes locks in a loop over buffered input (the session's reader) lets the others
    run. Cancellation is checked as in trio's (`checkpoint_if_cancelled`); fairness is trio's:
    a lock with waiters is handed to the first of them. Protected from KeyboardInterrupt as
    trio's is (a lock is never left taken half-way)."""

    @trio.lowlevel.enable_ki_protection
    async def acquire(self) -> None:
        global _quick_takes
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.acquire_nowait()
        except trio.WouldBlock:
            await _LockImpl.acquire(self)
            return
        _quick_takes += 1
        if _quick_takes % QUICK_YIELD_EVERY == 0:
            await trio.lowlevel.cancel_shielded_checkpoint()


QUICK_YIELD_EVERY = 16
_quick_takes = 0


def _yamux_init(self: Yamux, *args: Any, **kwargs: Any) -> None:
    """Replaces Yamux.__init__: py-libp2p's, then its stream table and write locks `QuickLock`s."""
    _PLAIN_YAMUX_INIT(self, *args, **kwargs)
    self.streams_lock = QuickLock()  # type: ignore[assignment]
    self._write_lock = QuickLock()  # type: ignore[assignment]


def _yamux_stream_init(self: YamuxStream, *args: Any, **kwargs: Any) -> None:
    """Replaces YamuxStream.__init__: py-libp2p's, then its window lock a `QuickLock`."""
    _PLAIN_YAMUX_STREAM_INIT(self, *args, **kwargs)
    self.window_lock = QuickLock()  # type: ignore[assignment]


def _tcp_init(self: TrioTCPStream, *args: Any, **kwargs: Any) -> None:
    """Replaces TrioTCPStream.__init__: py-libp2p's, then its read and write locks `QuickLock`s."""
    _PLAIN_TCP_INIT(self, *args, **kwargs)
    self.read_lock = QuickLock()  # type: ignore[assignment]
    self.write_lock = QuickLock()  # type: ignore[assignment]


# -- stream events nobody acts on ------------------------------------------------------------

class ConnectionNotifee(INotifee):
    """A swarm notifee of connections only: its stream and listen callbacks do nothing, so the
    swarm (`_notify_who_listens`) skips the fan-out of stream events for it."""

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None: ...
    async def closed_stream(self, network: INetwork, stream: INetStream) -> None: ...
    async def listen(self, network: INetwork, multiaddr: Multiaddr) -> None: ...
    async def listen_close(self, network: INetwork, multiaddr: Multiaddr) -> None: ...


# Stream callbacks that do nothing: py-libp2p 0.8.1's own notifees' (their source fingerprinted
# in REGISTRY; PubsubNotifee's is a bare checkpoint) and ours.
_QUIET_STREAM_CALLBACKS = frozenset({
    PubsubNotifee.opened_stream, PubsubNotifee.closed_stream,
    TagStoreNotifee.opened_stream, TagStoreNotifee.closed_stream,
    _IdentifyNotifee.opened_stream, _IdentifyNotifee.closed_stream,
    ConnectionNotifee.opened_stream, ConnectionNotifee.closed_stream,
})


async def _notify_who_listens(self: Swarm, method: str, *args: Any) -> None:
    """Replaces Swarm._notify: a stream's open or close notifies nobody when no notifee acts on
    it. The swarm awaits the fan-out (a nursery, a task per notifee) before a new stream's
    handler runs, and again at its close: two passes through the scheduler each, on every
    stream (a store query's, a push's), for callbacks that all do nothing."""
    if method in ("opened_stream", "closed_stream") and all(
            getattr(type(n), method, None) in _QUIET_STREAM_CALLBACKS for n in self.notifees):
        return
    await _PLAIN_SWARM_NOTIFY(self, method, *args)


# -- an inbound connection's slot, held while it is open -------------------------------------

async def _inbound_until_closed(self: Swarm, read_write_closer: Any, maddr: Multiaddr, failure_event: Any) -> None:
    """Replaces Swarm._do_handle_inbound_connection: py-libp2p 0.8.1's (the connection gate, the
    pre-multiplexed branch, the security and muxer upgrade), then it returns when the connection
    closes. 0.8.1's waits for the swarm's end after every upgrade ("keep handler alive"), and its
    caller `_handle_inbound_connection` gives the connection's inbound slot back only when this
    returns: every inbound connection ever accepted kept its slot and its task, and once
    `bridge.max_connections` connections had come and gone (py-libp2p's default: 250) every new
    one was closed before its handshake, silently, for the rest of the process's life."""
    remote_maddr = self._build_remote_multiaddr(read_write_closer)
    if remote_maddr is not None and not await self.connection_gate.is_allowed(remote_maddr):
        await _refused(self, read_write_closer, failure_event)
        return
    if isinstance(read_write_closer, IMuxedConn):  # QUIC, WebTransport: already multiplexed
        try:
            await self.add_conn(read_write_closer, direction="inbound")
        except Exception:  # noqa: BLE001 - 0.8.1's: any failure closes it and is counted
            await _refused(self, read_write_closer, failure_event)
            return
        await _until_closed(self, read_write_closer)
        return
    raw_conn = None
    try:
        raw_conn = RawConnection(read_write_closer, False)
        muxed = await self.upgrade_inbound_raw_conn(raw_conn, maddr)
    except Exception as exc:  # noqa: BLE001 - 0.8.1's: a failed upgrade closes the socket, logged at debug
        swarm_logger.debug("Error handling incoming connection: %s", exc)
        try:
            if raw_conn is not None:
                await raw_conn.close()
            else:
                await _refused(self, read_write_closer, failure_event)
        except Exception:  # noqa: BLE001 - closing a failed socket
            pass
        return
    await _until_closed(self, muxed)


async def _refused(swarm: Swarm, read_write_closer: Any, failure_event: Any) -> None:
    try:
        await read_write_closer.close()
        failure_event.conn_incoming_error = True
        if swarm.metric_send_channel is not None:
            await swarm.metric_send_channel.send(failure_event)
    except Exception:  # noqa: BLE001 - 0.8.1's: a refusal that cannot close or count is dropped
        pass


async def _until_closed(swarm: Swarm, muxed: Any) -> None:
    """Until the muxed connection has closed (yamux's and mplex's `event_closed`) or the swarm
    has ended."""
    closed = getattr(muxed, "event_closed", None)
    if closed is None:
        await swarm.manager.wait_finished()
        return
    async with trio.open_nursery() as nursery:
        async def swarm_end() -> None:
            await swarm.manager.wait_finished()
            nursery.cancel_scope.cancel()

        nursery.start_soon(swarm_end)
        await closed.wait()
        nursery.cancel_scope.cancel()


# -- one host's own --------------------------------------------------------------------------

async def _no_auto_dials() -> None:
    """Replaces a host's AutoConnector.maybe_connect: py-libp2p 0.8.1's redials every peer ever
    seen (light clients long gone included) to keep 150 connections. The bridge dials its static
    peers only (Bridge._keep_dialled, with backoff)."""
    return None


def gate_stream_handlers(host: IHost, wrap: Callable[[str, StreamHandlerFn], StreamHandlerFn]) -> None:
    """Every stream handler of `host` runs through `wrap(protocol, handler)` (the bridge's
    `StreamGate.wrap`): those set already (identify, ping) and those set from now on (relay, the
    services), by replacing the host's `set_stream_handler`. A host gated already stays as it is."""
    if getattr(host.set_stream_handler, "waku_gated", False):
        return
    plain = host.set_stream_handler
    for protocol_id, handler in list(host.multiselect.handlers.items()):  # type: ignore[attr-defined]
        if protocol_id is not None and handler is not None:
            plain(protocol_id, wrap(str(protocol_id), handler))

    def set_stream_handler(protocol_id: TProtocol, stream_handler: StreamHandlerFn) -> None:
        plain(protocol_id, wrap(str(protocol_id), stream_handler))

    set_stream_handler.waku_gated = True  # type: ignore[attr-defined]
    host.set_stream_handler = set_stream_handler  # type: ignore[method-assign]


def apply(host: IHost | None = None,
          wrap_handler: Callable[[str, StreamHandlerFn], StreamHandlerFn] | None = None) -> None:
    """Every replacement of REGISTRY but `bound_receive_windows`' (idempotent). Process-wide, for
    every connection of this process: buffered TCP reads, half-window yamux updates, yamux frame
    bodies taken straight from the noise buffer, inbound connections' slots given back when they
    close, `QuickLock` for the locks of yamux sessions,
    yamux streams and TCP streams, and no notifee fan-out for stream events nobody acts on. With
    `host`, its own: no auto-connector redials, and with `wrap_handler` its stream handlers
    through it (`gate_stream_handlers`)."""
    Swarm._notify = _notify_who_listens  # type: ignore[method-assign]
    Swarm._do_handle_inbound_connection = _inbound_until_closed  # type: ignore[method-assign]
    TrioTCPStream._waku_rbuf = b""  # type: ignore[attr-defined]  # per instance once read
    TrioTCPStream._waku_rpos = 0  # type: ignore[attr-defined]
    TrioTCPStream.read = _buffered_tcp_read  # type: ignore[method-assign]
    YamuxStream._auto_tune_and_send_window_update = _window_update_at_half  # type: ignore[method-assign]
    Yamux._read_data_body = _data_body_from_noise_buffer  # type: ignore[method-assign]
    Yamux.__init__ = _yamux_init  # type: ignore[method-assign]
    YamuxStream.__init__ = _yamux_stream_init  # type: ignore[method-assign]
    TrioTCPStream.__init__ = _tcp_init  # type: ignore[method-assign]
    if host is None:
        return
    swarm = host.get_network()
    swarm.auto_connector.maybe_connect = _no_auto_dials  # type: ignore[attr-defined]  # py-libp2p's one INetwork: a Swarm
    if wrap_handler is not None:
        gate_stream_handlers(host, wrap_handler)


# -- the registry ----------------------------------------------------------------------------

REPLACED = "replaced"      # our function assigned onto py-libp2p's class (or one host's object)
OVERRIDDEN = "overridden"  # a method of our subclass of a py-libp2p class
RELIED_ON = "relied on"    # py-libp2p code ours copies from, mirrors or depends on the details of

# Where the measured gain is documented, by section.
_RELAY_BENCH = "docs/bridge.md, Benchmark (the relay read rate; not measured on its own)"
_LOCKS = "docs/decisions.md, py-libp2p's yamux locks taken without a pass through the scheduler when free"
_NOTIFY = "docs/decisions.md, Stream opens and closes without the notifee fan-out"
_ONE_FRAME = "docs/decisions.md, A push stream to a go-waku client written as one yamux frame"


@dataclass(frozen=True)
class Adaptation:
    """One piece of py-libp2p the bridge replaces, overrides or relies on.

    `upstream` and `ours` are "module:qualified.name"; `fingerprint` is the first 12 hex digits
    of the sha256 of `inspect.getsource` of the upstream code in `LIBP2P_VERSION` (a record
    whose `upstream` is trio's: in the installed trio); `fixes` says in one line what ours fixes
    (for RELIED_ON: what of ours depends on it); `gain` is where its measured gain is documented,
    or "correctness" for a bug or interop fix; `upstream_worthy`: worth offering to py-libp2p."""
    kind: str
    upstream: str
    ours: str
    fingerprint: str
    fixes: str
    gain: str
    upstream_worthy: bool = False


def _r(upstream: str, ours: str, fingerprint: str, fixes: str, gain: str, worthy: bool = False) -> Adaptation:
    return Adaptation(REPLACED, upstream, ours, fingerprint, fixes, gain, worthy)


def _o(upstream: str, ours: str, fingerprint: str, fixes: str, gain: str, worthy: bool = False) -> Adaptation:
    return Adaptation(OVERRIDDEN, upstream, ours, fingerprint, fixes, gain, worthy)


def _d(upstream: str, ours: str, fingerprint: str, why: str) -> Adaptation:
    return Adaptation(RELIED_ON, upstream, ours, fingerprint, why, "-")


_P = "ingest.p2p_patches:"
_G = "ingest.relay.gossipsub:"
_H = "ingest.host:"
_SWARM = "libp2p.network.swarm:Swarm."
_YAMUX = "libp2p.stream_muxer.yamux.yamux:"
_GOSSIP = "libp2p.pubsub.gossipsub:GossipSub."
_PUBSUB = "libp2p.pubsub.pubsub:Pubsub."
_NOTIFEE = "libp2p.abc:INotifee."

REGISTRY: tuple[Adaptation, ...] = (
    # Replaced: by apply(), for every connection of the process.
    _r(_SWARM + "_notify", _P + "_notify_who_listens", "36afe611751a",
       "a stream's open and close skip the notifee fan-out (a nursery, a task per notifee, two scheduler "
       "passes) when every notifee's callback for it is a no-op", _NOTIFY, True),
    _r(_SWARM + "_do_handle_inbound_connection", _P + "_inbound_until_closed", "c22fdfd5289f",
       "an inbound connection's slot and task are given back when it closes: 0.8.1 holds both until the swarm "
       "ends, so after max_connections connections had come and gone every new one was refused, silently",
       "correctness (docs/bridge.md, What it does: Connections)", True),
    _r("libp2p.io.trio:TrioTCPStream.read", _P + "_buffered_tcp_read", "c606ac89ec9d",
       "up to 64 KiB per socket read, served from a buffer: 0.8.1 reads each noise frame's 2-byte length "
       "and its body with a syscall each", _RELAY_BENCH, True),
    _r(_YAMUX + "YamuxStream._auto_tune_and_send_window_update", _P + "_window_update_at_half", "6ebcbd822fe7",
       "go-yamux's rule, a WINDOW_UPDATE once half the window is consumed: 0.8.1 sends one after nearly every "
       "read, and its partial-slack branch credits the bytes read twice",
       f"correctness (the double credit); {_RELAY_BENCH}", True),
    _r(_YAMUX + "Yamux._read_data_body", _P + "_data_body_from_noise_buffer", "54cc06c91ba6",
       "a DATA body already in the noise session's buffer is taken at once, not through a timeout scope and two "
       "reads", _RELAY_BENCH),
    _r(_YAMUX + "Yamux.__init__", _P + "_yamux_init", "3b11a2a71ca4",
       "the session's stream-table and write locks are QuickLocks (a free lock taken without a scheduler pass)",
       _LOCKS),
    _r(_YAMUX + "YamuxStream.__init__", _P + "_yamux_stream_init", "ab24c0709285",
       "the stream's window lock is a QuickLock", _LOCKS),
    _r("libp2p.io.trio:TrioTCPStream.__init__", _P + "_tcp_init", "4222fa993846",
       "the TCP stream's read and write locks are QuickLocks", _LOCKS),
    # Replaced: by bound_receive_windows(), when a relay is built.
    _r(_YAMUX + "YamuxStream._apply_autotune_epoch", _P + "_bounded_autotune", "30126bc3d0c1",
       "a stream's receive window stays at relay_receive_window_bytes (256 KiB): 0.8.1 doubles it up to 16 MiB "
       "while the reader keeps reading, however slowly (a fast peer's ~14,000 messages queued unread, its "
       "keepalive behind them)", "correctness (docs/bridge.md, What it does: Backpressure)", True),
    # Replaced: by apply(host), on that host's objects.
    _r("libp2p.network.auto_connector:AutoConnector.maybe_connect", _P + "_no_auto_dials", "018fac95eafc",
       "no redials of every peer ever seen (light clients long gone) to keep the connection count; the bridge "
       "dials its static peers only", "correctness (docs/bridge.md, What it does: Static peers)", True),
    _r("libp2p.host.basic_host:BasicHost.set_stream_handler", _P + "gate_stream_handlers", "3c1f7a98f927",
       "every stream handler runs through StreamGate: inbound streams capped per peer and in all (py-libp2p has "
       "no stream limits), a handler's error costs its stream, not the connection",
       "correctness (docs/reliability.md; docs/bridge.md, What it does: Inbound streams)", True),
    # Overridden: WakuRelayRouter (ingest/relay/gossipsub.py).
    _o(_GOSSIP + "__init__", _G + "WakuRelayRouter.__init__", "aa2c7451de9a",
       "the reference nodes' parameters (D 6/4/8, Dlazy 6, heartbeat 1 s); adaptive gossip (heartbeat moved to "
       "30-120 s), spam protection (10 msg/s per forwarder, us included) and eclipse protection off",
       "correctness (interop with nwaku)"),
    _o(_GOSSIP + "add_peer", _G + "WakuRelayRouter.add_peer", "01b648c9e80b",
       "/vac/waku/relay/2.0.0(-beta2) accepted with gossipsub v1.1 semantics: 0.8.1 raises for any id but "
       "/meshsub/* and /floodsub/*", "correctness (interop)", True),
    _o(_GOSSIP + "remove_peer", _G + "WakuRelayRouter.remove_peer", "bc0ead5b37c8",
       "the peer's wire protocol id forgotten with it", "correctness"),
    _o(_GOSSIP + "_check_equivocation", _G + "WakuRelayRouter._check_equivocation", "4fc307cdaab3",
       "off: 0.8.1 keys it by from+seqno, empty for every StrictNoSign message, so the 2nd distinct message "
       "was refused (and every message kept forever)", "correctness", True),
    _o(_GOSSIP + "_check_spam_protection", _G + "WakuRelayRouter._check_spam_protection", "8fc21f9afd7d",
       "off: 10 msg/s per forwarder and topic, our own publishes included", "correctness"),
    _o(_GOSSIP + "_get_adaptive_gossip_peers_count", _G + "WakuRelayRouter._get_adaptive_gossip_peers_count",
       "9649a5fc46dd", "gossip to max(Dlazy, 0.25 x peers), go-libp2p's and nim-libp2p's rule",
       "correctness (interop)", True),
    _o(_GOSSIP + "gossip_heartbeat", _G + "WakuRelayRouter.gossip_heartbeat", "ee20b04ca5bd",
       "at most 5,000 message ids per IHAVE (go-libp2p, nim-libp2p); 0.8.1 sends the whole gossip window",
       "correctness (interop)", True),
    _o(_GOSSIP + "publish", _G + "WakuRelayRouter.publish", "b978282af462",
       "forwards by the content-addressed id: no spam or equivocation check, no from+seqno cache key, no signed "
       "peer record on every message; own publishes flooded to every subscribed peer (nwaku's floodPublish)",
       "correctness", True),
    _o(_GOSSIP + "_handle_dropped_rpc", _G + "WakuRelayRouter._handle_dropped_rpc", "c81733f1db84",
       "outbound drops counted (forward_queue_full) and logged, not silent", "correctness"),
    # Overridden: RelayMessageCache.
    _o("libp2p.pubsub.mcache:MessageCache.put", _G + "RelayMessageCache.put", "bb1f48334200",
       "the gossip cache keyed by the relay message id: 0.8.1 keys by from+seqno, so every unsigned message "
       "collides and IWANT serves only the first", "correctness", True),
    # Overridden: RelayPubsub.
    _o(_PUBSUB + "__init__", _G + "RelayPubsub.__init__", "fc7e7f95ffc4",
       "StrictNoSign with sha256(data) ids; SeenCache (time buckets) in place of LastSeenCache, whose thread "
       "sweeps the whole dict under a lock every minute (~50 ms with the relay blocked at 4,000 msg/s)",
       "correctness"),
    _o(_PUBSUB + "publish", _G + "RelayPubsub.publish", "5e875e00e471",
       "StrictNoSign publish (data and topic only: 0.8.1 fills from, seqno, signature, key), paced by the "
       "slowest peer's outbound queue", "correctness (interop)"),
    _o(_PUBSUB + "push_msg", _G + "RelayPubsub.push_msg", "1531483ab4d7",
       "the WakuMessage validator, RLN's check, the content-id seen cache and a sink with backpressure: 0.8.1 "
       "verifies signatures, keys by from+seqno and drops on a full channel", "correctness"),
    _o(_PUBSUB + "notify_subscriptions", _G + "RelayPubsub.notify_subscriptions", "2fb1385e4bbf",
       "a full subscription channel counted and logged, not silent", "correctness"),
    _o(_PUBSUB + "continuously_read_stream", _G + "RelayPubsub.continuously_read_stream", "ac0c4ad87ca3",
       "frames through the buffered FrameReader (0.8.1 reads 1 byte at a time, a yamux update each), messages "
       "processed inline (backpressure; 0.8.1 spawns a task per message), a frame that does not parse resets "
       "the stream (0.8.1's DecodeError escaped)", "docs/bridge.md, Benchmark (818 -> 1,692 frames/s)", True),
    _o(_PUBSUB + "handle_sending_messages", _G + "RelayPubsub.handle_sending_messages", "4eb0b978f9c4",
       "outbound queue 4,096 RPCs (0.8.1: 32), the RPCs queued during a write merged in one frame, paced per "
       "peer (250 messages/s, burst 16)", "docs/decisions.md, Real clients: relay out paced per peer"),
    # Overridden: PlainWebsocket (ingest/host.py).
    _o("libp2p.transport.websocket.transport:WebsocketTransport.can_listen", _H + "PlainWebsocket.can_listen",
       "46288eb8dc56", "a /ws listener beside a /wss one is served without TLS: 0.8.1 serves every listener "
       "with its one TLS context (js-waku's ws dials timed out)", "correctness", True),
    _o("libp2p.transport.websocket.transport:WebsocketTransport.can_dial", _H + "PlainWebsocket.can_dial",
       "bf6c9ded2f68", "the plain listener dials nothing (the host's websocket transport dials ws and wss)",
       "correctness"),
    # Overridden: ConnectionNotifee (here): the no-ops _notify_who_listens recognises.
    _o(_NOTIFEE + "opened_stream", _P + "ConnectionNotifee.opened_stream", "b66e8ac946cf",
       "a no-op the patched Swarm._notify skips", _NOTIFY),
    _o(_NOTIFEE + "closed_stream", _P + "ConnectionNotifee.closed_stream", "c83e828eab9f",
       "a no-op the patched Swarm._notify skips", _NOTIFY),
    _o(_NOTIFEE + "listen", _P + "ConnectionNotifee.listen", "d186de2e10ae", "a no-op", _NOTIFY),
    _o(_NOTIFEE + "listen_close", _P + "ConnectionNotifee.listen_close", "f89d0a048b1b", "a no-op", _NOTIFY),
    # Overridden: trio's lock (not py-libp2p; fingerprinted in the installed trio).
    _o("trio._sync:_LockImpl.acquire", _P + "QuickLock.acquire", "adc5c8bce8b8",
       "a free lock taken without a pass through the scheduler (every 16th free take still yields)", _LOCKS),
    # Relied on: the code ours copies from, mirrors, or whose details it depends on.
    _d(_GOSSIP + "_get_peers_to_send", _G + "WakuRelayRouter._forward_targets", "1d2d334126ca",
       "forwarded messages outside the mesh fast path take 0.8.1's selection"),
    _d(_GOSSIP + "heartbeat", _G + "WakuRelayRouter", "5e68bdb5a65b",
       "calls gossip_heartbeat and _adapt_gossip_parameters (kept off by adaptive_gossip_enabled)"),
    _d("libp2p.pubsub.mcache:MessageCache.__init__", _G + "RelayMessageCache", "5ca688535eda",
       "msgs and history, which put_with_id fills"),
    _d(_PUBSUB + "_handle_new_peer", _G + "RelayPubsub.handle_sending_messages", "305ba4224e61",
       "starts the per-peer sender with the stream and the RpcQueue it reads"),
    _d("libp2p.pubsub.rpc_queue:RpcQueue.__init__", _G + "RelayPubsub.handle_sending_messages", "29b912ed933a",
       "its _queue, whose max_size the sender deepens"),
    _d("libp2p.pubsub.rpc_queue:PriorityQueue.pop", _G + "RelayPubsub.handle_sending_messages", "55ef546dd5a7",
       "popped without waiting to merge queued RPCs"),
    _d("libp2p.pubsub.rpc_queue:PriorityQueue.push", _G + "RelayPubsub.handle_sending_messages", "998c43f9b739",
       "refuses past max_size"),
    _d("libp2p.pubsub.pubsub_notifee:PubsubNotifee.opened_stream", _P + "_QUIET_STREAM_CALLBACKS", "b0e08b02576c",
       "a no-op (a bare checkpoint) _notify_who_listens skips"),
    _d("libp2p.pubsub.pubsub_notifee:PubsubNotifee.closed_stream", _P + "_QUIET_STREAM_CALLBACKS", "21a58180cbef",
       "a no-op _notify_who_listens skips"),
    _d("libp2p.network.tag_store:TagStoreNotifee.opened_stream", _P + "_QUIET_STREAM_CALLBACKS", "a2478e3d7b58",
       "a no-op _notify_who_listens skips"),
    _d("libp2p.network.tag_store:TagStoreNotifee.closed_stream", _P + "_QUIET_STREAM_CALLBACKS", "8645d788a5ab",
       "a no-op _notify_who_listens skips"),
    _d("libp2p.host.basic_host:_IdentifyNotifee.opened_stream", _P + "_QUIET_STREAM_CALLBACKS", "7202a6f0b3fa",
       "a no-op _notify_who_listens skips"),
    _d("libp2p.host.basic_host:_IdentifyNotifee.closed_stream", _P + "_QUIET_STREAM_CALLBACKS", "2ca1ed587438",
       "a no-op _notify_who_listens skips"),
    _d("libp2p.security.secure_session:SecureSession._drain", _P + "_data_body_from_noise_buffer", "a697c9f38d7b",
       "takes bytes of the decrypted noise buffer (high_watermark, low_watermark)"),
    _d(_YAMUX + "Yamux.open_stream", _H + "write_in_one_frame", "f3e0ef79ec21",
       "a stream registered with the session as open_stream does, written with SYN on its DATA frame "
       f"({_ONE_FRAME})"),
    _d(_YAMUX + "YamuxStream.write", _H + "write_on_stream", "d87f74dfb53a",
       "its checks (closed for sending, closed, the send window) and its DATA frame, for a write the window "
       "holds, on a kept push stream"),
    _d(_YAMUX + "Yamux._write_frame", _H + "write_on_stream", "16ff969cdd0d",
       "the session's write lock around the secured connection's write"),
    _d("libp2p.network.stream.net_stream:NetStream.write", _H + "write_on_stream", "b0662734215d",
       "an OPEN stream takes writes (its state checks)"),
    _d(_YAMUX + "YamuxStream.read", _H + "yamux_until_end", "ca585f2199fd",
       "the wait on the session's event for the stream, without the read's window updates"),
    _d(_SWARM + "_handle_inbound_connection", _P + "_inbound_until_closed", "0800fdf9770e",
       "takes the inbound slot and gives it back when _do_handle_inbound_connection returns"),
    _d(_SWARM + "_dial_with_retry", _H + "_dial_addr", "bd2025f00c84",
       "a dial with retries of its own: this loop over single attempts (its backoff, no retry after a peer id "
       "mismatch), the swarm's retry setting untouched"),
    _d(_SWARM + "_dial_addr_single_attempt", _H + "_dial_addr", "54e3f8e1ea5b", "one attempt at one address"),
    _d(_SWARM + "_calculate_backoff_delay", _H + "_dial_addr", "df0939b32b15", "the delay between two attempts"),
)

# The py-libp2p originals the registry's class-level replacements stand in for.
_ORIGINALS: dict[str, Callable[..., Any]] = {
    _SWARM + "_notify": _PLAIN_SWARM_NOTIFY,
    _SWARM + "_do_handle_inbound_connection": _PLAIN_INBOUND,
    "libp2p.io.trio:TrioTCPStream.read": _PLAIN_TCP_READ,
    "libp2p.io.trio:TrioTCPStream.__init__": _PLAIN_TCP_INIT,
    _YAMUX + "YamuxStream._auto_tune_and_send_window_update": _PLAIN_WINDOW_UPDATE,
    _YAMUX + "YamuxStream._apply_autotune_epoch": _PLAIN_AUTOTUNE,
    _YAMUX + "YamuxStream.__init__": _PLAIN_YAMUX_STREAM_INIT,
    _YAMUX + "Yamux._read_data_body": _PLAIN_READ_DATA_BODY,
    _YAMUX + "Yamux.__init__": _PLAIN_YAMUX_INIT,
}


def resolve(name: str) -> Any:
    """The object a "module:qualified.name" names."""
    module, _, qualname = name.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def upstream_code(record: Adaptation) -> Any:
    """The upstream function or method `record` was written against (its original, for a
    class-level replacement that `apply` has put in place already)."""
    return _ORIGINALS.get(record.upstream) or resolve(record.upstream)


def fingerprint(code: Any) -> str:
    """The first 12 hex digits of the sha256 of `code`'s source."""
    return hashlib.sha256(inspect.getsource(code).encode()).hexdigest()[:12]


def changed_upstream() -> list[Adaptation]:
    """The records whose upstream source is no longer the one fingerprinted (or is gone)."""
    out = []
    for record in REGISTRY:
        try:
            current = fingerprint(upstream_code(record))
        except (AttributeError, ImportError, OSError, TypeError):
            current = "gone"
        if current != record.fingerprint:
            out.append(record)
    return out
