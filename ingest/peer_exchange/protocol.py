"""The peer exchange decision, pure: which ENRs answer a query.

nwaku (waku_peer_exchange/protocol.nim) answers with up to min(60, num_peers) ENRs of the peers
in its peer store that it found through discv5, of its cluster, not known unreachable, picked by
reservoir sampling. We have no discv5 yet: the pool is the connected peers whose ENR we know
(static peers given as enr:...), of our cluster, never ourselves.
"""
from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from ingest.enr import EnrError, Record

MAX_PEERS = 60  # nwaku's MaxPeersCacheSize: the most ENRs one answer holds


@dataclass(frozen=True)
class Candidate:
    peer_id: str
    record: Record
    connected: bool


def eligible(c: Candidate, cluster: int, own_peer_id: str) -> bool:
    """A candidate we may hand on: connected, not us, of our cluster (when we have one and the
    record says one; nwaku's isClusterMismatched)."""
    if not c.connected or c.peer_id == own_peer_id:
        return False
    if cluster:
        try:
            shards = c.record.relay_shards()
        except EnrError:
            return False
        if shards is not None and shards[0] != cluster:
            return False
    return True


def choose(num_peers: int, candidates: Iterable[Candidate], cluster: int, own_peer_id: str,
           rng: random.Random) -> list[bytes]:
    """The ENRs (raw bytes) answering a query for `num_peers`: a uniform sample (Algorithm R,
    as nwaku) of at most min(num_peers, MAX_PEERS) eligible candidates."""
    k = min(num_peers, MAX_PEERS)
    out: list[bytes] = []
    if k <= 0:
        return out
    i = 0
    for c in candidates:
        if not eligible(c, cluster, own_peer_id):
            continue
        if i < k:
            out.append(c.record.raw)
        else:
            j = rng.randint(0, i)
            if j < k:
                out[j] = c.record.raw
        i += 1
    return out
