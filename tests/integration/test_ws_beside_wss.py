"""A host listening on ws and wss at once (issue 36 item 7): the /ws port answers plain HTTP
(the websocket upgrade), the /wss port TLS with the configured certificate, and a py-libp2p
client connects over each. Before, py-libp2p's one websocket transport served its TLS context
on every listener and the /ws port answered TLS. js-waku over both: tests/interop/test_js_paging_and_transports.py."""
from __future__ import annotations

import base64
import os
import socket
import ssl

import multiaddr
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr

from ingest.host import build_host, listen_addrs, tls_server_context
from tests.conftest import free_port
from tests.integration.test_metadata import self_signed

pytestmark = pytest.mark.integration


def http_upgrade(port: int) -> bytes:
    """The first line a server sends back to a plain websocket upgrade request on `port`."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        try:
            while b"\r\n" not in data:
                chunk = sock.recv(1024)
                if not chunk:
                    break
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data.split(b"\r\n", 1)[0]


def tls_handshake(port: int) -> tuple[str, dict]:
    """TLS version and peer certificate of the server on `port` (certificate not verified)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.version() or "", tls.getpeercert(binary_form=True)


def test_ws_and_wss_listen_side_by_side(tmp_path):
    cert, key = self_signed(tmp_path)
    ws_port, wss_port = free_port(), free_port()
    addrs = listen_addrs("127.0.0.1", 0, ws_port, wss_port)
    server = build_host(create_new_key_pair(), addrs, tls_server=tls_server_context(cert, key))
    client_tls = ssl.create_default_context()
    client_tls.check_hostname = False
    client_tls.verify_mode = ssl.CERT_NONE
    out: dict = {}

    async def main() -> None:
        async with server.run(addrs):
            advertised = [str(a) for a in server.get_addrs()]
            ws = next(a for a in advertised if f"/tcp/{ws_port}/ws/" in a)
            wss = next(a for a in advertised if f"/tcp/{wss_port}/wss/" in a)
            out["ws_first_line"] = await trio.to_thread.run_sync(http_upgrade, ws_port)
            out["wss_tls"] = await trio.to_thread.run_sync(tls_handshake, wss_port)
            for name, addr in (("ws", ws), ("wss", wss)):
                la = listen_addrs("127.0.0.1", 0, 0)  # a websocket listener: build_host then adds the transport
                client = build_host(create_new_key_pair(), la, tls_client=client_tls)
                async with client.run(la):
                    info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
                    with trio.fail_after(20):
                        await client.connect(info)
                    out[name] = bool(client.get_network().connections.get(info.peer_id))

    trio.run(main)
    assert out["ws_first_line"] == b"HTTP/1.1 101 Switching Protocols", out["ws_first_line"]
    version, der = out["wss_tls"]
    assert version.startswith("TLS") and der == ssl.PEM_cert_to_DER_cert(open(cert).read())
    assert out["ws"] and out["wss"]
