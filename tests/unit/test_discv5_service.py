"""discv5 over real UDP sockets on localhost (ingest/discv5/service.py): a node bootstrapped
from one other finds a third through it (PING, FINDNODE, handshakes both ways), hears of nodes
that contact it, and every verified node is reported once it answers."""
from __future__ import annotations

import random

import trio
from multiaddr import Multiaddr

from ingest.discv5.service import Discv5Service
from ingest.discv5.settings import Discv5Settings
from ingest.enr import RELAY, WakuEnrFields, build, decode


def _node(i: int, bootstrap: tuple[bytes, ...], found: list, seed: int) -> Discv5Service:
    key = (0x1000 + i).to_bytes(32, "big")
    holder: dict = {}
    settings = Discv5Settings("127.0.0.1", 0, bootstrap, target_peers=4, lookup_interval_s=0.2,
                              whoareyou_per_s=100.0, request_timeout_s=2.0)
    svc = Discv5Service(key, lambda: holder["r"], settings, on_peer=found.append, rng=random.Random(seed + i))
    svc._key = key  # type: ignore[attr-defined]
    svc._holder = holder  # type: ignore[attr-defined]
    return svc


async def _start(svc: Discv5Service, nursery: trio.Nursery) -> bytes:
    port = await svc.open()
    fields = WakuEnrFields((Multiaddr("/ip4/127.0.0.1/tcp/60001"),), RELAY, 1, (0,), port)
    svc._holder["r"] = decode(build(svc._key, 1, fields))  # type: ignore[attr-defined]
    nursery.start_soon(svc.run)
    return svc._holder["r"].raw  # type: ignore[attr-defined]


def test_three_nodes_find_each_other():
    seed = random.randrange(2 ** 32)
    print("seed", seed)

    async def main() -> None:
        found_a: list = []
        found_b: list = []
        found_c: list = []
        async with trio.open_nursery() as n:
            b = _node(2, (), found_b, seed)
            rb = await _start(b, n)
            c = _node(3, (rb,), found_c, seed)
            rc = await _start(c, n)
            # C bootstraps from B: B hears of C in the handshake and verifies it with a PING.
            with trio.fail_after(30):
                while decode(rc).node_id() not in {r.node_id() for r in found_b}:
                    await trio.sleep(0.05)
            a = _node(1, (rb,), found_a, seed)
            await _start(a, n)
            # A knows only B; its lookups ask B (FINDNODE) and find C.
            with trio.fail_after(30):
                while decode(rc).node_id() not in {r.node_id() for r in found_a}:
                    await trio.sleep(0.05)
            assert decode(rb).node_id() in {r.node_id() for r in found_a}
            assert b.metrics.requests.labels("FINDNODE")._value.get() >= 1
            assert b.metrics.requests.labels("PING")._value.get() >= 1
            n.cancel_scope.cancel()

    trio.run(main)


def test_settings_off_by_default_and_checked(tmp_path):
    import pytest

    from core.config import ConfigError, load_config
    from ingest.settings import BridgeSettings

    base = [f"bridge.key_file={tmp_path / 'k'}"]
    assert BridgeSettings.from_config(load_config(base, environ={})).discv5 is None
    key = (0x2000).to_bytes(32, "big")
    enr = decode(build(key, 1, WakuEnrFields((Multiaddr("/ip4/127.0.0.1/tcp/60001"),), RELAY, 1, (0,), 9000)))
    s = BridgeSettings.from_config(load_config(
        [*base, "bridge.discv5_port=0", f"bridge.discv5_bootstrap={enr.text()}"], environ={})).discv5
    assert s is not None and s.port == 0 and s.bootstrap == (enr.raw,) and s.target_peers == 8
    with pytest.raises(ConfigError, match="discv5_bootstrap"):
        BridgeSettings.from_config(load_config([*base, "bridge.discv5_port=9000", "bridge.discv5_bootstrap=enr:xx"],
                                               environ={}))
    with pytest.raises(ConfigError, match="discv5_port"):
        BridgeSettings.from_config(load_config([*base, "bridge.discv5_port=70000"], environ={}))


def test_hostile_datagrams_counted_and_unanswered():
    """Over the socket: foreign, truncated and oversized datagrams are counted by reason and get
    no answer."""
    async def main() -> None:
        found: list = []
        async with trio.open_nursery() as n:
            svc = _node(4, (), found, 7)
            await _start(svc, n)
            client = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
            await client.bind(("127.0.0.1", 0))
            for data in (b"\x00" * 40, bytes(range(200)), b"\x01" * 1400):
                await client.sendto(data, ("127.0.0.1", svc.port))
            with trio.fail_after(10):
                while svc.metrics.received._value.get() < 3:
                    await trio.sleep(0.02)
            with trio.move_on_after(0.3) as quiet:
                await client.recvfrom(2048)
            assert quiet.cancelled_caught  # nothing came back
            assert {r: svc.metrics.dropped.labels(r)._value.get() for r in ("truncated", "not_discv5", "oversized")} \
                == {"truncated": 1, "not_discv5": 1, "oversized": 1}
            assert svc.metrics.sent._value.get() == 0
            client.close()
            n.cancel_scope.cancel()

    trio.run(main)


def test_bridge_keeps_relay_peers_of_its_cluster_and_shards(tmp_path):
    """What the bridge keeps of the nodes discv5 verified (to dial and to hand on in peer exchange):
    relay nodes of its cluster sharing a shard, with an address."""
    from core.config import load_config
    from ingest.enr import STORE
    from ingest.identity import key_from_hex
    from ingest.node import Bridge
    from ingest.settings import BridgeSettings

    cfg = load_config([f"bridge.key_file={tmp_path / 'k'}", "bridge.cluster_id=1", "rln.enabled=false",
                       "bridge.pubsub_topics=",
                       "bridge.all_shards=true", "bridge.discv5_port=0"], environ={})
    bridge = Bridge(BridgeSettings.from_config(cfg), key_pair=key_from_hex("11" * 32))

    def rec(i: int, caps: int, cluster: int, shards: tuple[int, ...]) -> object:
        key = (0x3000 + i).to_bytes(32, "big")
        return decode(build(key, 1, WakuEnrFields((Multiaddr("/ip4/127.0.0.1/tcp/60001"),), caps, cluster, shards,
                                                  9000)))

    good, other_cluster = rec(1, RELAY, 1, (0,)), rec(2, RELAY, 2, (0,))
    no_relay, other_shard = rec(3, STORE, 1, (0,)), rec(4, RELAY, 1, (9,))
    for r in (good, other_cluster, no_relay, other_shard):
        bridge._on_discovered(r)  # type: ignore[arg-type]
    assert set(bridge.discovered) == {good.peer_id().to_base58()}  # type: ignore[attr-defined]
    assert set(bridge.known_enrs) == {good.peer_id().to_base58()}  # type: ignore[attr-defined]
