"""The online reader's hash index (ingest/store/reader.py `_HashIndex`): every hash of every
indexed file is found at its (file, row group, row), also when prefixes collide across files;
files come in one by one and the index stays a few sorted segments (a lookup does not grow with
the number of files); files that leave the table are forgotten; a file indexed again is not
counted twice."""
from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.store.reader import _HashIndex


def write_file(path: str, hashes: list[bytes], group_rows: int) -> None:
    pq.write_table(pa.table({"message_hash": pa.array(hashes, pa.binary())}), path, row_group_size=group_rows)


def test_hash_index_finds_every_row_across_files_and_forgets_removed_files(tmp_path):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    index = _HashIndex()
    where: dict[bytes, list[tuple[str, int, int]]] = {}
    files = []
    shared_prefix = rng.randbytes(8)
    for n in range(40):
        rows = rng.randrange(1, 300)
        hashes = [rng.randbytes(32) for _ in range(rows)]
        hashes[0] = shared_prefix + rng.randbytes(24)  # the same 8-byte prefix in every file
        path = str(tmp_path / f"part-{n}.parquet")
        group_rows = rng.randrange(1, 120)
        write_file(path, hashes, group_rows)
        assert sorted(index.add_with_hashes(path)) == sorted(hashes)
        assert not index.add(path)  # indexed already
        files.append(path)
        for i, h in enumerate(hashes):
            where.setdefault(h, []).append((path, i // group_rows, i % group_rows))
        # a few sorted segments, not one per file
        assert len(index._segments) <= math.log2(sum(len(v) for v in where.values())) + 1

    by_prefix: dict[bytes, list[tuple[str, int, int]]] = {}
    for h, places in where.items():
        by_prefix.setdefault(h[:8], []).extend(places)

    def at_prefix(h: bytes) -> list[tuple[str, int, int]]:  # a lookup answers every row with the hash's prefix
        return sorted(p for p in by_prefix[h[:8]] if p[0] in live)

    live = set(files)
    for h in where:
        assert sorted(index.candidates(h)) == at_prefix(h)
    hits = index.candidates_many(np.array([int.from_bytes(shared_prefix, "big")], dtype=np.uint64))
    assert len(hits) == len(files) and {p for _, p, _, _ in hits} == live

    live = set(rng.sample(files, 25))
    index.retain(live)
    for h in where:
        assert sorted(index.candidates(h)) == at_prefix(h)
    assert all(not index.add(p) for p in live) and all(p not in index for p in set(files) - live)

    again = sorted(live)[0]
    index.add_with_hashes(again)  # indexed again (a re-read): its rows once, not twice
    for h in where:
        assert sorted(index.candidates(h)) == at_prefix(h)
    assert index.nbytes == 20 * sum(1 for places in where.values() for p in places if p[0] in live)  # 20 bytes a row


def test_a_lookup_finds_every_row_of_an_indexed_file_while_others_index_the_same_files(tmp_path):
    """The follow thread and query threads index a snapshot together (the v3 cursor lookups of
    a server that just started): a file two of them index is indexed once, and from the moment
    a file is indexed every lookup of its rows finds them (a re-index once removed a file and
    added it back, and a lookup in between answered "not a stored message")."""
    import sys
    import threading

    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    files: dict[str, list[bytes]] = {}
    for n in range(40):
        path = str(tmp_path / f"part-{n}.parquet")
        files[path] = [rng.randbytes(32) for _ in range(rng.randrange(200, 2000))]
        write_file(path, files[path], 500)
    index = _HashIndex()
    misses: list[str] = []
    done = threading.Event()
    failed: list[BaseException] = []

    def indexer(with_hashes: bool) -> None:
        try:
            for path in files:
                if with_hashes:
                    assert sorted(index.add_with_hashes(path)) == sorted(files[path])
                else:
                    index.add(path)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    def looker() -> None:
        while not done.is_set():
            for path in [p for p in files if p in index]:
                h = rng.choice(files[path])
                if path not in {c[0] for c in index.candidates(h)}:
                    misses.append(path)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the threads as much as possible
    try:
        lookers = [threading.Thread(target=looker) for _ in range(2)]
        indexers = [threading.Thread(target=indexer, args=(k == 1,)) for k in range(3)]
        for t in lookers + indexers:
            t.start()
        for t in indexers:
            t.join()
        done.set()
        for t in lookers:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert not failed, failed
    assert not misses, f"rows of indexed files not found: {len(misses)} lookups (seed {seed})"
    assert index.nbytes == 20 * sum(len(v) for v in files.values())  # each file indexed once
    assert len(index._numbers) == len(files)


def test_the_vectorized_read_of_a_hash_column_matches_one_object_a_row():
    """`_column_hashes` (Arrow buffers, no Python object a row) gives `_prefixes`'s prefixes and
    the same bytes, on sliced arrays, large binary, prefixes with high bits and zero bytes; a
    null or a value shorter than 8 bytes leaves it to `_prefixes`."""
    from ingest.store.reader import _column_hashes, _prefixes
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    hashes = [rng.randbytes(32) for _ in range(500)]
    hashes[0], hashes[1] = b"\xff" * 32, bytes(32)
    hashes[2] = b"\x00" * 8 + b"\xff" * 24
    for arr in (pa.array(hashes, pa.binary()), pa.array(hashes, pa.large_binary()),
                pa.array(hashes, pa.binary()).slice(7, 300), pa.array([h[:8] + h for h in hashes], pa.binary())):
        got = _column_hashes(arr, with_hashes=True)
        assert got is not None
        prefixes, values = got
        assert values == arr.to_pylist()
        assert prefixes.dtype == np.uint64 and np.array_equal(prefixes, _prefixes(arr.to_pylist()))
        assert _column_hashes(arr, with_hashes=False)[1] == []
    assert _column_hashes(pa.array([], pa.binary()), True)[0].size == 0
    assert _column_hashes(pa.array([hashes[0], None], pa.binary()), True) is None
    assert _column_hashes(pa.array([hashes[0], b"short"], pa.binary()), True) is None
