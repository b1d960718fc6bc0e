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

BUCKET_S = 60.0


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
    def min_received(self) -> float:
        return min(v[0] for v in self.first.values())

    @property
    def max_received(self) -> float:
        return max(v[0] for v in self.first.values())


def decide(rows: dict[str, list]) -> BatchDecision:
    """`rows`: columns reason, ephemeral, kafka_topic, kafka_partition, kafka_offset,
    message_hash, received_time, untimed (one list each, as pyarrow's to_pydict gives)."""
    d = BatchDecision()
    for reason, ephemeral, topic, partition, offset, h, received, untimed in zip(
            rows["reason"], rows["ephemeral"], rows["kafka_topic"], rows["kafka_partition"],
            rows["kafka_offset"], rows["message_hash"], rows["received_time"], rows["untimed"]):
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


class RecentHashes:
    """The stored hashes received at or after `floor`, by receive minute (see the module doc).
    `max_hashes` 0: off (every batch reads Delta)."""

    def __init__(self, max_hashes: int, keep_s: float) -> None:
        self.max_hashes = max_hashes
        self.keep_s = keep_s
        self.floor: float | None = None  # None: not loaded
        self._minutes: dict[int, set[bytes]] = {}
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
        self.reset()
        self.floor = floor
        self.add(pairs)
        self._trim()

    def reset(self) -> None:
        """Forget everything (the next batch loads again): after a batch failed half-way."""
        self.floor = None
        self._minutes = {}
        self.size = 0

    def contains(self, h: bytes) -> bool:
        return any(h in s for s in self._minutes.values())

    def add(self, pairs: Iterable[tuple[bytes, float]]) -> None:
        """Hashes just stored (with their receive times); those below the floor are not kept."""
        assert self.floor is not None
        for h, received in pairs:
            if received >= self.floor:
                s = self._minutes.setdefault(math.floor(received / BUCKET_S), set())
                if h not in s:
                    s.add(h)
                    self.size += 1

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
