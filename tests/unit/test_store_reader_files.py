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
