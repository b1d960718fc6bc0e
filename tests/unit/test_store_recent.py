"""The store job's decision on a batch's narrow rows, and the recent hashes kept between batches."""
from __future__ import annotations

import random

from pipeline.store.recent import BUCKET_S, RecentHashes, decide

COLUMNS = ("reason", "ephemeral", "kafka_topic", "kafka_partition", "kafka_offset", "message_hash",
           "received_time", "untimed")


def rows(*tuples) -> dict[str, list]:
    return {c: [t[i] for t in tuples] for i, c in enumerate(COLUMNS)}


def test_decide_counts_and_keeps_the_first_copy_of_each_hash():
    d = decide(rows(
        (None, False, "t", 0, 10, b"a", 100.0, False),
        (None, False, "t", 1, 5, b"a", 99.0, False),     # received earlier: wins
        (None, False, "t", 0, 11, b"b", 100.0, True),
        (None, False, "t", 1, 3, b"b", 100.0, True),     # same time, lower partition wins
        (None, True, "t", 0, 12, b"c", 100.0, False),    # ephemeral
        ("payload_too_large", False, "t", 2, 7, None, 101.0, True),
        ("bad_protobuf", False, "t", 2, 4, None, 101.0, True),
    ))
    assert (d.input_rows, d.valid_rows, d.ephemeral_rows, d.quarantined_rows) == (7, 4, 1, 2)
    assert d.rule_failures == {"payload_too_large": 1, "bad_protobuf": 1}
    assert d.refused_ranges == {2: (4, 7)} and d.refused_topics == {"t"}
    assert d.first == {b"a": (99.0, 1, 5), b"b": (100.0, 0, 11)}
    assert d.untimed == {b"b"} and d.buckets == {1}
    assert sorted(d.copies) == [(0, 10), (0, 11), (1, 3), (1, 5)]
    assert d.winners([b"b"]) == {b"a": (99.0, 1, 5)}


def test_decide_picks_the_same_copy_in_any_order():
    seed = 20261124
    print("seed", seed)
    rnd = random.Random(seed)
    copies = [(None, False, "t", rnd.randrange(4), off, bytes([rnd.randrange(20)]), float(rnd.randrange(5)), False)
              for off in range(300)]
    want = decide(rows(*copies)).first
    for _ in range(5):
        rnd.shuffle(copies)
        assert decide(rows(*copies)).first == want


def test_recent_hashes_cover_from_their_floor_and_drop_old_minutes():
    r = RecentHashes(max_hashes=1000, keep_s=300.0)
    assert r.enabled and not r.loaded
    floor = r.start_floor(10_000.0)
    assert floor == 9_660.0 and floor % BUCKET_S == 0  # 300 s back, down to a whole minute
    r.load(floor, [(b"old", 9_600.0), (b"x", 9_700.0), (b"y", 9_990.0)])
    assert r.loaded and not r.contains(b"old") and r.contains(b"x") and r.size == 2
    r.add([(b"z", 10_010.0), (b"z", 10_010.0), (b"below", 100.0)])
    assert r.contains(b"z") and not r.contains(b"below") and r.size == 3
    r.advance(10_100.0)  # floor -> 9_780: the minute of x goes
    assert r.floor == 9_780.0 and not r.contains(b"x") and r.contains(b"y") and r.size == 2
    r.advance(9_000.0)  # never lowered
    assert r.floor == 9_780.0
    r.reset()
    assert not r.loaded and r.size == 0 and not r.contains(b"y")


def test_recent_hashes_bounded_by_dropping_their_oldest_minutes():
    r = RecentHashes(max_hashes=5, keep_s=3600.0)
    r.load(0.0, [(bytes([i]), i * 30.0) for i in range(8)])  # two a minute
    assert r.size <= 5 and r.floor == 120.0
    assert not r.contains(bytes([3])) and all(r.contains(bytes([i])) for i in range(4, 8))
    assert RecentHashes(0, 60.0).enabled is False


def test_recent_hashes_look_up_a_batch_exactly_like_a_set():
    seed = 20261124
    print(f"seed {seed}")
    rnd = random.Random(seed)
    r = RecentHashes(max_hashes=1_000_000, keep_s=3600.0)
    held = [rnd.randbytes(32) for _ in range(5000)]
    # hashes ending (or starting) in zero bytes, and ones differing only in their last byte
    held += [b"\x00" * 31 + b"\x01", b"\x07" * 31 + b"\x00", b"\x00" * 32, rnd.randbytes(28) + b"\x00" * 4]
    pairs = [(h, rnd.uniform(0.0, 600.0)) for h in held]
    r.load(0.0, pairs)
    r.add(pairs[:100])  # already held: no growth
    assert r.size == len(set(held))
    others = [rnd.randbytes(32) for _ in range(5000)]
    others += [b"\x00" * 31 + b"\x02", b"\x07" * 31 + b"\x01", b"\x00" * 31 + b"\x03"]
    batch = held[::3] + others
    rnd.shuffle(batch)
    assert r.contains_many(batch) == set(held) & set(batch)
