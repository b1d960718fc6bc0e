"""Store 2.0.0-beta2 paging: the online reader (ingest/store/reader.py over a Delta table
written with deltalake) against a plain-Python oracle on random tables.

Random tables have ties on received_time, equal digests on different pubsub topics (same
content topic and payload), several files whose time ranges overlap and tiny row groups.
Queries: empty and non-empty filters, both directions, page sizes 0, 1, 20, 100, 1000, first
cursors at, between, before and after stored messages. Paging to the end must give every
matching message exactly once, in order, each page equal to the oracle's, with its cursor.

The helpers here (random_rows, oracle_pages, ...) are reused by the integration tests, which
check the Spark function and libp2p against the same oracle."""
from __future__ import annotations

import hashlib
import math
import random
import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.store_page import (
    MAX_DIGEST,
    MIN_DIGEST,
    Index,
    StoreLimits,
    StoreQuery,
    check_query,
    history_pages,
    page_from_rows,
    page_size_of,
)
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, ReaderSettings, StoreReader, write_messages

PUBSUB = ("/waku/2/rs/1/0", "/waku/2/rs/1/1")
CONTENT = ("/app/1/a/proto", "/app/1/b/proto", "/app/1/c/proto")
BASE_T = 1_790_000_000.0  # 2026-09-21; rows spread over two received_date partitions
PAGE_SIZES = (0, 1, 20, 100, 1000)


# --- the oracle (plain Python, independent of core.store_page) -------------------------

def oracle_pages(rows: list[dict], pubsub: str, contents: tuple[str, ...], forward: bool, page_size: int,
                 cursor: tuple[float, bytes] | None) -> list[tuple[list[tuple[float, bytes, str]], tuple | None]]:
    """Every page until the end: [(messages as (time, digest, pubsub), response cursor)]; a
    page has a cursor only when more messages follow (nwaku's rule: no cursor after an exactly
    full last page), so the walk ends at the first page without one."""
    n = 20 if page_size == 0 else min(page_size, 100)
    hits = sorted((r["received_time"], r["digest"], r["pubsub_topic"]) for r in rows
                  if (not pubsub or r["pubsub_topic"] == pubsub) and (not contents or r["content_topic"] in contents))
    pages = []
    while True:
        if forward:
            side = [h for h in hits if cursor is None or (h[0], h[1]) > cursor]
            page = side[:n]
        else:
            side = [h for h in hits if cursor is None or (h[0], h[1]) < cursor]
            page = side[-n:] if side else []
        if len(side) <= n:
            pages.append((page, None))
            return pages
        cursor = (page[-1][0], page[-1][1]) if forward else (page[0][0], page[0][1])
        pages.append((page, cursor))


def page_tuples(messages) -> list[tuple[float, bytes, str]]:
    return [(m.received_time, m.digest, m.pubsub_topic) for m in messages]


def check_paging(fetch, rows, pubsub, contents, forward, page_size, cursor, key=page_tuples):
    """Page with `fetch(StoreQuery) -> page` and compare every page and cursor to the oracle."""
    expected = oracle_pages(rows, pubsub, contents, forward, page_size, cursor)
    query = StoreQuery(pubsub, contents, None if cursor is None else Index(*cursor), forward, page_size)
    got = list(history_pages(fetch, query, max_pages=len(expected) + 2))
    assert len(got) == len(expected)
    for page, (want, want_cursor) in zip(got, expected, strict=True):
        assert key(page.messages) == key_of_oracle(want, key)
        assert (None if page.cursor is None else (page.cursor.received_time, page.cursor.digest)) == want_cursor


def key_of_oracle(want, key):
    return want if key is page_tuples else key(want)


# --- random tables -------------------------------------------------------------------------

def make_row(t: float, pubsub: str, content: str, payload: bytes, i: int) -> dict:
    return {
        "received_time": t,
        "digest": hashlib.sha256(content.encode() + payload).digest(),
        "message_hash": hashlib.sha256(f"{pubsub}|{i}".encode()).digest(),
        "pubsub_topic": pubsub,
        "content_topic": content,
        "payload": payload,
        "version": i % 2,
        "timestamp": int(t * 1e9) if i % 3 else None,
        "meta": None if i % 4 else b"m%d" % i,
        "rate_limit_proof": None,
        "source": "relay", "bridge_id": "test", "kafka_topic": "t", "kafka_partition": 0, "kafka_offset": i,
        "kafka_timestamp": None,
        "received_date": _date(t),
    }


def _date(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d")


def random_rows(rnd: random.Random, n: int) -> list[dict]:
    """Rows whose Index (received_time, digest) is unique, with many time ties and the same
    digest on both pubsub topics (at different times)."""
    times = [BASE_T + rnd.choice((0, 86_400)) + rnd.randrange(max(2, n // 3)) * 0.5 for _ in range(n)]
    rows, keys = [], set()
    for i, t in enumerate(times):
        content = rnd.choice(CONTENT)
        payload = b"p%d" % rnd.randrange(max(2, n // 2))
        pubsub = rnd.choice(PUBSUB)
        row = make_row(t, pubsub, content, payload, i)
        if (t, row["digest"]) in keys:
            continue
        keys.add((t, row["digest"]))
        rows.append(row)
    return rows


def write_table(path: str, rows: list[dict], rnd: random.Random, files: int = 3, group: int = 7) -> None:
    """The rows in `files` appends (overlapping time ranges), each sorted by (time, digest)."""
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    chunks = [shuffled[i::files] for i in range(files)] if rows else [[]]
    for chunk in chunks:
        chunk = sorted(chunk, key=lambda r: (r["received_time"], r["digest"]))
        write_messages(path, pa.Table.from_pylist(chunk, schema=MESSAGES_ARROW_SCHEMA), max_row_group_size=group)


def random_cursor(rnd: random.Random, rows: list[dict]) -> tuple[float, bytes] | None:
    kind = rnd.choice(("none", "at", "between", "before", "after", "same_time"))
    if kind == "none" or not rows:
        return None
    r = rnd.choice(rows)
    if kind == "at":
        return (r["received_time"], r["digest"])
    if kind == "same_time":
        return (r["received_time"], rnd.choice((MIN_DIGEST, MAX_DIGEST, rnd.randbytes(32))))
    if kind == "between":
        return (r["received_time"] + 0.25, rnd.randbytes(32))
    lo = min(x["received_time"] for x in rows)
    hi = max(x["received_time"] for x in rows)
    return (lo - 1.0, rnd.randbytes(32)) if kind == "before" else (hi + 1.0, rnd.randbytes(32))


def random_filters(rnd: random.Random) -> tuple[str, tuple[str, ...]]:
    pubsub = rnd.choice(("",) + PUBSUB)
    contents = tuple(rnd.sample(CONTENT, rnd.choice((0, 0, 1, 2))))
    return pubsub, contents


# --- tests ---------------------------------------------------------------------------------

def reader_for(path: str, **kw) -> StoreReader:
    r = StoreReader(ReaderSettings(path, **kw))
    r.refresh()
    return r


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from((0, 1, 5, 40, 130, 260)))
def test_reader_pages_match_oracle(tmp_path, seed, n):
    rnd = random.Random(seed)
    rows = random_rows(rnd, n)
    path = str(tmp_path / uuid.uuid4().hex)
    write_table(path, rows, rnd, files=rnd.choice((1, 2, 4)), group=rnd.choice((3, 16, 1000)))
    reader = reader_for(path)
    for _ in range(4):
        pubsub, contents = random_filters(rnd)
        forward = rnd.random() < 0.5
        size = rnd.choice(PAGE_SIZES)
        if size == 1 and len(rows) > 60:
            size = 20
        check_paging(reader.query, rows, pubsub, contents, forward, size, random_cursor(rnd, rows))


@pytest.mark.parametrize("forward", [True, False])
def test_plain_python_form_matches_oracle(forward):
    from core.store_page import StoredMessage

    rnd = random.Random(7)
    rows = random_rows(rnd, 120)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    for size in PAGE_SIZES:
        for _ in range(5):
            pubsub, contents = random_filters(rnd)
            check_paging(lambda q: page_from_rows(stored, q), rows, pubsub, contents, forward, size,
                         random_cursor(rnd, rows))


def test_page_size_limits():
    assert [page_size_of(s) for s in (0, 1, 20, 100, 101, 1000, 2**63 - 1)] == [20, 1, 20, 100, 100, 100, 100]
    assert check_query(StoreQuery(page_size=2**63 - 1)) is None
    # 13/WAKU2-STORE: any size above the maximum is the maximum, 2^63 and up included
    assert check_query(StoreQuery(page_size=2**64 - 1)) is None and page_size_of(2**64 - 1) == 100
    assert page_size_of(0, StoreLimits(5, 10, 3)) == 5


def test_unservable_queries():
    assert check_query(StoreQuery(content_topics=tuple(f"/t/{i}" for i in range(101)))) == "too_many_content_topics"
    assert check_query(StoreQuery(content_topics=tuple(f"/t/{i}" for i in range(100)))) is None
    assert check_query(StoreQuery(cursor=Index(math.nan, MIN_DIGEST))) == "bad_cursor_time"
    # a cursor is a position: any digest length, and the ends of time, are valid
    for cursor in (Index(1.0, b"short"), Index(1.0, b""), Index(1.0, b"\x01" * 40), Index(math.inf, MIN_DIGEST),
                   Index(-math.inf, MIN_DIGEST)):
        assert check_query(StoreQuery(cursor=cursor)) is None


def test_every_position_is_a_cursor(tmp_path):
    """Cursors with digests of other lengths, or at +-inf, page exactly like the oracle."""
    rnd = random.Random(31)
    rows = random_rows(rnd, 60)
    path = str(tmp_path / "messages")
    write_table(path, rows, rnd, files=2, group=7)
    reader = reader_for(path)
    mid = sorted(rows, key=lambda r: (r["received_time"], r["digest"]))[30]
    cursors = [(math.inf, MIN_DIGEST), (-math.inf, MIN_DIGEST), (mid["received_time"], mid["digest"][:5]),
               (mid["received_time"], mid["digest"] + b"\x00"), (mid["received_time"], b"")]
    for cursor in cursors:
        for forward in (True, False):
            check_paging(reader.query, rows, "", (), forward, 7, cursor)


def test_reader_empty_and_missing_table(tmp_path):
    reader = reader_for(str(tmp_path / "absent"))
    assert reader.query(StoreQuery()).messages == []
    path = str(tmp_path / "empty")
    write_table(path, [], random.Random(1))
    assert reader_for(path).query(StoreQuery(forward=False)).cursor is None


def test_reader_follows_new_versions_and_skips_files(tmp_path):
    path = str(tmp_path / "t")
    rnd = random.Random(3)
    day1 = [make_row(BASE_T + i, PUBSUB[0], CONTENT[0], b"a%d" % i, i) for i in range(100)]
    write_table(path, day1, rnd, files=1, group=10)
    reader = reader_for(path)
    assert len(reader.query(StoreQuery(page_size=100)).messages) == 100
    later = [make_row(BASE_T + 1000 + i, PUBSUB[1], CONTENT[1], b"b%d" % i, 1000 + i) for i in range(100)]
    write_table(path, later, rnd, files=1, group=10)
    assert reader.query(StoreQuery(forward=False, page_size=5)).messages[-1].received_time == BASE_T + 99
    reader.refresh()
    assert reader.query(StoreQuery(forward=False, page_size=5)).messages[-1].received_time == BASE_T + 1099
    # A page near the cursor reads one or two row groups, not the table (20 groups).
    before = reader.row_groups_read
    page = reader.query(StoreQuery(cursor=Index(BASE_T + 1050.5, MIN_DIGEST), page_size=5))
    assert [m.received_time for m in page.messages] == [BASE_T + 1051 + i for i in range(5)]
    assert reader.row_groups_read - before <= 2
    # A topic that no file holds reads nothing.
    before = reader.row_groups_read
    assert reader.query(StoreQuery(pubsub_topic="/waku/2/rs/9/9")).messages == []
    assert reader.query(StoreQuery(content_topics=("/zzz/1/x/proto",))).messages == []
    assert reader.row_groups_read == before


def test_reader_scan_budget_gives_partial_pages_that_continue(tmp_path):
    path = str(tmp_path / "t")
    rnd = random.Random(5)
    # Every row group spans topics a..c (statistics cannot skip it); 1 row in 50 is on b.
    rows = [make_row(BASE_T + i, PUBSUB[0], CONTENT[1] if i % 50 == 0 else CONTENT[2 * (i % 2)], b"x%d" % i, i)
            for i in range(500)]
    write_table(path, rows, rnd, files=2, group=10)
    reader = reader_for(path, max_scan_rows=50)
    want = sorted((r["received_time"], r["digest"]) for r in rows if r["content_topic"] == CONTENT[1])
    for forward in (True, False):
        got, pages = [], 0
        for page in history_pages(reader.query, StoreQuery(content_topics=(CONTENT[1],), forward=forward, page_size=3)):
            assert page.rows_scanned <= 50 + 10
            got.extend((m.received_time, m.digest) for m in page.messages)
            pages += 1
        assert sorted(got) == want and len(got) == len(want)
        assert pages > 5


def test_reader_cached_only(tmp_path):
    from ingest.store.reader import NotCached

    path = str(tmp_path / "t")
    rows = [make_row(BASE_T + i, PUBSUB[0], CONTENT[0], b"c%d" % i, i) for i in range(50)]
    write_table(path, rows, random.Random(9), files=1, group=10)
    reader = reader_for(path)
    query = StoreQuery(cursor=Index(BASE_T + 20.5, MIN_DIGEST), page_size=5)
    with pytest.raises(NotCached):
        reader.query(query, cached_only=True)
    page = reader.query(query)
    assert reader.query(query, cached_only=True).messages == page.messages


def test_reader_preloads_newest_row_groups(tmp_path):
    from ingest.store.reader import NotCached

    path = str(tmp_path / "t")
    rows = [make_row(BASE_T + i, PUBSUB[0], CONTENT[0], b"p%d" % i, i) for i in range(100)]
    write_table(path, rows, random.Random(4), files=1, group=10)
    reader = reader_for(path)
    assert reader.preload(mb=1) >= 1
    newest = reader.query(StoreQuery(forward=False, page_size=5), cached_only=True)
    assert [m.received_time for m in newest.messages] == [BASE_T + i for i in range(95, 100)]
    if reader.row_groups_read < 10:
        with pytest.raises(NotCached):
            reader.query(StoreQuery(page_size=5), cached_only=True)


@pytest.mark.parametrize("budget", (1000, 300))
def test_no_stuck_walks_under_the_scan_budget(tmp_path, budget):
    """A sparse content topic over many rows in files that all overlap in time: every row group
    that straddles the cursor must be read before the frontier can move, and together they hold
    more rows than the budget. Following cursors must still end, with exactly the matching rows
    in store order, each once (issue 12, "No stuck walks")."""
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    path = str(tmp_path / "t")
    n_rows = 5000
    times = rnd.sample(range(n_rows * 3), n_rows)
    rows = []
    for i, t in enumerate(times):
        content = CONTENT[1] if rnd.random() < 0.01 else CONTENT[rnd.choice((0, 2))]
        rows.append(make_row(BASE_T + t * 0.5, rnd.choice(PUBSUB), content, b"s%d" % i, i))
    # 10 appends, each spanning the whole time range; row groups of 150 rows: the 10 row groups
    # straddling any cursor hold 1,500 rows, more than either budget.
    write_table(path, rows, rnd, files=10, group=150)
    reader = reader_for(path, max_scan_rows=budget)
    want = sorted((r["received_time"], r["digest"]) for r in rows if r["content_topic"] == CONTENT[1])
    for forward in (True, False):
        for size in (3, 20):
            got, pages, partial = [], 0, 0
            query = StoreQuery(content_topics=(CONTENT[1],), forward=forward, page_size=size)
            for page in history_pages(reader.query, query, max_pages=5000):
                pages += 1
                partial += page.partial
                keys = [(m.received_time, m.digest) for m in page.messages]
                assert keys == sorted(keys)
                got.extend(keys if forward else reversed(keys))
            assert page.cursor is None, f"walk did not end in {pages} pages (seed {seed})"
            assert got == (want if forward else want[::-1]), f"seed {seed}"
            assert partial > 0  # the budget was reached
    # Store v3 as js-waku pages (next cursor: the hash of the edge message; stop at the first
    # empty page): the server never answers an empty page before the end.
    import trio

    from ingest.store import codec_v3
    from ingest.store.protocol import plan_v3
    from ingest.store.server import StoreServer, StoreServiceSettings

    server = StoreServer(reader, StoreServiceSettings(max_concurrent_queries=0))
    by_hash = {r["message_hash"]: (r["received_time"], r["digest"]) for r in rows}
    for forward in (True, False):
        got, cursor = [], None
        for _ in range(1000):
            plan, refusal = plan_v3(codec_v3.decode_request(codec_v3.request(
                "r", content_topics=[CONTENT[1]], cursor=cursor, forward=forward, limit=5)), StoreLimits())
            code, _, messages, _ = trio.run(server._run_v3, plan)
            assert code == 200
            if not messages:
                break
            hashes = [m.message_hash for m in messages]
            got = got + hashes if forward else hashes + got
            cursor = hashes[-1] if forward else hashes[0]
        assert [by_hash[h] for h in got] == want, f"seed {seed}"


def test_time_windows_skip_units_and_match_the_plain_form(tmp_path):
    """Store v3 / beta2 time windows compare the sender timestamp (the receive time when there
    is none, null or 0). Units (files, row groups) whose timestamp statistics, and receive times
    for their untimed rows, lie outside the window are not read; pages stay those of the plain
    form, whatever the senders' clocks (timestamps up to 40 s off the receive time)."""
    from core.store_page import StoredMessage

    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    rows = []
    for i in range(600):
        t = BASE_T + i * 10.0
        row = make_row(t, rnd.choice(PUBSUB), rnd.choice(CONTENT), b"w%d" % i, i)
        kind = rnd.random()
        row["timestamp"] = None if kind < 0.1 else 0 if kind < 0.15 else int((t + rnd.uniform(-40, 40)) * 1e9)
        rows.append(row)

    def write_in_three_files(path: str) -> None:
        # Files of consecutive time ranges, 20 rows a row group: 30 groups.
        for k in range(3):
            write_messages(path, pa.Table.from_pylist(rows[k * 200:(k + 1) * 200], schema=MESSAGES_ARROW_SCHEMA),
                           max_row_group_size=20)

    path = str(tmp_path / "t")
    write_in_three_files(path)
    reader = reader_for(path)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    for _ in range(40):
        lo = BASE_T + rnd.uniform(-100, 6100)
        start = int(lo * 1e9) if rnd.random() < 0.8 else None
        end = int((lo + rnd.uniform(0, 400)) * 1e9) if rnd.random() < 0.8 else None
        for forward in (True, False):
            pubsub, contents = random_filters(rnd)
            query = StoreQuery(pubsub, contents, None, forward, rnd.choice((5, 20)), time_start=start, time_end=end)
            want = list(history_pages(lambda q: page_from_rows(stored, q), query, max_pages=200))
            got = list(history_pages(reader.query, query, max_pages=200))
            assert [page_tuples(p.messages) for p in got] == [page_tuples(p.messages) for p in want], f"seed {seed}"
    # A window of 100 s inside the second file reads a few of the 30 row groups, not all (the
    # same rows, untimed ones with a null timestamp only: a 0 makes a unit's timestamp range
    # start at 0, which statistics cannot tell from a real one).
    path = str(tmp_path / "nulls")
    rows = [{**r, "timestamp": r["timestamp"] or None} for r in rows]
    stored = [StoredMessage.from_mapping(r) for r in rows]
    write_in_three_files(path)
    fresh = reader_for(path)
    window = StoreQuery(page_size=100, time_start=int((BASE_T + 3000) * 1e9), time_end=int((BASE_T + 3100) * 1e9))
    page = fresh.query(window)
    assert page.messages and page.messages == page_from_rows(stored, window).messages
    assert fresh.row_groups_read <= 4
