"""`ingest.host.dial(retries=n)` retries each address n times by itself (the lightpush client's
retries=0: nim-libp2p's single attempt), without touching the swarm's retry setting: a dial with
py-libp2p's own retries running meanwhile keeps them. No socket is opened: the swarm's single
attempt is a stand-in that fails."""
from __future__ import annotations

from collections import Counter

import pytest
import trio
from libp2p.crypto.secp256k1 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr

from ingest.host import build_host, dial


def _peer(port: int) -> PeerInfo:
    return PeerInfo(ID.from_pubkey(create_new_key_pair().public_key), [Multiaddr(f"/ip4/127.0.0.1/tcp/{port}")])


def test_a_dial_with_retries_of_its_own_leaves_a_concurrent_default_dial_its_retries():
    me = build_host(create_new_key_pair(), [])
    swarm = me.get_network()
    slow, fast, twice = _peer(1), _peer(2), _peer(3)
    attempts: Counter[ID] = Counter()
    seen_retries: list[int] = []

    async def refused(addr, peer_id, source=None):
        attempts[peer_id] += 1
        seen_retries.append(swarm.retry_config.max_retries)  # type: ignore[attr-defined]
        if peer_id == slow.peer_id:
            await trio.sleep(1.5)  # the quick dial's one attempt lasts through the other dial
        raise OSError("connection refused")

    swarm._dial_addr_single_attempt = refused  # type: ignore[attr-defined]
    out: dict[str, object] = {}

    async def main() -> None:
        async with me.run([]), trio.open_nursery() as nursery:
            async def quick() -> None:
                with pytest.raises(ConnectionError):
                    await dial(me, slow, 10, retries=0)
                out["quick_done"] = trio.current_time()

            nursery.start_soon(quick)
            await trio.sleep(0.05)
            with pytest.raises(Exception):  # noqa: B017 - py-libp2p's own: all addresses failed
                await dial(me, fast, 10)  # py-libp2p's retries, while the quick dial runs
            out["default_done"] = trio.current_time()
            with pytest.raises(ConnectionError):
                await dial(me, twice, 10, retries=2)

    trio.run(main)
    assert out["default_done"] < out["quick_done"]  # type: ignore[operator]  # they overlapped
    assert attempts == {slow.peer_id: 1, fast.peer_id: 4, twice.peer_id: 3}  # 0.8.1's 3 retries kept
    assert set(seen_retries) == {3}  # the swarm's setting never changed
