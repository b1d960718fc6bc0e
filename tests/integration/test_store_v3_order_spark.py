"""The Spark form of a history page (pipeline/store/query.py) in the store's total order
(received_time, digest, message hash) and with integer-nanosecond time windows, against the
same oracle and tables as tests/unit/test_store_v3_order.py (issue 36, items 1 and 5)."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from core.store_page import Index, StoredMessage, StoreQuery, history_pages, page_from_rows
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, write_messages
from pipeline.store.query import history_page
from tests.unit.test_store_v3_order import ns_rows, tied_rows, v3_order, write_tied

pytestmark = pytest.mark.integration


def test_spark_pages_follow_the_total_order(spark, tmp_path):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    rows = tied_rows(rnd, 40)
    path = str(tmp_path / "t")
    write_tied(path, rows, rnd, files=2)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    for forward in (True, False):
        got = []
        for page in history_pages(lambda q: history_page(spark, path, q), StoreQuery(forward=forward, page_size=3)):
            hashes = [m.message_hash for m in page.messages]
            got = got + hashes if forward else hashes + got
        assert got == v3_order(rows), f"seed {seed}"
    # a beta2 cursor (no hash) stays a position exclusive of its Index; a v3 one names a message
    m = stored[5]
    for cursor in (Index(m.received_time, m.digest), m.index):
        for forward in (True, False):
            q = StoreQuery(cursor=cursor, forward=forward, page_size=100)
            assert [x.message_hash for x in history_page(spark, path, q).messages] == \
                [x.message_hash for x in page_from_rows(stored, q).messages]


def test_spark_windows_in_integer_nanoseconds(spark, tmp_path):
    rows = ns_rows(8)
    path = str(tmp_path / "t")
    write_messages(path, pa.Table.from_pylist(rows, schema=MESSAGES_ARROW_SCHEMA))
    for r in rows:
        t = r["timestamp"]
        page = history_page(spark, path, StoreQuery(time_start=t, time_end=t))
        assert [m.message_hash for m in page.messages] == [r["message_hash"]]
