"""The online reader's open files (ingest/store/reader.py `ParquetFiles`): a data file's footer
(on S3 also its open handle) is read once and reused for every later row group read, so a read
is one ranged request; files that leave the table are forgotten."""
from __future__ import annotations

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.store_page import StoreQuery
from ingest.store.reader import ParquetFiles, ReaderSettings, StoreReader
from tests.unit.test_store_query import BASE_T, CONTENT, PUBSUB, make_row, write_table


def test_a_footer_is_read_once_and_reused(tmp_path):
    path = str(tmp_path / "f.parquet")
    pq.write_table(pa.table({"x": list(range(100))}), path, row_group_size=10)
    files = ParquetFiles(str(tmp_path))
    first = files(path)
    assert first.metadata.num_row_groups == 10 and len(files) == 1
    # Break the footer on disk: a fresh open fails, the kept footer still reads the data.
    with open(path, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"XXXX")
    with pytest.raises(pa.ArrowInvalid):
        pq.ParquetFile(path)
    assert files(path).read_row_group(3)["x"].to_pylist() == list(range(30, 40))
    files.retain(set())
    assert len(files) == 0
    with pytest.raises(pa.ArrowInvalid):
        files(path)


def test_the_reader_keeps_only_the_tables_files(tmp_path):
    path = str(tmp_path / "t")
    rnd = random.Random(5)
    rows = [make_row(BASE_T + i, PUBSUB[0], CONTENT[0], b"a%d" % i, i) for i in range(60)]
    write_table(path, rows, rnd, files=3, group=10)
    reader = StoreReader(ReaderSettings(path))
    reader.refresh()
    assert len(reader.query(StoreQuery(page_size=100)).messages) == 60
    kept = set(reader._open._kept)
    assert kept == set(reader.snapshot.paths) and len(kept) == 3
    # The table rewritten (as compaction does): the old files are forgotten at the next version.
    from deltalake import DeltaTable

    DeltaTable(path).optimize.compact()
    reader.refresh()
    assert len(reader.query(StoreQuery(page_size=100)).messages) == 60
    assert reader._open._kept and set(reader._open._kept) <= set(reader.snapshot.paths)
    assert not kept & set(reader._open._kept)


def test_a_rewritten_table_is_warmed_before_its_version_is_swapped_in(tmp_path):
    """After a compaction rewrote every file (maintain), the next version's footers, hash index
    and newest row groups are read while queries still see the last version; the last version's
    files are forgotten only after the swap. A hash lookup right after it indexes nothing on its
    own thread (issue 71: it indexed a million rows there, a query p99 of seconds)."""
    from deltalake import DeltaTable

    path = str(tmp_path / "t")
    rnd = random.Random(71)
    rows = [make_row(BASE_T + i, PUBSUB[0], CONTENT[0], b"w%d" % i, i) for i in range(90)]
    write_table(path, rows, rnd, files=3, group=10)
    reader = StoreReader(ReaderSettings(path, preload_mb=64))
    reader.refresh()
    reader.index_hashes()
    old = set(reader.snapshot.paths)
    DeltaTable(path).optimize.compact()
    seen: dict = {}
    publish = reader._publish

    def at_swap(new, committed=None):
        fresh = set(new.paths) - old
        seen["fresh"] = fresh
        seen["indexed"] = all(p in reader._hashes for p in fresh)
        seen["footers"] = all(p in reader._footers for p in fresh)
        seen["cached"] = {k[0] for k in reader._cache.items} & fresh
        seen["old_still_indexed"] = all(p in reader._hashes for p in old)
        seen["serving"] = reader.snapshot.paths == frozenset(old)
        publish(new, committed)
    reader._publish = at_swap
    reader.refresh()
    assert seen["fresh"] and not seen["fresh"] & old
    assert seen["indexed"] and seen["footers"] and seen["cached"] == seen["fresh"]
    assert seen["old_still_indexed"] and seen["serving"]
    assert not any(p in reader._hashes for p in old) and not old & set(reader._footers)
    added = []
    add = reader._hashes.add
    reader._hashes.add = lambda p: added.append(p) or add(p)
    found = reader.locate(rows[17]["message_hash"])
    assert found is not None and found.payload == rows[17]["payload"]
    assert len(added) == len(seen["fresh"]) and not any(add(p) for p in added)  # looked at, none indexed
