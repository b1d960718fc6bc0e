"""A py-libp2p host as the bridge and the publisher use it: TCP and websocket transports,
noise as the only security (no plaintext, no secio, no TLS), yamux and mplex."""
from __future__ import annotations

import errno
import socket
from collections.abc import Sequence

import multiaddr
from libp2p import new_host
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as new_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.mplex.mplex import MPLEX_PROTOCOL_ID, Mplex
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux


class ListenError(Exception):
    """A listen address cannot be used; the message is one line for the user."""


def listen_addrs(host: str, tcp_port: int, ws_port: int) -> list[multiaddr.Multiaddr]:
    """The TCP listener, and the websocket one unless ws_port is negative (port 0: any free)."""
    ip = "ip6" if ":" in host else "ip4"
    addrs = [multiaddr.Multiaddr(f"/{ip}/{host}/tcp/{tcp_port}")]
    if ws_port >= 0:
        addrs.append(multiaddr.Multiaddr(f"/{ip}/{host}/tcp/{ws_port}/ws"))
    return addrs


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


MUXERS = {"yamux": (TProtocol(YAMUX_PROTOCOL_ID), Yamux), "mplex": (TProtocol(MPLEX_PROTOCOL_ID), Mplex)}


def build_host(key_pair: KeyPair, addrs: Sequence[multiaddr.Multiaddr],
               muxers: Sequence[str] = ("yamux", "mplex")) -> IHost:
    """A host with the given identity whose transports cover `addrs` (TCP, plus websocket when
    an address has /ws); call ``host.run(addrs)`` to listen. Security is noise alone; the
    muxers are offered in the given order (js-waku speaks mplex only)."""
    websocket = any("/ws" in str(a) for a in addrs)
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=new_x25519_key_pair().private_key)},
        muxer_opt=dict(MUXERS[m] for m in muxers),
        listen_addrs=list(addrs),
        enable_tcp=True,
        enable_websocket=websocket,
    )
