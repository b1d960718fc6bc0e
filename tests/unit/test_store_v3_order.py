"""Store v3 answers (issue 36, items 1-5) on the pure parts and the online reader over a real
Delta table (deltalake) with a fresh tail:

1. the v3 order is total, (received_time, digest, message hash): messages sharing a beta2 Index
   (one payload and content topic received at once, on two pubsub topics or with two
   timestamps) are each met once by a walk following v3 cursors, forward and backward, from
   Delta, from the tail and across both; a beta2 cursor stays a position, exclusive of every
   message at its Index;
2. lookups by hash are paged like any query: limit (default 20), cursor, direction, store order;
3. a hash repeated in a request is answered once;
4. message hashes combine with the pubsub topic, content topics and time window as filters
   (nwaku: `messageHash IN (...)` AND the others), so js-waku's requests are answered;
5. time windows compare integer nanoseconds end to end: bounds equal to timestamps a float64
   cannot hold find their message in Delta (statistics and rows), in the tail and in the
   plain form.

The Spark form (pipeline/store/query.py) is checked against the same oracle in
tests/integration/test_store_v3_order_spark.py."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest
import trio

from core.store_page import Index, StoredMessage, StoreLimits, StoreQuery, history_pages, page_from_rows
from ingest.store import codec_v3
from ingest.store.codec import query_from_proto, response_rpc
from ingest.store.protocol import plan_v3
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, write_messages
from ingest.store.server import StoreServer, StoreServiceSettings
from ingest.store.tail import Tail
from tests.unit.test_store_query import BASE_T, CONTENT, PUBSUB, make_row, reader_for
from tests.unit.test_store_tail import add, fresh_reader


def seeded() -> random.Random:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    return random.Random(seed)


def tied_rows(rnd: random.Random, n: int) -> list[dict]:
    """Rows with many equal (received_time, digest) pairs: few receive times and payloads, so
    one payload and content topic is often received at once on both pubsub topics or with
    another timestamp or meta (make_row gives each row a hash of its own)."""
    rows = []
    for i in range(n):
        t = BASE_T + rnd.randrange(max(2, n // 8)) * 0.5
        row = make_row(t, rnd.choice(PUBSUB), rnd.choice(CONTENT[:2]), b"p%d" % rnd.randrange(3), i)
        rows.append(row)
    keys = [(r["received_time"], r["digest"]) for r in rows]
    assert len(set(keys)) < len(keys) * 0.8  # plenty of shared Indexes
    return rows


def write_tied(path: str, rows: list[dict], rnd: random.Random, files: int = 3, group: int = 5) -> None:
    """Appends whose time ranges overlap; each file sorted by (time, digest) only, so rows that
    share an Index lie in no particular hash order, and tiny row groups split them."""
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    for k in range(files):
        chunk = sorted(shuffled[k::files], key=lambda r: (r["received_time"], r["digest"]))
        if chunk:
            write_messages(path, pa.Table.from_pylist(chunk, schema=MESSAGES_ARROW_SCHEMA), max_row_group_size=group)


def v3_order(rows: list[dict], pubsub: str = "", contents: tuple[str, ...] = ()) -> list[bytes]:
    """The oracle: matching rows' hashes in (received_time, digest, hash) order."""
    return [r["message_hash"] for r in sorted(rows, key=lambda r: (r["received_time"], r["digest"], r["message_hash"]))
            if (not pubsub or r["pubsub_topic"] == pubsub) and (not contents or r["content_topic"] in contents)]


def walk_v3(server: StoreServer, forward: bool, limit: int | None, **kw) -> list[bytes]:
    """A js-waku walk through the server's v3 path (plan_v3 + _run_v3): the next cursor is the
    hash of the page's last (forward) / first (backward) message; stop at the first empty page.
    The hashes in store order."""
    got: list[bytes] = []
    cursor = None
    for _ in range(2000):
        plan, refusal = plan_v3(codec_v3.decode_request(codec_v3.request(
            "r", cursor=cursor, forward=forward, limit=limit, **kw)), StoreLimits())
        assert refusal is None, refusal
        code, detail, messages, _ = trio.run(server._run_v3, plan)
        assert code == 200, detail
        if not messages:
            return got
        hashes = [m.message_hash for m in messages]
        got = got + hashes if forward else hashes + got
        cursor = hashes[-1] if forward else hashes[0]
    raise AssertionError("the walk did not end")


def server_of(reader) -> StoreServer:
    return StoreServer(reader, StoreServiceSettings(max_concurrent_queries=0))


# --- item 1: a total order ---------------------------------------------------------------

@pytest.mark.parametrize("in_table", [1.0, 0.0, 0.5])
def test_v3_walks_meet_messages_sharing_an_index_once(tmp_path, in_table):
    """Delta only, tail only, and half in each: every page size and direction, with and without
    filters, gives every matching message once in (time, digest, hash) order."""
    rnd = seeded()
    rows = tied_rows(rnd, 120)
    cut = int(len(rows) * in_table)
    path = str(tmp_path / "t")
    write_tied(path, rows[:cut], rnd)
    tail = Tail()
    reader = fresh_reader(path, tail)
    add(tail, rows[cut:])
    server = server_of(reader)
    for pubsub, contents in (("", ()), (PUBSUB[0], ()), ("", (CONTENT[0],)), (PUBSUB[1], (CONTENT[1],))):
        want = v3_order(rows, pubsub, contents)
        for forward in (True, False):
            for limit in (1, 2, 3, 7):
                got = walk_v3(server, forward, limit, pubsub_topic=pubsub or None, content_topics=contents)
                assert got == want, (pubsub, contents, forward, limit, len(got), len(want))


def test_plain_form_and_reader_agree_on_v3_cursors(tmp_path):
    """core/store_page's plain form and the reader give the same page after any message's v3
    cursor (its Index with its hash), including when the cursor's Index is shared."""
    rnd = seeded()
    rows = tied_rows(rnd, 80)
    path = str(tmp_path / "t")
    write_tied(path, rows, rnd, files=2, group=3)
    reader = reader_for(path)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    for m in rnd.sample(stored, 25):
        for forward in (True, False):
            q = StoreQuery(cursor=Index(m.received_time, m.digest, m.message_hash), forward=forward, page_size=4)
            want = page_from_rows(stored, q)
            got = reader.query(q)
            assert [x.message_hash for x in got.messages] == [x.message_hash for x in want.messages]
            assert (got.cursor and got.cursor.message_hash) == (want.cursor and want.cursor.message_hash)


def test_beta2_cursor_stays_a_position(tmp_path):
    """A beta2 cursor (an Index without hash, as the wire carries it) excludes every message at
    its Index, in both directions, from Delta, the tail and the plain form; a page's cursor goes
    out on the beta2 wire as (received_time, digest) and comes back as that position."""
    rnd = seeded()
    rows = tied_rows(rnd, 60)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    shared = [m for m in stored if sum((x.received_time, x.digest) == (m.received_time, m.digest) for x in stored) > 1]
    path = str(tmp_path / "t")
    write_tied(path, rows[:30], rnd, files=2, group=4)
    tail = Tail()
    reader = fresh_reader(path, tail)
    add(tail, rows[30:])
    for m in shared[:10]:
        for forward in (True, False):
            q = StoreQuery(cursor=Index(m.received_time, m.digest), forward=forward, page_size=100)
            at = (m.received_time, m.digest)
            want = [x for x in stored
                    if ((x.received_time, x.digest) > at if forward else (x.received_time, x.digest) < at)]
            for page in (reader.query(q), page_from_rows(stored, q)):
                assert sorted(x.message_hash for x in page.messages) == sorted(x.message_hash for x in want)
    page = reader.query(StoreQuery(page_size=5, forward=True))
    assert page.cursor.message_hash == page.messages[-1].message_hash  # the edge message's place
    wire = response_rpc("r", page, True)
    back = query_from_proto(wire.response and _echo(wire))
    assert back.cursor == Index(page.cursor.received_time, page.cursor.digest) and back.cursor.message_hash is None


def _echo(wire):
    """The HistoryQuery a beta2 client sends next: the response cursor in its paging info."""
    from schemas import store_beta2_pb2 as pb

    q = pb.HistoryQuery()
    q.pagingInfo.cursor.CopyFrom(wire.response.pagingInfo.cursor)
    q.pagingInfo.direction = pb.PagingInfo.FORWARD
    return q


def test_history_pages_walk_the_total_order_locally(tmp_path):
    """history_pages over the reader (the CLI's local walk) follows page cursors that keep the
    edge message's hash: every message once."""
    rnd = seeded()
    rows = tied_rows(rnd, 90)
    path = str(tmp_path / "t")
    write_tied(path, rows, rnd)
    reader = reader_for(path)
    for forward in (True, False):
        got = []
        for page in history_pages(reader.query, StoreQuery(forward=forward, page_size=2)):
            hashes = [m.message_hash for m in page.messages]
            got = got + hashes if forward else hashes + got
        assert got == v3_order(rows)


# --- items 2-4: lookups by hash ------------------------------------------------------------

def lookup(server: StoreServer, hashes, **kw):
    plan, refusal = plan_v3(codec_v3.decode_request(codec_v3.request("h", hashes=hashes, **kw)), StoreLimits())
    assert refusal is None, refusal
    code, detail, messages, cursor = trio.run(server._run_v3, plan)
    assert code == 200, detail
    return [m.message_hash for m in messages], cursor


def test_hash_lookups_are_paged_in_store_order(tmp_path):
    rnd = seeded()
    rows = tied_rows(rnd, 120)
    path = str(tmp_path / "t")
    write_tied(path, rows[:80], rnd)
    tail = Tail()
    reader = fresh_reader(path, tail)
    add(tail, rows[80:])
    server = server_of(reader)
    order = v3_order(rows)
    picks = rnd.sample(order, 50)  # request order: random
    want = [h for h in order if h in set(picks)]
    # no limit: the default page of 20, the first 20 backward = the newest, oldest first
    got, cursor = lookup(server, picks)
    assert got == want[-20:] and cursor == want[-20]
    got, cursor = lookup(server, picks, forward=True)
    assert got == want[:20] and cursor == want[19]
    # limit 1 with 2 known hashes: one, and a cursor to the other
    got, cursor = lookup(server, picks[:2], limit=1, forward=True)
    two = [h for h in order if h in set(picks[:2])]
    assert got == two[:1] and cursor == two[0]
    assert lookup(server, picks[:2], limit=1, forward=True, cursor=cursor) == (two[1:], None)
    # following the cursors, both ways, with any limit: every hash once, in store order
    for forward in (True, False):
        for limit in (1, 3, 7, None):
            seen, cursor = [], None
            while True:
                page, cursor = lookup(server, picks, limit=limit, forward=forward, cursor=cursor)
                seen = seen + page if forward else page + seen
                if cursor is None:
                    break
            assert seen == want, (forward, limit)


def test_repeated_and_unknown_hashes(tmp_path):
    rnd = seeded()
    rows = tied_rows(rnd, 40)
    path = str(tmp_path / "t")
    write_tied(path, rows, rnd)
    server = server_of(reader_for(path))
    h = rows[7]["message_hash"]
    assert lookup(server, [h] * 5) == ([h], None)
    other = rows[3]["message_hash"]
    got, _ = lookup(server, [h, b"\x07" * 32, h, other, other], forward=True)
    assert got == [x for x in v3_order(rows) if x in (h, other)]
    # 100 distinct hashes at most; repeats do not count
    plan, refusal = plan_v3(codec_v3.decode_request(codec_v3.request("x", hashes=[h] * 150)), StoreLimits())
    assert refusal is None and plan.hashes == (h,)
    many = [bytes([i]) * 32 for i in range(101)]
    _, refusal = plan_v3(codec_v3.decode_request(codec_v3.request("x", hashes=many)), StoreLimits())
    assert refusal[0] == 400


def test_hashes_combine_with_the_other_filters_as_nwaku(tmp_path):
    """js-waku 0.0.36 sends its pubsub topic with the hashes; nwaku's archive ANDs the hashes
    with the pubsub topic, content topics and time window."""
    rnd = seeded()
    rows = tied_rows(rnd, 60)
    path = str(tmp_path / "t")
    write_tied(path, rows, rnd)
    server = server_of(reader_for(path))
    picks = [r["message_hash"] for r in rows[::2]]
    by_hash = {r["message_hash"]: r for r in rows}
    got, _ = lookup(server, picks, pubsub_topic=PUBSUB[0], limit=100, forward=True)
    assert got == [h for h in v3_order(rows, PUBSUB[0]) if h in set(picks)] and got
    got, _ = lookup(server, picks, pubsub_topic=PUBSUB[1], content_topics=[CONTENT[0]], limit=100, forward=True)
    assert got == [h for h in v3_order(rows, PUBSUB[1], (CONTENT[0],)) if h in set(picks)]
    stamped = [h for h in picks if by_hash[h]["timestamp"]]
    t = by_hash[stamped[0]]["timestamp"]
    got, _ = lookup(server, picks, time_start=t, time_end=t, limit=100)
    # (a window compares the timestamp, or the receive time in ns without one)
    time_ns = {h: r["timestamp"] or int(r["received_time"] * 1e9) for h, r in by_hash.items()}
    assert got == [h for h in v3_order(rows) if h in set(picks) and time_ns[h] == t] and got


def test_lookup_page_is_pure():
    """lookup_page: what the server does with the located messages (no I/O)."""
    from ingest.store.protocol import lookup_page

    ms = [StoredMessage(BASE_T, b"\x01" * 32, PUBSUB[i % 2], CONTENT[0], message_hash=bytes([i]) * 32)
          for i in range(5)]
    q = StoreQuery(forward=True, page_size=2)
    page, cursor = lookup_page(ms + ms[:2], q, StoreLimits())
    assert [m.message_hash for m in page.messages] == [ms[0].message_hash, ms[1].message_hash]
    assert cursor == ms[1].message_hash
    q = StoreQuery(forward=True, page_size=2, cursor=ms[3].index)
    page, cursor = lookup_page(ms, q, StoreLimits())
    assert [m.message_hash for m in page.messages] == [ms[4].message_hash] and cursor is None
    page, cursor = lookup_page(ms, StoreQuery(PUBSUB[1], page_size=10), StoreLimits())
    assert [m.message_hash for m in page.messages] == [ms[1].message_hash, ms[3].message_hash] and cursor is None


# --- item 5: integer nanoseconds -----------------------------------------------------------

NS = 1_764_000_000_123_456_789  # float64 holds multiples of 256 here: none of NS + k for small odd k


def ns_rows(n: int) -> list[dict]:
    rows = []
    for k in range(n):
        ts = NS + k * 37 + (k % 5)
        row = make_row(NS / 1e9 + 0.5 + k * 0.001, PUBSUB[k % 2], CONTENT[0], b"ns%d" % k, k)
        row["timestamp"] = ts
        rows.append(row)
    assert sum(float(r["timestamp"]) != r["timestamp"] for r in rows) >= n - 1
    return rows


@pytest.mark.parametrize("files", [1, "each"])
def test_windows_bounded_by_timestamps_float64_cannot_hold(tmp_path, files):
    """A window [ts, ts] finds its message in Delta (one file, and one file per message: the
    file's statistics are the bound itself), in the tail and in the plain form; [ts_a, ts_b]
    finds exactly those between."""
    rows = ns_rows(12)
    path = str(tmp_path / "t")
    for chunk in ([rows] if files == 1 else [[r] for r in rows]):
        write_messages(path, pa.Table.from_pylist(chunk, schema=MESSAGES_ARROW_SCHEMA), max_row_group_size=3)
    delta = reader_for(path)
    tail = Tail()
    in_tail = fresh_reader(str(tmp_path / "none"), tail)
    add(tail, rows)
    stored = [StoredMessage.from_mapping(r) for r in rows]
    server = server_of(delta)
    for i, r in enumerate(rows):
        t = r["timestamp"]
        for forward in (True, False):
            q = StoreQuery(time_start=t, time_end=t, forward=forward)
            for source in (delta.query, in_tail.query, lambda q: page_from_rows(stored, q)):
                assert [m.message_hash for m in source(q).messages] == [r["message_hash"]], (i, t)
        plan, _ = plan_v3(codec_v3.decode_request(codec_v3.request("w", time_start=t, time_end=t)), StoreLimits())
        assert [m.message_hash for m in trio.run(server._run_v3, plan)[2]] == [r["message_hash"]]
        # one nanosecond off either way: nothing
        for lo, hi in ((t + 1, t + 1), (t - 1, t - 1)):
            if all(x["timestamp"] not in (lo, hi) for x in rows):
                assert delta.query(StoreQuery(time_start=lo, time_end=hi)).messages == []
    a, b = rows[2]["timestamp"], rows[9]["timestamp"]
    got = delta.query(StoreQuery(time_start=a, time_end=b, page_size=100)).messages
    assert sorted(m.message_hash for m in got) == sorted(r["message_hash"] for r in rows[2:10])
    # the reader keeps integer statistics and times
    for f in delta.snapshot.files:
        assert type(f.stats.min_ts) is int and type(f.stats.max_ts) is int


def test_timestamp_statistics_are_integers_or_widened():
    """The reader's unit statistics on timestamps: integers kept exact; a float statistic (a
    writer or reader giving the long column's min/max as doubles) widened by its rounding, so the
    unit holding a window's bound is still read."""
    from ingest.store.reader import _may_be_in_window, _ns_stats, _Stats

    t = NS + 1
    assert _ns_stats(t, t + 5) == (t, t + 5) and _ns_stats(None, float("nan")) == (None, None)
    lo, hi = _ns_stats(float(t), float(t))
    assert float(t) != t and type(lo) is int and type(hi) is int and lo <= t <= hi and hi - lo < 1024
    st = _Stats(min_rt=NS / 1e9, max_rt=NS / 1e9, rows=1, min_ts=lo, max_ts=hi, ts_nulls=0)
    assert _may_be_in_window(st, t, t) and not _may_be_in_window(st, hi + 1, hi + 2)
