"""The bridge's connection cap (`bridge.max_connections`, nwaku's --max-connections): every one
of them may be inbound (py-libp2p's own defaults took 250 inbound of 300 in the swarm and 256 in
its resource manager, and closed the rest before their handshake with a debug line at most: 750
of 1,000 light clients of tests/benchmarks/capacity.py could not connect), and a connection over
it is refused. Real py-libp2p hosts on loopback."""
from __future__ import annotations

import multiaddr
import pytest
import trio
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.peer.peerinfo import PeerInfo

from core.config import load_config
from ingest.host import build_host, listen_addrs
from ingest.settings import BridgeSettings

pytestmark = pytest.mark.integration


def test_the_shipped_cap_takes_every_filter_peer_inbound():
    s = BridgeSettings.from_config(load_config([]))
    assert s.max_connections >= load_config([]).get("filter.max_peers") + 100
    host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1), max_connections=s.max_connections)
    swarm = host.get_network()
    assert swarm._inbound_limiter.total_tokens == s.max_connections == swarm.connection_config.max_connections
    # py-libp2p's resource manager refused the 257th inbound connection by default
    limits = swarm._resource_manager.connection_limits
    assert limits.max_established_inbound == limits.max_established_total == s.max_connections
    assert swarm._resource_manager.graceful_degradation is None


def test_the_peer_store_keeps_more_peers_than_connections():
    """py-libp2p's peer store held 1,000 peers: a 1,001st connected peer (the relay publisher
    beside 1,000 light clients) lost its key, the bridge's identify of it failed and it never
    joined the mesh. The node's store holds at least bridge.max_connections."""
    s = BridgeSettings.from_config(load_config([]))
    assert s.peer_store_capacity >= s.max_connections
    # a capacity set below the connection cap is raised to it
    low = BridgeSettings.from_config(load_config(["bridge.peer_store_capacity=10", "bridge.max_connections=300"]))
    assert low.peer_store_capacity == 300
    host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1), max_connections=s.max_connections,
                      peer_store_capacity=s.peer_store_capacity)
    store = host.get_peerstore()
    assert store.max_peers == s.peer_store_capacity
    from libp2p.crypto.secp256k1 import create_new_key_pair as key
    from libp2p.peer.id import ID
    peers = []
    for _ in range(1100):
        kp = key()
        pid = ID.from_pubkey(kp.public_key)
        store.add_pubkey(pid, kp.public_key)
        store.add_addrs(pid, [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/1")], 3600)
        peers.append(pid)
    assert all(store.pubkey(pid) is not None for pid in peers)


def test_a_connection_over_the_cap_is_refused_and_the_others_stay():
    async def main() -> tuple[list[bool], int]:
        addrs = listen_addrs("127.0.0.1", 0, -1)
        bridge = build_host(create_new_key_pair(), addrs, max_connections=2)
        clients = [build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1)) for _ in range(3)]
        async with bridge.run(addrs), trio.open_nursery() as nursery:
            target = multiaddr.Multiaddr(str(bridge.get_addrs()[0]).split("/p2p/")[0])
            for c in clients:
                await nursery.start(_run, c)
            ok = await _connect_each(clients, bridge, target)
            await trio.sleep(0.2)
            connected = len(bridge.get_network().connections)
            nursery.cancel_scope.cancel()
        return ok, connected

    ok, connected = trio.run(main)
    assert ok == [True, True, False] and connected == 2


async def _run(host, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """`host` listening until cancelled; started with the cancel scope that stops it."""
    with trio.CancelScope() as scope:
        async with host.run(listen_addrs("127.0.0.1", 0, -1)):
            task_status.started(scope)
            await trio.sleep_forever()


async def _connect_each(clients, bridge, target) -> list[bool]:
    """Each client's dial of the bridge and an identify stream: True, or False when refused."""
    ok = []
    for c in clients:
        try:
            with trio.fail_after(10):
                await c.connect(PeerInfo(bridge.get_id(), [target]))
                await c.new_stream(bridge.get_id(), ["/ipfs/id/1.0.0"])
            ok.append(True)
        except Exception:  # noqa: BLE001 - refused: closed before the handshake
            ok.append(False)
    return ok


def test_connections_that_ended_give_their_slots_back():
    """py-libp2p 0.8.1 held an inbound connection's slot until the swarm ended: once
    max_connections clients had come and gone, every new connection was closed before its
    handshake. Three rounds of max_connections clients, each round gone before the next."""
    cap = 3

    async def main() -> list[tuple[list[bool], int, int]]:
        addrs = listen_addrs("127.0.0.1", 0, -1)
        bridge = build_host(create_new_key_pair(), addrs, max_connections=cap)
        rounds = []
        async with bridge.run(addrs), trio.open_nursery() as nursery:
            target = multiaddr.Multiaddr(str(bridge.get_addrs()[0]).split("/p2p/")[0])
            swarm = bridge.get_network()
            for _ in range(3):
                clients = [build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1)) for _ in range(cap)]
                scopes = []
                for c in clients:
                    scopes.append(await nursery.start(_run, c))
                ok = await _connect_each(clients, bridge, target)
                connected = len(swarm.connections)
                for c in clients:
                    for pid in list(c.get_network().connections):
                        await c.disconnect(pid)
                for scope in scopes:
                    scope.cancel()
                with trio.fail_after(10):  # progress, not a deadline: the bridge sees every close
                    while swarm.connections or swarm._inbound_limiter.borrowed_tokens:
                        await trio.sleep(0.05)
                rounds.append((ok, connected, int(swarm._inbound_limiter.borrowed_tokens)))
            nursery.cancel_scope.cancel()
        return rounds

    rounds = trio.run(main)
    assert rounds == [([True] * cap, cap, 0)] * 3

