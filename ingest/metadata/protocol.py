"""Metadata decisions as pure functions: what we announce, and whether a peer that told us its
cluster may stay (nwaku's and go-waku's rule: a node of another cluster is disconnected; with
our cluster 0 nothing is checked)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeShards:
    """What this node announces: its cluster and the shards of the pubsub topics it joined."""
    cluster_id: int
    shards: tuple[int, ...] = ()


def keep_peer(ours: NodeShards, cluster: int | None) -> str | None:
    """None when a peer that answered with `cluster` may stay, else why it is disconnected."""
    if ours.cluster_id == 0:
        return None
    if cluster is None:
        return "no cluster id"
    if cluster != ours.cluster_id:
        return f"cluster {cluster}, ours {ours.cluster_id}"
    return None
