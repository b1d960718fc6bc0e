"""The discv5 node table (discv5-theory.md, "Node Table"): k-buckets of 16 by log distance from
our node id; a node is relayed in NODES answers only once it answered one of our requests
(`verified`), as the spec requires. A full bucket keeps its nodes and drops the newcomer
(nodes that stop answering are removed by the service's revalidation)."""
from __future__ import annotations

from dataclasses import dataclass

from ingest.discv5.codec import log_distance
from ingest.enr import EnrError, Record

K = 16  # bucket size, and the most nodes one FINDNODE answer holds


@dataclass
class Entry:
    record: Record
    node_id: bytes
    addr: tuple[str, int]
    verified: bool = False
    failures: int = 0


def udp_addr(record: Record) -> tuple[str, int] | None:
    """Where to reach the node's discv5: (ip, udp), or None when its record lacks either."""
    try:
        ip, udp = record.ip(), record.port(b"udp")
    except EnrError:
        return None
    if ip is None or not udp:
        return None
    return ip, udp


class Table:
    def __init__(self, own_id: bytes, k: int = K) -> None:
        self.own_id = own_id
        self.k = k
        self.buckets: dict[int, list[Entry]] = {}
        self.by_id: dict[bytes, Entry] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def get(self, node_id: bytes) -> Entry | None:
        return self.by_id.get(node_id)

    def add(self, record: Record, verified: bool = False) -> Entry | None:
        """Insert or update a node (a newer record replaces an older one); None when it has no
        discv5 address, is us, or its bucket is full."""
        nid = record.node_id()
        if nid == self.own_id:
            return None
        addr = udp_addr(record)
        if addr is None:
            return None
        e = self.by_id.get(nid)
        if e is not None:
            if record.seq >= e.record.seq:
                e.record, e.addr = record, addr
            e.verified = e.verified or verified
            return e
        bucket = self.buckets.setdefault(log_distance(self.own_id, nid), [])
        if len(bucket) >= self.k:
            return None
        e = Entry(record, nid, addr, verified)
        bucket.append(e)
        self.by_id[nid] = e
        return e

    def remove(self, node_id: bytes) -> None:
        e = self.by_id.pop(node_id, None)
        if e is not None:
            self.buckets[log_distance(self.own_id, node_id)].remove(e)

    def at_distance(self, distance: int, verified_only: bool = True) -> list[Entry]:
        return [e for e in self.buckets.get(distance, ()) if e.verified or not verified_only]

    def closest(self, target: bytes, n: int) -> list[Entry]:
        t = int.from_bytes(target, "big")
        return sorted(self.by_id.values(), key=lambda e: int.from_bytes(e.node_id, "big") ^ t)[:n]

    def entries(self) -> list[Entry]:
        return list(self.by_id.values())
