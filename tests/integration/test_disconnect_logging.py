"""A peer's ordinary disconnect is not an error in the bridge's log (issue 36 item 11): py-libp2p
logs some at ERROR, with tracebacks (a stream to a peer that reset its connection and left
redials its websocket address: `Failed to connect to ws://...` and the whole chain); with the
bridge's log set-up (ingest/host.quiet_network_errors) they are one DEBUG line, and other
errors stay errors; a disconnect py-libp2p logs at WARNING is INFO."""
from __future__ import annotations

import logging
import socket
import struct

import multiaddr
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.peerinfo import info_from_p2p_addr

from ingest.host import _OneLine, build_host, listen_addrs, quiet_network_errors

pytestmark = pytest.mark.integration

ECHO = TProtocol("/test/echo/1")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.texts.append(self.format(record))


@pytest.fixture
def capture():
    """The bridge's log set-up (as `waku-bridge run` installs it) on a capturing root handler at
    INFO; restored afterwards."""
    root, lib = logging.getLogger(), logging.getLogger("libp2p")
    saved = (root.level, lib.level, lib.propagate)
    handler = Capture()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    quiet_network_errors()
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        lib.setLevel(saved[1])
        lib.propagate = saved[2]
        for h in root.handlers:
            for f in [f for f in h.filters if isinstance(f, _OneLine)]:
                h.removeFilter(f)


def find_socket(obj, depth: int = 0, seen: set | None = None):
    """The trio socket under a py-libp2p connection (transport layers vary by address)."""
    seen = seen if seen is not None else set()
    if obj is None or id(obj) in seen or depth > 8:
        return None
    seen.add(id(obj))
    if isinstance(obj, trio.socket.SocketType):
        return obj
    for name in ("socket", "stream", "conn", "secured_conn", "muxed_conn", "read_writer", "raw_conn", "_stream",
                 "_ws", "ws", "read_writer_closer", "transport_stream"):
        found = find_socket(getattr(obj, name, None), depth + 1, seen)
        if found is not None:
            return found
    return None


def test_a_peer_that_resets_and_leaves_logs_no_error(capture):
    """A client (tcp and websocket listeners, as js-waku-less py-libp2p peers have) connects,
    talks, resets its TCP connection (RST) and goes away; the server then opens a stream to it,
    as the bridge's relay and pusher do for a peer they still hold: the redial fails. No record
    at ERROR or above, no traceback."""
    server_addrs = listen_addrs("127.0.0.1", 0, 0)
    server = build_host(create_new_key_pair(), server_addrs)

    async def echo(stream) -> None:
        data = await stream.read(1024)
        await stream.write(data)
        await stream.close()

    server.set_stream_handler(ECHO, echo)
    out: dict = {}

    async def main() -> None:
        async with server.run(server_addrs):
            target = next(str(a) for a in server.get_addrs() if "/ws/" not in str(a))
            client_addrs = listen_addrs("127.0.0.1", 0, 0)
            client = build_host(create_new_key_pair(), client_addrs)
            client.set_stream_handler(ECHO, echo)
            async with client.run(client_addrs):
                info = info_from_p2p_addr(multiaddr.Multiaddr(target))
                await client.connect(info)
                s = await client.new_stream(info.peer_id, [ECHO])
                await s.write(b"hello")
                out["echo"] = await s.read(5)
                # the server learns the client's listen addresses by identify
                with trio.fail_after(20):
                    while len(server.get_peerstore().addrs(client.get_id())) < 2:
                        await trio.sleep(0.05)
                conns = client.get_network().connections.get(info.peer_id)
                conn = conns[0] if isinstance(conns, list) else conns
                sock = find_socket(conn)
                assert sock is not None
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()  # RST
                await trio.sleep(0.5)
            # the client is gone (its listeners closed); the server opens a stream to it
            for _ in range(3):
                try:
                    with trio.fail_after(20):
                        await server.new_stream(client.get_id(), [ECHO])
                    out.setdefault("reached", 0)
                    out["reached"] += 1
                except Exception as exc:  # noqa: BLE001 - expected: the peer is gone
                    out.setdefault("failures", []).append(type(exc).__name__)
                await trio.sleep(0.2)

    trio.run(main)
    assert out["echo"] == b"hello" and len(out.get("failures", [])) == 3, out
    errors = [t for r, t in zip(capture.records, capture.texts, strict=True) if r.levelno >= logging.ERROR]
    assert errors == [], errors
    assert not any("Traceback" in t for t in capture.texts)


def test_other_libp2p_errors_stay_errors(capture):
    """Only disconnects are demoted (ERROR ones to DEBUG, WARNING ones to INFO): a py-libp2p
    error or warning that is not one keeps its level."""
    lg = logging.getLogger("libp2p.identity.identify.identify")
    lg.error("Failed to parse identify response: %s (length=%d, hex=%s)", "bad field", 3, "0a0b0c")
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError:
        logging.getLogger("libp2p.stream_muxer.yamux.yamux").error("Error in handle_incoming for peer X",
                                                                   exc_info=True)
    logging.getLogger("libp2p.stream_muxer.yamux.yamux").error(
        "Error in handle_incoming for peer X: IOException: [Errno 32] Broken pipe")
    logging.getLogger("libp2p.transport.websocket.connection").error("WebSocket read error: EOF while reading")
    logging.getLogger("libp2p.stream_muxer.yamux.yamux").warning(
        "Yamux connection closed unexpectedly for peer X: Connection closed during read operation: expected 1137 "
        "bytes but received 425 bytes. Transport: unknown.")
    logging.getLogger("libp2p.stream_muxer.mplex.mplex").warning("Received message for non-existent stream: 1")
    kept = [(r.levelname, r.getMessage()[:40]) for r in capture.records]
    assert kept == [("ERROR", "Failed to parse identify response: bad f"),
                    ("INFO", "Yamux connection closed unexpectedly for"),  # a peer gone mid-frame: INFO
                    ("WARNING", "Received message for non-existent stream")], kept
