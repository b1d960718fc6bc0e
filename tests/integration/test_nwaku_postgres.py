"""tools/nwaku_postgres.py against a real PostgreSQL: a few hundred seeded-random rows loaded
with bulk_load, then nwaku's store v3 answers checked against a plain Python reference over the
same rows (content topics, time windows, cursor walks both ways until exhausted, hashes only,
hash lookups, nwaku's prepared-statement path and its failures), insert_row, and both retention
policies. One private server for the module, a fresh database a test. Seed: NWAKU_PG_SEED, else
random (printed)."""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pytest

from tools.nwaku_postgres import (
    NwakuError,
    PostgresMissing,
    PostgresServer,
    StoreRow,
    apply_size_retention,
    apply_time_retention,
    bulk_load,
    create_schema,
    insert_row,
    list_partitions,
    messages_count,
    partition_end,
    postgres_bindir,
    query,
)

pytestmark = pytest.mark.integration

try:
    postgres_bindir()
except PostgresMissing as e:  # the set-up installs Debian's postgresql (scripts/setup.sh)
    pytest.skip(f"PostgreSQL's server is not installed: {e}", allow_module_level=True)

PUBSUB = ("/waku/2/rs/1/0", "/waku/2/rs/1/1")
CONTENT = ("/t/1/a/proto", "/t/1/b/proto", "/t/1/c/proto", "/t/1/d/proto")
BASE_S = 1_795_001_234  # not on the hour: the first partition is shorter
SPAN_S = 3 * 3600 + 600
ROWS = 400


@dataclass(frozen=True)
class Ref:
    message_hash: bytes
    pubsub_topic: str
    content_topic: str
    payload: bytes
    version: int
    timestamp: int  # what nwaku stores
    meta: bytes

    def key(self) -> tuple[int, str]:
        return (self.timestamp, self.message_hash.hex())


def make_rows(seed: int) -> tuple[pa.Table, list[Ref]]:
    """Our messages table's columns, and what nwaku should hold of them: timestamps with ties,
    a tenth without a sender timestamp (nwaku gets the receive time), a repeated row (stored
    once), empty and non-empty meta, a few null payloads."""
    rnd = random.Random(seed)
    cols: dict[str, list] = {k: [] for k in ("received_time", "message_hash", "pubsub_topic", "content_topic",
                                             "payload", "version", "timestamp", "meta")}
    refs: list[Ref] = []
    seen: set[tuple[bytes, int]] = set()
    last_ts = None
    for i in range(ROWS):
        received = BASE_S + rnd.uniform(0, SPAN_S)
        ts: int | None = int(received * 1e9) - rnd.randrange(0, 10**9)
        if last_ts is not None and rnd.random() < 0.08:
            ts = last_ts  # a tie on the timestamp: the hash decides the order
        if rnd.random() < 0.1:
            ts = None
        h = rnd.randbytes(32)
        if i > 0 and rnd.random() < 0.01:  # the same message again
            j = rnd.randrange(len(cols["message_hash"]))
            h, received, ts = cols["message_hash"][j], cols["received_time"][j], cols["timestamp"][j]
        payload = None if rnd.random() < 0.03 else rnd.randbytes(rnd.randrange(0, 40))
        meta = rnd.choice([None, b"", rnd.randbytes(8)])
        pubsub, content = rnd.choice(PUBSUB), rnd.choice(CONTENT)
        version = rnd.choice([0, 1])
        for k, v in zip(cols, (received, h, pubsub, content, payload, version, ts, meta), strict=True):
            cols[k].append(v)
        stored_ts = ts if ts else int(received * 1e9)
        last_ts = stored_ts
        if (h, stored_ts) in seen:
            continue
        seen.add((h, stored_ts))
        refs.append(Ref(h, pubsub, content, payload or b"", version, stored_ts, meta or b""))
    table = pa.table({
        "received_time": pa.array(cols["received_time"], pa.float64()),
        "message_hash": pa.array(cols["message_hash"], pa.binary()),
        "pubsub_topic": pa.array(cols["pubsub_topic"], pa.string()),
        "content_topic": pa.array(cols["content_topic"], pa.string()),
        "payload": pa.array(cols["payload"], pa.binary()),
        "version": pa.array(cols["version"], pa.int64()),
        "timestamp": pa.array(cols["timestamp"], pa.int64()),
        "meta": pa.array(cols["meta"], pa.binary()),
    })
    return table, sorted(refs, key=Ref.key)


def as_row(r: Ref) -> StoreRow:
    return StoreRow(r.message_hash, r.pubsub_topic, r.content_topic, r.payload, r.version, r.timestamp, r.meta)


@pytest.fixture(scope="module")
def seed() -> int:
    value = int(os.environ.get("NWAKU_PG_SEED", random.randrange(2**32)))
    print(f"NWAKU_PG_SEED={value}")
    return value


@pytest.fixture(scope="module")
def server():
    # in /tmp, not pytest's tmp_path: as root the server runs as the postgres user, who cannot
    # enter /tmp/pytest-of-root (0700)
    directory = tempfile.mkdtemp(prefix="nwaku-pg-")
    try:
        with PostgresServer(directory) as pg:
            yield pg
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def db(server, seed):
    """A fresh database with nwaku's schema and the seeded rows: (connection, reference rows)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as admin:
        admin.execute(f"CREATE DATABASE {name}")
    table, refs = make_rows(seed)
    with server.connect(dbname=name) as conn:
        assert create_schema(conn) == 7
        assert bulk_load(conn, table) == len(refs)
        yield conn, refs
    with server.connect() as admin:
        admin.execute(f"DROP DATABASE {name}")


def walk(conn, forward: bool, page_size: int, **kw) -> list[list[StoreRow]]:
    pages, cursor = [], None
    for _ in range(ROWS + 2):
        page = query(conn, cursor_hash=cursor, forward=forward, page_size=page_size, **kw)
        pages.append(page.rows)
        if page.cursor is None:
            return pages
        assert page.cursor == (page.rows[-1] if forward else page.rows[0]).message_hash
        cursor = page.cursor
    raise AssertionError("the cursor walk did not end")


def check_walks(conn, expected: list[Ref], page_size: int, **kw) -> None:
    """Forward and backward walks visit every matching row exactly once, each page in
    chronological order, forward pages oldest first, backward pages newest first."""
    want = [as_row(r) for r in expected]
    fwd = walk(conn, True, page_size, **kw)
    assert [row for page in fwd for row in page] == want
    assert all(len(p) == page_size for p in fwd[:-1])
    back = walk(conn, False, page_size, **kw)
    assert [row for page in reversed(back) for row in page] == want
    for page in back:
        assert page == sorted(page, key=lambda r: (r.timestamp, r.message_hash))


def test_schema_and_partitions(db):
    conn, refs = db
    assert messages_count(conn) == len(refs)
    cols = [c for (c,) in conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = "
                                       "'messages' ORDER BY ordinal_position")]
    assert cols == ["pubsubtopic", "contenttopic", "payload", "version", "id", "messagehash", "timestamp", "meta"]
    assert conn.execute("SELECT partstrat FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
                        "WHERE c.relname = 'messages'").fetchone()[0] == "r"
    indexes = {n for (n,) in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename IN "
                                          "('messages', 'messages_lookup')")}
    assert indexes == {"messageindex", "idx_messages_messagehash", "idx_messages_timestamp", "idx_query_pubsubtopic",
                       "idx_query_contenttopic", "messageindexlookuptable", "idx_messages_lookup_messagehash",
                       "idx_messages_lookup_timestamp"}
    parts = list_partitions(conn)
    lo = min(r.timestamp for r in refs) // 10**9
    assert parts[0].beginning == lo and parts[0].end == partition_end(lo)
    for a, b in zip(parts, parts[1:], strict=False):
        assert b.beginning == a.end and b.beginning % 3600 == 0 and b.end - b.beginning == 3600
    assert parts[-1].end > max(r.timestamp for r in refs) // 10**9
    assert conn.execute("SELECT count(*) FROM messages_lookup").fetchone()[0] == len(refs)
    # hex columns as nwaku writes them: meta NULL when empty, payload '' when empty
    nulls = conn.execute("SELECT count(*) FROM messages WHERE meta IS NULL").fetchone()[0]
    assert nulls == sum(1 for r in refs if not r.meta)
    assert conn.execute("SELECT count(*) FROM messages WHERE payload IS NULL").fetchone()[0] == 0


def test_queries_match_the_reference(db):
    conn, refs = db
    ts = sorted(r.timestamp for r in refs)
    start, end = ts[len(ts) // 5], ts[4 * len(ts) // 5]
    ps, cts = PUBSUB[0], [CONTENT[0], CONTENT[2]]
    shapes = [
        (dict(pubsub_topic=ps, content_topics=cts, start_ns=start, end_ns=end),
         lambda r: r.pubsub_topic == ps and r.content_topic in cts and start <= r.timestamp <= end),
        (dict(pubsub_topic=ps, content_topics=[CONTENT[1]]),
         lambda r: r.pubsub_topic == ps and r.content_topic == CONTENT[1]),
        (dict(content_topics=[CONTENT[3]], start_ns=start), lambda r: r.content_topic == CONTENT[3] and
         r.timestamp >= start),
        (dict(end_ns=end), lambda r: r.timestamp <= end),
        ({}, lambda r: True),
    ]
    for kw, keep in shapes:
        expected = [r for r in refs if keep(r)]
        assert expected, kw
        for page_size in (7, 100):
            check_walks(conn, expected, page_size, **kw)
        # the default page (20) and its cursor: the 20th row, found as nwaku finds it (rows[^2] of 21)
        page = query(conn, **kw)
        assert page.rows == [as_row(r) for r in expected[:20]]
        assert page.cursor == (expected[19].message_hash if len(expected) > 20 else None)
        assert page.statements == ["arbitrary"]
        # include_data false: the same hashes, nothing else
        bare = query(conn, include_data=False, page_size=50, **kw)
        assert bare.rows == [StoreRow(r.message_hash) for r in expected[:50]]
        back = query(conn, include_data=False, forward=False, page_size=50, **kw)
        assert back.rows == [StoreRow(r.message_hash) for r in expected[-50:]]


def test_hash_lookups(db, seed):
    conn, refs = db
    rnd = random.Random(seed + 1)
    chosen = rnd.sample(refs, 37)
    missing = rnd.randbytes(32)
    newest_first = sorted(chosen, key=Ref.key, reverse=True)
    for forward in (True, False):  # nwaku's lookup answers newest first either way
        page = query(conn, hashes=[r.message_hash for r in chosen] + [missing], page_size=100, forward=forward)
        assert page.statements == ["by_hashes"]
        if forward:
            assert page.rows == [as_row(r) for r in newest_first] and page.cursor is None
        else:  # ... and a backward page is reversed by findMessages
            assert page.rows == [as_row(r) for r in reversed(newest_first)]
    bare = query(conn, hashes=[r.message_hash for r in chosen], page_size=100, include_data=False)
    assert bare.rows == [StoreRow(r.message_hash) for r in newest_first]
    page = query(conn, hashes=[r.message_hash for r in chosen], page_size=10)
    assert page.rows == [as_row(r) for r in newest_first[:10]]
    assert page.cursor == newest_first[9].message_hash
    # hashes with other criteria: the arbitrary query, in timestamp order
    page = query(conn, hashes=[r.message_hash for r in chosen], pubsub_topic=PUBSUB[1], page_size=100)
    assert page.statements == ["arbitrary"]
    assert page.rows == [as_row(r) for r in sorted(chosen, key=Ref.key) if r.pubsub_topic == PUBSUB[1]]
    # more than 100 hashes: a query per 100, the rows concatenated, the cursor nwaku's rows[^2]
    many = rnd.sample(refs, 150)
    page = query(conn, hashes=[r.message_hash for r in many])
    first = sorted(many[:100], key=Ref.key, reverse=True)[:21]
    second = sorted(many[100:], key=Ref.key, reverse=True)[:21]
    assert page.statements == ["by_hashes", "by_hashes"]
    assert page.rows == [as_row(r) for r in first[:20]]
    assert page.cursor == second[-2].message_hash


def test_prepared_statement_path_as_nwaku(db):
    """Content topics + hashes + pubsub topic + both times: nwaku's prepared statements, which
    only answer without data and without a cursor, and then only for one topic and one hash."""
    conn, refs = db
    r = refs[len(refs) // 2]
    kw = dict(pubsub_topic=r.pubsub_topic, content_topics=[r.content_topic], hashes=[r.message_hash],
              start_ns=refs[0].timestamp, end_ns=refs[-1].timestamp)
    page = query(conn, include_data=False, **kw)
    assert page.statements == ["SelectWithoutCursorAndDataAsc"]
    assert page.rows == [StoreRow(r.message_hash)]
    two_topics = dict(kw, content_topics=[r.content_topic, "/other/1/x/proto"])  # IN ($1) gets "a,b"
    assert query(conn, include_data=False, **two_topics).rows == []
    with pytest.raises(NwakuError, match="lengths discrepancies"):
        query(conn, **kw)
    with pytest.raises(NwakuError, match="SelectWithCursorNoDataAsc"):  # the hash bound to the timestamp
        query(conn, include_data=False, cursor_hash=refs[0].message_hash, **kw)
    with pytest.raises(NwakuError, match="cursor not found"):
        query(conn, pubsub_topic=PUBSUB[0], cursor_hash=os.urandom(32))
    with pytest.raises(NwakuError, match="all zeroes"):
        query(conn, cursor_hash=bytes(32))


def test_insert_row_is_queryable(db):
    conn, refs = db
    h = os.urandom(32)
    ts = refs[-1].timestamp - 1
    before = messages_count(conn)
    for _ in range(2):  # the second is ON CONFLICT DO NOTHING
        insert_row(conn, h, PUBSUB[1], CONTENT[1], b"fresh payload", 0, ts, b"")
    assert messages_count(conn) == before + 1
    page = query(conn, hashes=[h])
    assert page.rows == [StoreRow(h, PUBSUB[1], CONTENT[1], b"fresh payload", 0, ts, b"")]
    page = query(conn, pubsub_topic=PUBSUB[1], content_topics=[CONTENT[1]], start_ns=ts, end_ns=ts)
    assert [row.message_hash for row in page.rows] == [h]
    assert conn.execute("SELECT meta FROM messages WHERE messageHash = %s", (h.hex(),)).fetchone()[0] is None


def test_time_retention(db):
    conn, refs = db
    parts = list_partitions(conn)
    cut_s = parts[1].beginning + 1000  # within the second partition: the first goes whole
    now_s = cut_s + 7200
    result = apply_time_retention(conn, retention_s=7200, now_s=now_s)
    assert result.error is None
    assert result.dropped_partitions == [parts[0].name]
    cut_ns = cut_s * 10**9
    in_first = [r for r in refs if r.timestamp < parts[0].end * 10**9]
    assert result.dropped_rows == len(in_first)
    assert result.deleted_messages == sum(1 for r in refs if parts[0].end * 10**9 <= r.timestamp < cut_ns)
    assert result.deleted_lookup == len(in_first)
    kept = [r for r in refs if r.timestamp >= cut_ns]
    assert [row.message_hash for page in walk(conn, True, 100) for row in page] == [r.message_hash for r in kept]
    # messages_lookup keeps the entries of the rows the DELETE removed (nwaku deletes only below
    # dropped partitions there)
    lookup = conn.execute("SELECT count(*) FROM messages_lookup").fetchone()[0]
    assert lookup == len(refs) - len(in_first)
    assert [p.name for p in list_partitions(conn)] == [p.name for p in parts[1:]]


def test_size_retention(db):
    conn, refs = db
    parts = list_partitions(conn)
    assert len(parts) >= 4
    size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    nothing = apply_size_retention(conn, max_bytes=size + 10**6, now_s=parts[-1].beginning)
    assert nothing.dropped_partitions == [] and nothing.error is None
    # a limit just under the size: the oldest partition goes, and that is enough
    one = apply_size_retention(conn, max_bytes=size - 1, now_s=parts[-1].beginning)
    assert one.dropped_partitions == [parts[0].name] and one.error is None
    assert one.bytes_after < size
    # a limit nothing meets: oldest first, all but the partition holding now, then nwaku's error
    rest = apply_size_retention(conn, max_bytes=1, now_s=parts[-1].beginning + 5)
    assert rest.dropped_partitions == [p.name for p in parts[1:-1]]
    assert rest.error is not None and "didn't clear database size" in rest.error
    assert [p.name for p in list_partitions(conn)] == [parts[-1].name]
    left = [r for r in refs if r.timestamp >= parts[-1].beginning * 10**9]
    assert messages_count(conn) == len(left)
    assert conn.execute("SELECT count(*) FROM messages_lookup").fetchone()[0] == len(left)
