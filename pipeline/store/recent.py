"""The store job's de-duplication decision, and the recent hashes it keeps between batches.

`decide` is pure: from a batch's narrow rows (validation outcome, Kafka coordinates, message
hash, receive time) and the hashes known to be stored, it counts what happened to the rows and
picks, per message hash, the copy to store (earliest receive, then lowest Kafka coordinates).

`RecentHashes` is what lets a batch skip reading `messages`: every hash of the table whose
receive time is at or above `floor`, loaded from Delta once (the query's first batch) and then
kept by adding what each batch stores and dropping whole minutes that fall behind
`keep_s` (or beyond `max_hashes`). It is exact only while this query is the one writer of new
rows (one store job per warehouse; `maintain`'s retention deletes only make it a superset,
compaction rewrites the same rows). A batch whose receive times reach below `floor` (a replay
after a reset checkpoint, records re-produced long after) reads Delta for that part, as every
batch did before.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

BUCKET_S = 60.0
HASH_DTYPE = "S32"  # a message hash as NumPy holds it: 32 bytes, compared as bytes


@dataclass
class BatchDecision:
    input_rows: int = 0
    valid_rows: int = 0
    ephemeral_rows: int = 0
    quarantined_rows: int = 0
    rule_failures: dict[str, int] = field(default_factory=dict)
    refused_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> offsets
    refused_topics: set[str] = field(default_factory=set)
    # message hash -> (received_time, kafka_partition, kafka_offset) of the copy to keep
    first: dict[bytes, tuple[float, int, int]] = field(default_factory=dict)
    untimed: set[bytes] = field(default_factory=set)  # valid hashes without sender timestamp
    buckets: set[int] = field(default_factory=set)    # receive minutes of the valid rows
    copies: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset) of every valid row

    def winners(self, stored: Iterable[bytes]) -> dict[bytes, tuple[float, int, int]]:
        """The copies to store: per hash the first copy, minus hashes already stored."""
        known = set(stored)
        return {h: v for h, v in self.first.items() if h not in known}

    @property
    def max_received(self) -> float:
        return max(v[0] for v in self.first.values())


def decide(rows: dict[str, list]) -> BatchDecision:
    """`rows`: columns reason, ephemeral, kafka_topic, kafka_partition, kafka_offset,
    message_hash, received_time, untimed (one list each, as pyarrow's to_pydict gives)."""
    d = BatchDecision()
    for reason, ephemeral, topic, partition, offset, h, received, untimed in zip(
            rows["reason"], rows["ephemeral"], rows["kafka_topic"], rows["kafka_partition"],
            rows["kafka_offset"], rows["message_hash"], rows["received_time"], rows["untimed"], strict=True):
        d.input_rows += 1
        if reason is not None:
            d.quarantined_rows += 1
            d.rule_failures[reason] = d.rule_failures.get(reason, 0) + 1
            lo, hi = d.refused_ranges.get(partition, (offset, offset))
            d.refused_ranges[partition] = (min(lo, offset), max(hi, offset))
            d.refused_topics.add(topic)
        elif ephemeral:
            d.ephemeral_rows += 1
        else:
            d.valid_rows += 1
            d.copies.append((partition, offset))
            copy = (received, partition, offset)
            held = d.first.get(h)
            if held is None or copy < held:
                d.first[h] = copy
            if untimed:
                d.untimed.add(h)
            d.buckets.add(math.floor(received / BUCKET_S))
    return d


def _prefixes(full: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each hash of an S32 array, as big-endian uint64 (a sort key)."""
    return np.ascontiguousarray(full).view(np.uint8).reshape(-1, 32)[:, :8].copy().view(">u8").ravel()


def _hash_array(hashes: Iterable[bytes]) -> np.ndarray:
    return np.array(list(hashes), dtype=HASH_DTYPE)


def _pair_arrays(pairs: Iterable[tuple[bytes, float]]) -> tuple[np.ndarray, np.ndarray]:
    """(hash, receive time) pairs as the arrays `RecentHashes` keeps."""
    pairs = list(pairs)
    return _hash_array(h for h, _ in pairs), np.array([t for _, t in pairs], dtype=float)


class _Minute:
    """One receive minute's hashes: sorted by their 8-byte prefix (binary search on uint64),
    with the full hashes beside them (the match is decided on all 32 bytes)."""

    __slots__ = ("pre", "full")

    def __init__(self) -> None:
        self.pre = np.empty(0, dtype=">u8")
        self.full = np.empty(0, dtype=HASH_DTYPE)

    def __len__(self) -> int:
        return len(self.full)

    def find(self, q: np.ndarray, qpre: np.ndarray) -> np.ndarray:
        """Boolean mask: which of `q` (with their prefixes `qpre`) this minute holds."""
        n = len(self.full)
        if not n:
            return np.zeros(len(q), dtype=bool)
        pos = np.searchsorted(self.pre, qpre)
        at = np.minimum(pos, n - 1)
        hit = self.full[at] == q
        # Another hash with the same 8-byte prefix may sit first: look on (vanishingly rare).
        for i in np.flatnonzero(~hit & (self.pre[at] == qpre)):
            j = pos[i]
            while j < n and self.pre[j] == qpre[i]:
                if self.full[j] == q[i]:
                    hit[i] = True
                    break
                j += 1
        return hit

    def merge(self, new: np.ndarray) -> int:
        """Take in the hashes of `new` it lacks; returns how many."""
        pre = _prefixes(new)
        order = np.argsort(pre, kind="stable")
        new, pre = new[order], pre[order]
        if len(new) > 1:  # copies within `new` (sorted by prefix, so side by side)
            first = np.ones(len(new), dtype=bool)
            first[1:] = (pre[1:] != pre[:-1]) | (new[1:] != new[:-1])
            new, pre = new[first], pre[first]
        if len(self.full):
            keep = ~self.find(new, pre)
            new, pre = new[keep], pre[keep]
        if not len(new):
            return 0
        pos = np.searchsorted(self.pre, pre)
        self.pre = np.insert(self.pre, pos, pre)
        self.full = np.insert(self.full, pos, new)
        return len(new)


class RecentHashes:
    """The stored hashes received at or after `floor`, by receive minute (see the module doc).
    Each minute holds its hashes in NumPy arrays (32 bytes a hash plus an 8-byte sort key, where
    a Python set of bytes takes ~100), so a batch's hashes are looked up all at once by binary
    search, and the whole window at tens of thousands of messages a second fits a driver
    (10,000,000 hashes: 400 MB). `max_hashes` 0: off (every batch reads Delta)."""

    def __init__(self, max_hashes: int, keep_s: float) -> None:
        self.max_hashes = max_hashes
        self.keep_s = keep_s
        self.floor: float | None = None  # None: not loaded
        self._minutes: dict[int, _Minute] = {}
        self.size = 0

    @property
    def enabled(self) -> bool:
        return self.max_hashes > 0

    @property
    def loaded(self) -> bool:
        return self.floor is not None

    def start_floor(self, now: float) -> float:
        """Where a load at `now` (the later of the clock and the batch's newest receive) starts."""
        return math.floor((now - self.keep_s) / BUCKET_S) * BUCKET_S

    def load(self, floor: float, pairs: Iterable[tuple[bytes, float]]) -> None:
        """Every hash of the table received at or after `floor`, as read from it."""
        self.load_arrays(floor, *_pair_arrays(pairs))

    def load_arrays(self, floor: float, hashes: np.ndarray, received: np.ndarray) -> None:
        """`load` from arrays: hashes (S32) and their receive times (seconds)."""
        self.reset()
        self.floor = floor
        self._add_arrays(hashes, received)
        self._trim()

    def reset(self) -> None:
        """Forget everything (the next batch loads again): after a batch failed half-way."""
        self.floor = None
        self._minutes = {}
        self.size = 0

    def contains(self, h: bytes) -> bool:
        return bool(self.contains_many([h]))

    def contains_many(self, hashes: list[bytes]) -> set[bytes]:
        """The hashes of `hashes` held (message hashes: 32 bytes each)."""
        if not hashes or not self.size:
            return set()
        q = _hash_array(hashes)
        qpre = _prefixes(q)
        # Searched in prefix order: successive binary searches then walk nearby entries, which
        # the CPU's caches hold (in a minute of 1.5M hashes, 5-6x faster than in hash order).
        order = np.argsort(qpre, kind="stable")
        q, qpre = q[order], qpre[order]
        hit = np.zeros(len(q), dtype=bool)
        for minute in self._minutes.values():
            hit |= minute.find(q, qpre)
        return {hashes[i] for i in order[hit]}

    def add(self, pairs: Iterable[tuple[bytes, float]]) -> None:
        """Hashes just stored (with their receive times); those below the floor are not kept."""
        self._add_arrays(*_pair_arrays(pairs))

    def _add_arrays(self, hashes: np.ndarray, received: np.ndarray) -> None:
        assert self.floor is not None
        if not len(hashes):
            return
        keep = received >= self.floor
        hashes, minutes = hashes[keep], np.floor(received[keep] / BUCKET_S).astype(np.int64)
        for minute in np.unique(minutes).tolist():
            self.size += self._minutes.setdefault(minute, _Minute()).merge(hashes[minutes == minute])

    def advance(self, newest_received: float) -> None:
        """Drop the minutes older than `keep_s` before the newest receive seen."""
        assert self.floor is not None
        self._raise_floor(self.start_floor(newest_received))
        self._trim()

    def _trim(self) -> None:
        while self.size > self.max_hashes and self._minutes:
            self._raise_floor((min(self._minutes) + 1) * BUCKET_S)

    def _raise_floor(self, floor: float) -> None:
        assert self.floor is not None
        if floor <= self.floor:
            return
        self.floor = floor
        for minute in [m for m in self._minutes if m * BUCKET_S < floor]:
            self.size -= len(self._minutes.pop(minute))
