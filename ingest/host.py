"""A py-libp2p host as the bridge and the publisher use it: TCP, websocket and secure websocket
(wss) transports, noise as the only security (no plaintext, no secio, no TLS), yamux and mplex;
the addresses it advertises (identify, the `listening on` lines) are dialable ones: the
configured announce addresses, else the listen addresses with a wildcard host replaced by this
machine's addresses."""
from __future__ import annotations

import contextlib
import errno
import logging
import re
import socket
import ssl
import struct
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost, IMuxedConn, INetStream
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as new_x25519_key_pair
from libp2p.custom_types import StreamHandlerFn, TProtocol
from libp2p.io.exceptions import IOException
from libp2p.network.config import ConnectionConfig
from libp2p.network.exceptions import SwarmException
from libp2p.network.stream.net_stream import StreamState
from libp2p.network.swarm import Swarm
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.peer.peerstore import PeerStore
from libp2p.rcmgr import ResourceLimits, ResourceManager
from libp2p.rcmgr.connection_limits import ConnectionLimits
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.exceptions import MuxedConnError, MuxedStreamError
from libp2p.stream_muxer.mplex.mplex import MPLEX_PROTOCOL_ID, Mplex
from libp2p.stream_muxer.yamux.yamux import (
    DEFAULT_WINDOW_SIZE,
    FLAG_FIN,
    FLAG_SYN,
    TYPE_DATA,
    TYPE_WINDOW_UPDATE,
    YAMUX_HEADER_FORMAT,
    Yamux,
    YamuxStream,
)
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.transport.websocket.multiaddr_utils import parse_websocket_multiaddr
from libp2p.transport.websocket.transport import WebsocketTransport
from multiaddr import Multiaddr

from ingest import p2p_patches


class ListenError(Exception):
    """A listen address cannot be used; the message is one line for the user."""


def listen_addrs(host: str, tcp_port: int, ws_port: int, wss_port: int = -1) -> list[multiaddr.Multiaddr]:
    """The TCP listener, the websocket one unless ws_port is negative (port 0: any free), the
    secure websocket one unless wss_port is negative (give it a fixed port: py-libp2p 0.8.1
    reports a wrong port for a wss listener on port 0 next to another one)."""
    ip = "ip6" if ":" in host else "ip4"
    addrs = [multiaddr.Multiaddr(f"/{ip}/{host}/tcp/{tcp_port}")]
    if ws_port >= 0:
        addrs.append(multiaddr.Multiaddr(f"/{ip}/{host}/tcp/{ws_port}/ws"))
    if wss_port >= 0:
        addrs.append(multiaddr.Multiaddr(f"/{ip}/{host}/tcp/{wss_port}/wss"))
    return addrs


def tls_server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """The wss listener's TLS context (PEM certificate chain and key)."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


def local_ips() -> list[str]:
    """This machine's IPv4 addresses, loopback first (what a wildcard listener is reachable on)."""
    ips = ["127.0.0.1"]
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = str(info[4][0])  # (an AF_INET address: a str already)
            if ip not in ips:
                ips.append(ip)
    except OSError:
        pass
    try:  # the address of the default route, without sending anything
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            ip = s.getsockname()[0]
            if ip not in ips:
                ips.append(ip)
    except OSError:
        pass
    return ips


def advertised(candidates: Sequence[multiaddr.Multiaddr], announce: Sequence[multiaddr.Multiaddr] = ()
               ) -> list[multiaddr.Multiaddr]:
    """What the host advertises: `announce` when given; else the candidates with a 0.0.0.0
    host replaced by each local address (nobody can dial 0.0.0.0)."""
    if announce:
        return list(announce)
    out: list[multiaddr.Multiaddr] = []
    for addr in candidates:
        text = str(addr)
        if text.startswith("/ip4/0.0.0.0/"):
            out += [multiaddr.Multiaddr(text.replace("/ip4/0.0.0.0/", f"/ip4/{ip}/", 1)) for ip in local_ips()]
        else:
            out.append(addr)
    return out


def check_listen_addrs(addrs: Sequence[multiaddr.Multiaddr]) -> None:
    """Fail early, with one line, when a fixed port is taken (py-libp2p's own error is a trace)."""
    for addr in addrs:
        host, port = _ip_port(addr)
        if host is None or port == 0:
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                why = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
                raise ListenError(f"cannot listen on {addr}: {why}") from None


def _ip_port(addr: multiaddr.Multiaddr) -> tuple[str | None, int]:
    names = {p.name for p in addr.protocols()}
    ip = next((addr.value_for_protocol(p) for p in ("ip4", "ip6") if p in names), None)
    port = int(addr.value_for_protocol("tcp")) if "tcp" in names else 0
    return ip, port


class _OneLine(logging.Filter):
    """py-libp2p logs expected network failures (a peer gone, a dial refused, a reset stream)
    with whole tracebacks: keep the first line of the message and the exception's one-line
    summary."""

    def filter(self, record: logging.LogRecord) -> bool:
        shown = getattr(record, "waku_demoted", None)
        if shown is not None:  # demoted by this filter on another handler already: the same answer
            return bool(shown)
        if record.name.startswith("libp2p.transport") and str(record.msg).startswith(DIAL_FAILURES):
            # a refused dial, logged at ERROR by the transport: the dialer (a client's connect,
            # the bridge's static-peer redial) reports it once in its own words
            return _demoted(record)
        if record.name.startswith("libp2p") and record.levelno >= logging.ERROR and _is_disconnect(record):
            # a peer that reset or closed its connection, or left (py-libp2p logs some of these at
            # ERROR, a redial of the gone peer's websocket address with a traceback): ordinary
            return _demoted(record)
        if record.name.startswith("libp2p") and record.levelno == logging.WARNING and _is_disconnect(record):
            # the same at WARNING (a connection closed inside a frame: the peer went away): INFO
            record.levelno, record.levelname = logging.INFO, "INFO"
        if record.name.startswith("libp2p") and "\n" in str(record.msg):
            lines = [ln.strip() for ln in record.getMessage().splitlines() if ln.strip()]
            record.msg, record.args = " ".join(lines[:2]), None
            if "protocol not supported" in record.msg or "protocols not supported" in record.msg:
                # a peer that does not speak a protocol we tried (light clients and relay, say):
                # expected, not an error
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
                return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        if record.levelno < logging.ERROR:
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                record.msg = f"{record.getMessage().splitlines()[0]} ({type(exc).__name__}: {exc})"
                record.args = None
                record.exc_info = None
                record.exc_text = None
            else:
                text = record.getMessage()
                if "\n" in text:
                    record.msg, record.args = text.splitlines()[0], None
        return True


# py-libp2p's ERROR records of a failed dial (TCP, websocket), logged with their cause.
DIAL_FAILURES = ("Failed to open TCP stream", "Failed to connect to ws")
# What a peer's ordinary disconnect looks like in a py-libp2p record's text.
DISCONNECT = re.compile(r"reset by peer|broken pipe|connection refused|all attempts to connect|"
                        r"(connection|stream|resource|yamux|mplex)( is)? closed|closedresource|brokenresource|"
                        r"\beof\b|eoferror|streameof|incomplete ?read|errno (104|32|111)", re.IGNORECASE)


def _is_disconnect(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None and isinstance(exc, NETWORK_ERRORS):
        return True
    return bool(DISCONNECT.search(record.getMessage())) or bool(exc is not None and DISCONNECT.search(str(exc)))


def _demoted(record: logging.LogRecord) -> bool:
    """The record as one DEBUG line (its first line and its exception's one-line summary, no
    traceback); printed only where the logger's DEBUG is on."""
    lines = [ln.strip() for ln in record.getMessage().splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is not None:
        text = f"{text} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    record.msg, record.args, record.exc_info, record.exc_text = text, None, None, None
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    record.waku_demoted = shown = logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
    return shown


def quiet_network_errors() -> None:
    """One line per expected network error from py-libp2p (no tracebacks below ERROR), and an
    ordinary disconnect (a peer reset or closed its connection, a dial of a gone peer) one DEBUG
    line even where py-libp2p logs it at ERROR. py-libp2p detaches its loggers (propagate off,
    no handler: Python's last-resort handler printed them raw); they go through the process's
    handlers again, WARNING and up."""
    import os

    lib = logging.getLogger("libp2p")
    if not os.environ.get("LIBP2P_DEBUG"):
        lib.propagate = True
        lib.setLevel(logging.WARNING)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _OneLine) for f in handler.filters):
            handler.addFilter(_OneLine())


# What a stream ends with when the peer resets it, closes it or goes away mid-answer.
NETWORK_ERRORS = (IOException, MuxedStreamError, MuxedConnError, OSError, EOFError, trio.BrokenResourceError,
                  trio.ClosedResourceError)


@dataclass(frozen=True)
class StreamLimits:
    """Inbound streams open at once, per remote peer and in all (every protocol, relay included:
    relay holds one per peer). A stream over either cap is refused before its handler runs:
    answered 429 unread where its protocol has that answer (StreamGate.refuse_with), else reset."""
    per_peer: int = 64
    total: int = 4096


class StreamGate:
    """Counts inbound streams while their handlers run and refuses a stream over the caps (its
    protocol's 429 when registered with `refuse_with`, else a reset): the libp2p resource
    manager's stream limits, for py-libp2p, which has none. Installed on a host by
    `build_host(stream_gate=...)` (`p2p_patches.gate_stream_handlers`); `on_refused(protocol,
    scope)` counts refusals."""

    def __init__(self, limits: StreamLimits,
                 on_refused: Callable[[str, str], None] | None = None,
                 on_failed: Callable[[str, str], None] | None = None) -> None:
        self.limits = limits
        self.on_refused = on_refused
        # A handler that raises must not take the connection (py-libp2p runs handlers in the
        # connection's nursery: one StreamReset written to a peer that gave up killed the whole
        # swarm). on_failed(protocol, kind): kind "network" (the peer reset, closed or left) or
        # "handler" (a bug: logged once per protocol with its one-line cause).
        self.on_failed = on_failed
        # protocol -> the framed answer a refused stream of it gets instead of a reset (the
        # request/response protocols' 429, as nwaku answers a request its limiter rejects,
        # without reading it: request_id "N/A"); see `refuse_with`.
        self.refusals: dict[str, bytes] = {}
        self._logged: set[str] = set()
        self.total = 0
        self.by_peer: Counter[ID] = Counter()

    def wrap(self, protocol: str, handler: StreamHandlerFn) -> StreamHandlerFn:
        async def gated(stream: INetStream) -> None:
            peer = stream.muxed_conn.peer_id
            scope = ("total" if self.total >= self.limits.total
                     else "peer" if self.by_peer[peer] >= self.limits.per_peer else None)
            if scope is not None:
                if self.on_refused is not None:
                    self.on_refused(protocol, scope)
                logging.getLogger("ingest.host").debug("stream %s from %s refused: %s cap reached",
                                                       protocol, peer, scope)
                answer = self.refusals.get(protocol)
                if answer is not None and await _answer_quietly(stream, answer):
                    return
                try:
                    await stream.reset()
                except Exception:  # noqa: BLE001 - the peer may be gone already
                    pass
                return
            self.total += 1
            self.by_peer[peer] += 1
            try:
                await handler(stream)
            except NETWORK_ERRORS as exc:
                self._failed(protocol, "network", exc)
                await _reset_quietly(stream)
            except Exception as exc:  # noqa: BLE001 - one stream's failure, never the connection's
                self._failed(protocol, "handler", exc)
                await _reset_quietly(stream)
            finally:
                self.total -= 1
                self.by_peer[peer] -= 1
                if not self.by_peer[peer]:
                    del self.by_peer[peer]

        return gated

    def refuse_with(self, protocol: str, answer: bytes) -> None:
        """A stream of `protocol` over the caps is answered `answer` (framed) and closed, not
        reset: a client of a request/response protocol reads its status (429)."""
        self.refusals[protocol] = answer

    def _failed(self, protocol: str, kind: str, exc: BaseException) -> None:
        if self.on_failed is not None:
            self.on_failed(protocol, kind)
        lg = logging.getLogger("ingest.host")
        if kind == "handler" and protocol not in self._logged:
            self._logged.add(protocol)
            lg.warning("stream %s: handler failed: %s: %s (stream reset; later failures of this protocol "
                       "are counted in waku_bridge_stream_failures_total)", protocol, type(exc).__name__,
                       str(exc).splitlines()[0] if str(exc) else "")
        else:
            lg.debug("stream %s ended: %s: %s", protocol, type(exc).__name__, exc)


REFUSAL_WRITE_S = 1.0  # a refused stream's answer: written within this, else the stream is reset


async def _answer_quietly(stream: INetStream, answer: bytes) -> bool:
    """Write a refusal and close the stream, unread; False when that did not happen in time."""
    with trio.move_on_after(REFUSAL_WRITE_S):
        try:
            await stream.write(answer)
            await stream.close()
            return True
        except Exception:  # noqa: BLE001 - the peer may be gone already
            return False
    return False


async def _reset_quietly(stream: INetStream) -> None:
    try:
        await stream.reset()
    except Exception:  # noqa: BLE001 - gone already
        pass


def _is_plain_ws(addr: multiaddr.Multiaddr) -> bool:
    try:
        return not parse_websocket_multiaddr(addr).is_wss
    except (ValueError, KeyError):
        return False


class PlainWebsocket(WebsocketTransport):
    """The /ws listeners of a host that also listens on /wss. py-libp2p 0.8.1's websocket
    transport serves every listener it creates with its one TLS context, so beside a wss listener
    a /ws port answered TLS and plain websocket clients (js-waku's ws dial) timed out. This
    transport has no TLS context, listens on /ws addresses only, is asked before the other
    (listen_order), and dials nothing (the host's own websocket transport dials both)."""

    def listen_order(self) -> int:
        return -1

    def can_listen(self, maddr: multiaddr.Multiaddr) -> bool:
        return _is_plain_ws(maddr)

    def can_dial(self, maddr: multiaddr.Multiaddr) -> bool:
        return False


MUXERS: dict[str, tuple[TProtocol, type[IMuxedConn]]] = {"yamux": (TProtocol(YAMUX_PROTOCOL_ID), Yamux),
                                                         "mplex": (TProtocol(MPLEX_PROTOCOL_ID), Mplex)}


async def dial(host: IHost, info: PeerInfo, timeout: float = 10.0, retries: int | None = None) -> None:
    """Connect to `info` (a PeerInfo) now, whatever py-libp2p remembers of earlier attempts.

    The caller owns the retry policy (the bridge's static-peer backoff, a client's reconnect
    loop); py-libp2p 0.8 adds two memories that defeat it after a peer restarts:
    - a negative cache: once every address of a peer failed, each dial is refused for 60 s
      without trying ("recently failed all addresses"), so a peer back after 3 s is unreachable
      for a minute;
    - a connection whose close began but did not finish (the peer was killed while streams
      were open) stays listed, and dials reuse it: every new stream on it fails.
    Both are dropped here before dialing. Each call is counted on the host
    (`waku_dial_attempts`, nwaku's `libp2p_total_dial_attempts_total`).

    `retries` (None: py-libp2p's way): the addresses of `info` dialled one after another by this
    call alone, each `retries` more times (`_dial_addr`: this dial's own, the swarm's retry setting
    untouched, so dials running meanwhile keep theirs). py-libp2p's way retries an address 3 times
    (0.1/0.2/0.4 s apart: a refused connection fails after ~0.7 s, seconds under load) and waits
    for a dial of the same peer already running elsewhere (the discv5 or static-peer loop's, which
    may hang on a node shutting down); 0 is nim-libp2p's dial, one attempt (nwaku's lightpush
    client answers `dial_failure` at once)."""
    host.waku_dial_attempts = getattr(host, "waku_dial_attempts", 0) + 1  # type: ignore[attr-defined]
    swarm = host.get_network()
    forget_closed(host, info.peer_id)
    unblock = getattr(swarm, "unblock_peer", None)
    if unblock is not None:
        unblock(info.peer_id)
    with trio.fail_after(timeout):
        if retries is None:
            await host.connect(info)
            return
        if swarm.connections.get(info.peer_id):
            return
        host.get_peerstore().add_addrs(info.peer_id, info.addrs, 120)
        errors: list[str] = []
        for addr in info.addrs:
            try:
                await _dial_addr(cast(Swarm, swarm), addr, info.peer_id, retries)
                return
            except Exception as exc:  # noqa: BLE001 - this address failed: the next one
                errors.append(f"{addr}: {type(exc).__name__}: {exc}")
        raise ConnectionError(f"unable to connect to {info.peer_id}: " + "; ".join(errors or ["no address"]))


async def _dial_addr(swarm: Swarm, addr: Multiaddr, peer_id: ID, retries: int) -> None:
    """`Swarm.dial_addr` with `retries` of this call's own: py-libp2p 0.8.1's `_dial_with_retry`
    (its backoff between attempts, no retry after a peer id mismatch, whose addresses are
    dropped) over its single attempts, reading the swarm's retry setting only for the backoff's
    delays (p2p_patches.REGISTRY fingerprints the three)."""
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            await swarm._dial_addr_single_attempt(addr, peer_id)
            return
        except Exception as exc:  # noqa: BLE001 - as py-libp2p's: any failure is retried
            last = exc
            if "Peer ID mismatch" in f"{exc} {exc.__cause__ or ''}":
                with contextlib.suppress(Exception):
                    swarm.peerstore.clear_addrs(peer_id)
                swarm._negative_peer_cache.evict(str(peer_id))
                break
            if attempt < retries:
                await trio.sleep(swarm._calculate_backoff_delay(attempt))
    if isinstance(last, SwarmException):
        raise last
    raise SwarmException(f"Failed to connect after {retries} attempts") from last


def forget_closed(host: IHost, peer_id: ID) -> int:
    """Drop connections to `peer_id` that are closed or closing but still listed by the swarm;
    how many were dropped."""
    swarm = cast(Swarm, host.get_network())  # py-libp2p's one INetworkService
    conns = swarm.connections.get(peer_id) or []
    if not isinstance(conns, list):
        conns = [conns]
    dropped = 0
    for conn in list(conns):
        muxed = getattr(conn, "muxed_conn", None)
        closing = getattr(conn, "event_closed", None)
        if (closing is not None and closing.is_set()) or bool(getattr(muxed, "is_closed", False)):
            swarm.remove_conn(conn)  # type: ignore[arg-type]  # the swarm lists its SwarmConns as INetConn
            dropped += 1
    return dropped


def _yamux_conn(host: IHost, peer_id: ID) -> Yamux | None:
    """The yamux session of an open connection to `peer_id`, if there is one."""
    for conn in cast(Swarm, host.get_network()).get_connections(peer_id):
        muxed = getattr(conn, "muxed_conn", None)
        if isinstance(muxed, Yamux) and not muxed.is_closed and not muxed.event_shutting_down.is_set():
            return muxed
    return None


async def take_now_or_wait(sem: trio.Semaphore) -> None:
    """Take a trio semaphore at once when it is free, else wait for it: `acquire()` passes
    through the scheduler even when a unit is there (a loop turn of the trio thread). Locks need
    no such call: `p2p_patches.apply` makes the sessions' locks `QuickLock`s."""
    try:
        sem.acquire_nowait()
    except trio.WouldBlock:
        await sem.acquire()


async def write_in_one_frame(host: IHost, peer_id: ID, data: bytes) -> YamuxStream | None:
    """A new stream to `peer_id` that carries `data` and is closed on our side, sent as one
    noise message and one syscall: yamux's SYN on the DATA frame (the spec lets SYN ride on a
    data or window update frame; go-yamux and js-libp2p open the stream from either) and the FIN
    frame behind it. py-libp2p's open, write and close send three frames, each encrypted and
    written on its own, behind the swarm's and the resource manager's bookkeeping: for a push to
    a client that reads one message a stream (go-waku's filter light client) that was most of its
    cost. The stream is registered with the session as `Yamux.open_stream` does, so the peer's
    answer, close or reset reaches it (`yamux_until_end`). The session's semaphore and locks
    (`QuickLock`s) are taken at once when free: the socket write is the pass through the scheduler.
    None when the peer has no yamux connection or `data` exceeds the initial window: the caller
    takes the usual way."""
    muxed = _yamux_conn(host, peer_id)
    if muxed is None or len(data) > DEFAULT_WINDOW_SIZE:
        return None
    await take_now_or_wait(muxed.stream_backlog_semaphore)
    async with muxed.streams_lock:
        if muxed.event_shutting_down.is_set():
            muxed.stream_backlog_semaphore.release()
            return None
        stream_id = muxed.next_stream_id
        muxed.next_stream_id += 2
        stream = YamuxStream(stream_id, muxed, True)
        stream._owns_backlog_slot = True
        stream.send_window -= len(data)
        muxed.streams[stream_id] = stream
        muxed.stream_buffers[stream_id] = bytearray()
        muxed.stream_events[stream_id] = trio.Event()
    frames = (struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_DATA, FLAG_SYN, stream_id, len(data)) + data
              + struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_WINDOW_UPDATE, FLAG_FIN, stream_id, 0))
    try:
        async with muxed._write_lock:  # Yamux._write_frame's, without its logging and extra checkpoint
            await muxed.secured_conn.write(frames)
    except BaseException:
        stream.closed = stream.send_closed = stream.recv_closed = True
        with trio.CancelScope(shield=True):
            await muxed._finalize_stream(stream, fully_closed=True)
        raise
    stream.send_closed = True
    await muxed._finalize_stream(stream, fully_closed=stream.recv_closed)
    return stream


# The most a fast write sends as one frame (below a noise message's 65,535 bytes).
FAST_WRITE_MAX = 32 * 1024


async def write_on_stream(stream: INetStream, data: bytes) -> None:
    """`stream.write(data)`, for an open yamux stream whose send window holds `data` (at most
    FAST_WRITE_MAX) as one DATA frame packed here and written under the session's write lock:
    one noise message and one syscall, without the per-write work around it in py-libp2p 0.8.1
    (NetStream's state lock, YamuxStream.write's stream and window locks, the debug lines it and
    `Yamux._write_frame` format even when debug is off, the frame unpacked again to name its
    flags, a checkpoint). The checks are YamuxStream.write's: closed for sending, closed, the
    window. Every other case takes the stream's own write. For one writer a stream (a kept push
    stream): the window is taken before the lock, so two concurrent writers could interleave."""
    muxed = getattr(stream, "muxed_stream", None)
    n = len(data)
    if (type(muxed) is not YamuxStream or getattr(stream, "_state", None) is not StreamState.OPEN
            or muxed.send_closed or muxed.closed or muxed.send_window < n or n > FAST_WRITE_MAX):
        await stream.write(data)
        return
    muxed.send_window -= n
    conn = muxed.conn
    async with conn._write_lock:
        await conn.secured_conn.write(struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_DATA, 0, muxed.stream_id, n) + data)


async def yamux_until_end(stream: YamuxStream) -> str:
    """Until the peer ends a yamux stream it is not expected to write on (a push stream): "eof"
    (it closed) or "reset". What it sends meanwhile (multistream-select's answer) is dropped.
    Waits on the session's event for the stream, as `YamuxStream.read` does, without the read's
    window updates and passes through the scheduler: one loop turn a frame that concerns the
    stream. A session that ends, or forgets the stream, ends the wait ("eof" unless a reset
    came). The stream's bookkeeping is freed once it is closed both ways."""
    muxed, sid = stream.conn, stream.stream_id
    while True:
        buffer = muxed.stream_buffers.get(sid)
        if buffer:
            del buffer[:]
        event = muxed.stream_events.get(sid)
        if stream.recv_closed or stream.reset_received or muxed.event_shutting_down.is_set() or event is None:
            break
        await event.wait()
        if muxed.stream_events.get(sid) is event:
            muxed.stream_events[sid] = trio.Event()
    if stream.closed and sid in muxed.streams:
        await muxed._finalize_stream(stream, fully_closed=True)
    return "reset" if stream.reset_received else "eof"


# Inbound connections in their security and muxer handshakes at once (py-libp2p's default 64): a
# light client population reconnecting after a restart queues here, not in the refusals.
PENDING_INBOUND = 128


def _connection_config(max_connections: int) -> ConnectionConfig:
    """The swarm's caps at `max_connections`, every one of them allowed inbound (no outbound
    reserve: py-libp2p keeps `min_connections` for its auto-connector, which is off here)."""
    return ConnectionConfig(max_connections=max_connections, min_connections=0, low_watermark=0,
                            high_watermark=max_connections)


def _resource_manager(max_connections: int) -> ResourceManager:
    """py-libp2p's resource manager with its connection limits at `max_connections` (its defaults
    refuse the 257th inbound connection, and its graceful degradation and circuit breaker lower
    the limits further under load, each with a log line at most): the bridge's caps are its
    settings (this one, the stream gate's), not defaults of the library. Its per-peer limits
    (8 connections, 10 new a second) stay."""
    limits = ConnectionLimits(max_pending_inbound=PENDING_INBOUND, max_pending_outbound=64,
                              max_established_inbound=max_connections, max_established_outbound=max_connections,
                              max_established_per_peer=8, max_established_total=max_connections)
    # (its own count takes the connections in their handshakes too)
    return ResourceManager(limits=ResourceLimits(max_connections=max_connections + PENDING_INBOUND),
                           connection_limits=limits, enable_graceful_degradation=False, enable_circuit_breaker=False)


def build_host(key_pair: KeyPair, addrs: Sequence[multiaddr.Multiaddr],
               muxers: Sequence[str] = ("yamux", "mplex"), *, tls_server: ssl.SSLContext | None = None,
               tls_client: ssl.SSLContext | None = None,
               announce: Sequence[multiaddr.Multiaddr] = (), stream_gate: StreamGate | None = None,
               max_connections: int | None = None, peer_store_capacity: int | None = None) -> IHost:
    """A host with the given identity whose transports cover `addrs` (TCP, plus websocket when
    an address has /ws or /wss); call ``host.run(addrs)`` to listen. Security is noise alone; the
    muxers are offered in the given order (js-waku speaks mplex only). `tls_server`: the wss
    listener's certificate; `tls_client`: how wss dials verify; `announce`: what identify
    advertises (default: the listen addresses, wildcards expanded); `stream_gate`: caps on inbound
    streams (the bridge's; clients have none); `max_connections`: connections at once, inbound
    ones included (py-libp2p's default: 300, of which 250 inbound, refused silently beyond);
    `peer_store_capacity`: peers the peer store keeps (py-libp2p's default 1,000: past it, it drops
    peers' keys and protocols, a connected one's too, and its identify then fails).
    py-libp2p as the bridge runs it: `p2p_patches.apply` (the process-wide replacements, this
    host's auto-connector redials off, the gate)."""
    websocket = any("/ws" in str(a) for a in addrs)
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=new_x25519_key_pair().private_key)},
        muxer_opt=dict(MUXERS[m] for m in muxers),
        listen_addrs=list(addrs),
        enable_tcp=True,
        enable_websocket=websocket,
        tls_server_config=tls_server,
        tls_client_config=tls_client,
        addrs_factory=lambda candidates: advertised(candidates, announce),
        connection_config=None if max_connections is None else _connection_config(max_connections),
        resource_manager=None if max_connections is None else _resource_manager(max_connections),
        peerstore_opt=None if peer_store_capacity is None else PeerStore(
            max_records=peer_store_capacity, max_peers=peer_store_capacity),
    )
    swarm = cast(Swarm, host.get_network())  # py-libp2p's one INetworkService
    if tls_server is not None and any(_is_plain_ws(a) for a in addrs):
        swarm.transport_manager.add_transport(PlainWebsocket(swarm.upgrader))
    p2p_patches.apply(host, stream_gate.wrap if stream_gate is not None else None)
    return host
