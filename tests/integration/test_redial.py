"""A peer that was down and is back is dialed at once (ingest.host.dial).

py-libp2p 0.8 refuses, for 60 s and without trying, every dial to a peer whose addresses all
failed once ("recently failed all addresses (negative cache)"). The fault run
(tests/benchmarks/faults.py) found it: after the bridge's kill -9 and a restart 3.6 s later, the
long-lived filter subscribers could not reach it for a minute, so they never re-subscribed within
the run; the bridge's own static-peer redial had the same minute of silence. Clients and the
bridge now dial through `dial`, which lets their own retry policy decide."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from libp2p.custom_types import TProtocol

from ingest.filter.client import FilterClient
from ingest.store.client import StoreClient
from tools.processes import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

SERVER = """
import sys, trio
from libp2p.crypto.ed25519 import create_new_key_pair
from ingest.host import build_host, listen_addrs

async def echo(stream):
    await stream.write(await stream.read(64))
    await stream.close()

async def main():
    addrs = listen_addrs("127.0.0.1", int(sys.argv[1]), -1)
    host = build_host(create_new_key_pair(b"r" * 32), addrs)
    host.set_stream_handler("/test/echo/1", echo)
    async with host.run(addrs):
        print(f"{addrs[0]}/p2p/{host.get_id()}", flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


def start_server(port: int) -> tuple[subprocess.Popen, str]:
    """A py-libp2p host in its own process (fixed key, given port) that echoes /test/echo/1."""
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
    return proc, proc.stdout.readline().strip()


def test_a_restarted_peer_is_dialed_at_once_not_after_the_negative_cache():
    port = free_port()
    server, addr = start_server(port)
    out: dict = {}

    async def main() -> None:
        nonlocal server
        filter_client = FilterClient()
        async with filter_client.running(), StoreClient.running(timeout=5) as store_client:
            await filter_client.connect(addr, timeout=5)
            await store_client.connect(addr)
            server.send_signal(signal.SIGKILL)  # the peer dies
            server.wait()
            await trio.sleep(0.5)
            for name, client in (("filter", filter_client), ("store", store_client)):
                try:
                    if name == "filter":
                        await client.connect(addr, timeout=5)
                    else:
                        await client.connect(addr)
                    out[f"{name}_while_down"] = "connected"
                except Exception as exc:  # noqa: BLE001 - expected: the peer is down
                    out[f"{name}_while_down"] = type(exc).__name__
            server, again = start_server(port)  # back: same key, same port
            assert again == addr
            t0 = trio.current_time()
            await filter_client.connect(addr, timeout=5)
            out["filter_back_s"] = trio.current_time() - t0
            t0 = trio.current_time()
            await store_client.connect(addr)
            out["store_back_s"] = trio.current_time() - t0
            stream = await filter_client.host.new_stream(filter_client.service, [TProtocol("/test/echo/1")])
            await stream.write(b"hello")
            out["echo"] = await stream.read(64)

    try:
        trio.run(main)
    finally:
        server.kill()
        server.wait()
    print(out)
    assert out["filter_while_down"] != "connected" and out["store_while_down"] != "connected"
    assert out["filter_back_s"] < 5 and out["store_back_s"] < 5
    assert out["echo"] == b"hello"
