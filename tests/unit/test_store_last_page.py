"""Store pages as nwaku pages them (issue 68 J): a page carries a cursor only when a further
message follows (nwaku's archive reads page size + 1 rows), so an exactly full last page has
none, in the plain form, the online reader (Delta, fresh tail, both, under the scan budget) and
the v3 answers (queries and lookups by hash); and a cursor naming no stored message is nwaku's
BAD_RESPONSE `archive error: DRIVER_ERROR: cursor not found`."""
from __future__ import annotations

import pyarrow as pa
import pytest
import trio

from core.store_page import StoredMessage, StoreLimits, StoreQuery, page_from_rows
from ingest.store import codec_v3
from ingest.store.protocol import plan_v3
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, write_messages
from ingest.store.server import StoreServer, StoreServiceSettings
from ingest.store.tail import Tail
from tests.unit.test_store_query import BASE_T, make_row
from tests.unit.test_store_tail import add, fresh_reader

PS, CT = "/waku/2/rs/1/0", "/a/1/b/proto"


def rows(n: int) -> list[dict]:
    return [make_row(BASE_T + i, PS, CT, b"p%d" % i, i) for i in range(n)]


def v3(server: StoreServer, **kw) -> tuple[int, str, list[bytes], bytes | None]:
    plan, refusal = plan_v3(codec_v3.decode_request(codec_v3.request("r", **kw)), StoreLimits())
    assert refusal is None, refusal
    code, detail, messages, cursor = trio.run(server._run_v3, plan)
    return code, detail, [m.message_hash for m in messages], cursor


def test_plain_form():
    stored = [StoredMessage.from_mapping(r) for r in rows(6)]
    first = page_from_rows(stored, StoreQuery(page_size=3))
    assert len(first.messages) == 3 and first.cursor is not None
    last = page_from_rows(stored, StoreQuery(cursor=first.cursor, page_size=3))
    assert len(last.messages) == 3 and last.cursor is None
    for forward in (True, False):
        assert page_from_rows(stored, StoreQuery(page_size=6, forward=forward)).cursor is None
        assert page_from_rows(stored, StoreQuery(page_size=5, forward=forward)).cursor is not None


@pytest.mark.parametrize("in_table", [6, 0, 3])
@pytest.mark.parametrize("max_scan_rows", [1_000_000, 2])
def test_reader_and_v3_walks(tmp_path, in_table, max_scan_rows):
    data = rows(6)
    path = str(tmp_path / "t")
    for k in range(0, in_table, 2):  # small files: several units to walk
        write_messages(path, pa.Table.from_pylist(data[k:min(k + 2, in_table)], schema=MESSAGES_ARROW_SCHEMA))
    tail = Tail()
    reader = fresh_reader(path, tail, max_scan_rows=max_scan_rows) if in_table else None
    if reader is None:
        write_messages(path, pa.Table.from_pylist([], schema=MESSAGES_ARROW_SCHEMA))
        reader = fresh_reader(path, tail, max_scan_rows=max_scan_rows)
    add(tail, data[in_table:])
    server = StoreServer(reader, StoreServiceSettings(max_concurrent_queries=0))
    order = [r["message_hash"] for r in data]
    for forward in (True, False):
        pages, cursor = [], None
        for _ in range(20):
            code, detail, got, cursor = v3(server, pubsub_topic=PS, cursor=cursor, forward=forward, limit=3)
            assert code == 200, detail
            pages.append(got)
            if cursor is None:
                break
        if max_scan_rows > 6:  # pages of 3, 3: no cursor after the second, exactly full
            assert pages == ([order[:3], order[3:]] if forward else [order[3:], order[:3]]), forward
        assert [h for p in (pages if forward else pages[::-1]) for h in p] == order
        assert pages[-1] and len(pages) <= 3  # the walk ends on the last messages, not an empty page
    if max_scan_rows > 6:
        code, _, got, cursor = v3(server, pubsub_topic=PS, limit=6, forward=True)
        assert (code, got, cursor) == (200, order, None)
    # a lookup by hash: exactly full, no cursor; one more, a cursor
    assert v3(server, hashes=order[:3], limit=3, forward=True)[2:] == (order[:3], None)
    assert v3(server, hashes=order[:4], limit=3, forward=True)[2:] == (order[:3], order[2])


def test_a_cursor_of_no_stored_message_is_nwaku_cursor_not_found(tmp_path):
    path = str(tmp_path / "t")
    data = rows(4)
    write_messages(path, pa.Table.from_pylist(data, schema=MESSAGES_ARROW_SCHEMA))
    server = StoreServer(fresh_reader(path, Tail()), StoreServiceSettings(max_concurrent_queries=0))
    code, detail, got, cursor = v3(server, cursor=b"\x07" * 32, forward=True)
    assert (code, detail, got, cursor) == (300, "archive error: DRIVER_ERROR: cursor not found", [], None)
    zero = v3(server, cursor=bytes(32), forward=True)
    assert zero[:2] == (300, "archive error: INVALID_QUERY: all zeroes cursor hash")
    resp = codec_v3.response("r", code, detail)
    from schemas import store_v3_pb2 as pb3
    out = pb3.StoreQueryResponse.FromString(resp)
    assert (out.status_code, out.status_desc) == (300, "BAD_RESPONSE: archive error: DRIVER_ERROR: cursor not found")
