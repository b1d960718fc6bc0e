"""The store service's fresh tail (ingest/store/tail.py) merged by the online reader: pages over
Delta + tail equal the plain-Python oracle over their union, also when the scan budget cuts
pages short; a walk that goes on while tail messages move into Delta (commits between pages)
gets every message exactly once, in order; v3 cursors (message hashes) resolve in the tail; the
tail keeps one copy per hash (the earliest), is bounded, and applies the store job's rules
(core/validation.py) as the load generator's ground truth says. No Kafka here: the consumer
thread is covered by tests/integration/test_store_freshness.py."""
from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from core.store_page import StoredMessage, StoreQuery, history_pages
from core.validation import Limits
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, ReaderSettings, StoreReader, write_messages
from ingest.store.tail import Tail, stored_form
from tests.seeds import seeded
from tests.unit.test_store_query import (
    PAGE_SIZES,
    check_paging,
    random_cursor,
    random_filters,
    random_rows,
    write_table,
)


def fresh_reader(path: str, tail: Tail, **kw) -> StoreReader:
    reader = StoreReader(ReaderSettings(path, **kw), tail)
    reader.refresh()
    reader.index_hashes()
    reader.hashes_ready.set()  # as follow() does once the table as first seen is indexed
    return reader


def add(tail: Tail, rows: list[dict]) -> None:
    with tail.lock:
        tail.add_locked(StoredMessage.from_mapping(r) for r in rows)


def table_and_tail(tmp_path, rnd: random.Random, rows: list[dict], in_table: int):
    """rows[:in_table] in a Delta table, the rest in a tail (partition 0, offsets 0.. in order)
    whose store job's committed offsets are the returned dict: (path, committed, tail, reader,
    the tail's rows)."""
    path = str(tmp_path / "t")
    write_table(path, rows[:in_table], rnd, files=1)
    committed: dict[int, int] = {}
    tail = Tail(committed=lambda: dict(committed))
    reader = fresh_reader(path, tail)
    fresh = rows[in_table:]
    with tail.lock:
        tail.add_locked((StoredMessage.from_mapping(r) for r in fresh),
                        {r["message_hash"]: (0, i) for i, r in enumerate(fresh)})
    return path, committed, tail, reader, fresh


def commit(path: str, rows: list[dict]) -> None:
    rows = sorted(rows, key=lambda r: (r["received_time"], r["digest"]))
    write_messages(path, pa.Table.from_pylist(rows, schema=MESSAGES_ARROW_SCHEMA), max_row_group_size=7)


@pytest.mark.parametrize("budget", (1_000_000, 20))
def test_pages_over_delta_and_tail_match_the_oracle(tmp_path, budget):
    seed, rnd = seeded()
    rows = random_rows(rnd, 260)
    rnd.shuffle(rows)
    in_delta, in_tail = rows[:150], rows[150:]
    path = str(tmp_path / "t")
    write_table(path, in_delta, rnd, files=3, group=7)
    tail = Tail()
    reader = fresh_reader(path, tail, max_scan_rows=budget)
    add(tail, in_tail)
    for forward in (True, False):
        for size in PAGE_SIZES:
            pubsub, contents = random_filters(rnd)
            cursor = random_cursor(rnd, rows)
            if budget < 1000:  # partial pages: every message once, in order (cursors differ)
                query = StoreQuery(pubsub, contents, None, forward, size)
                got = [m for p in history_pages(reader.query, query, max_pages=2000) for m in
                       (p.messages if forward else p.messages[::-1])]
                want = sorted((r for r in rows if (not pubsub or r["pubsub_topic"] == pubsub)
                               and (not contents or r["content_topic"] in contents)),
                              key=lambda r: (r["received_time"], r["digest"]), reverse=not forward)
                assert [(m.received_time, m.digest) for m in got] == \
                    [(r["received_time"], r["digest"]) for r in want], f"seed {seed}"
            else:
                check_paging(reader.query, rows, pubsub, contents, forward, size, cursor)


def test_a_page_the_tail_fills_reads_no_delta_data(tmp_path):
    """The newest page of a topic whose n newest messages are all in the tail (the usual
    "what's new" query while the store job has not committed them) reads no row group: the
    walk starts from the tail's nearest, and every Delta unit lies beyond its n-th. The same
    query over the older half needs Delta and reads it."""
    seed, rnd = seeded()
    rows = sorted(random_rows(rnd, 200), key=lambda r: (r["received_time"], r["digest"]))
    path, _, _, reader, fresh = table_and_tail(tmp_path, rnd, rows, in_table=100)
    want = sorted(rows, key=lambda r: (r["received_time"], r["digest"]))
    page = reader.query(StoreQuery("", (), None, False, 20))
    assert [m.message_hash for m in page.messages] == [r["message_hash"] for r in want[-20:]], f"seed {seed}"
    assert reader.row_groups_read == 0, f"seed {seed}"
    page = reader.query(StoreQuery("", (), None, True, 20))
    assert [m.message_hash for m in page.messages] == [r["message_hash"] for r in want[:20]], f"seed {seed}"
    assert reader.row_groups_read > 0


def test_walk_across_commits_is_exact(tmp_path):
    """Pages keep coming while batches of tail messages are committed to Delta (the tail drops
    them as the new snapshot is swapped in): no message twice, none missing, in order."""
    seed, rnd = seeded()
    rows = random_rows(rnd, 300)
    rnd.shuffle(rows)
    path = str(tmp_path / "t")
    write_table(path, rows[:60], rnd, files=2, group=7)
    tail = Tail()
    reader = fresh_reader(path, tail, max_scan_rows=rnd.choice((15, 1_000_000)))
    pending = rows[60:]
    add(tail, pending)
    for forward in (True, False):
        pubsub, contents = random_filters(rnd)
        query = StoreQuery(pubsub, contents, None, forward, rnd.choice((1, 3, 20)))
        got = []
        for page in history_pages(reader.query, query, max_pages=5000):
            got.extend(page.messages if forward else page.messages[::-1])
            if pending and rnd.random() < 0.3:  # the store job commits some of the tail
                k = rnd.randrange(1, 40)
                batch, pending = pending[:k], pending[k:]
                commit(path, batch)
                assert reader.refresh() is not None
                with tail.lock:
                    assert all(tail.get_locked(r["message_hash"]) is None for r in batch)
        want = sorted((r for r in rows if (not pubsub or r["pubsub_topic"] == pubsub)
                       and (not contents or r["content_topic"] in contents)),
                      key=lambda r: (r["received_time"], r["digest"]), reverse=not forward)
        assert [(m.received_time, m.digest) for m in got] == \
            [(r["received_time"], r["digest"]) for r in want], f"seed {seed}"
    assert len(tail) == len(pending)


def test_tail_cursor_lookup_one_copy_per_hash_and_bound(tmp_path):
    seed, rnd = seeded()
    rows = random_rows(rnd, 80)[:40]  # random_rows skips Index collisions: ask for more
    assert len(rows) == 40
    path = str(tmp_path / "t")
    write_table(path, rows[:10], rnd, files=1)
    tail = Tail(max_messages=25)
    reader = fresh_reader(path, tail)
    add(tail, rows[10:30])
    # v3 cursors are message hashes: one in the tail resolves to its Index.
    m = reader.locate(rows[15]["message_hash"])
    assert m is not None and (m.received_time, m.digest) == (rows[15]["received_time"], rows[15]["digest"])
    assert reader.durable_among([r["message_hash"] for r in rows[5:15]]) == {r["message_hash"] for r in rows[5:10]}
    # Another copy of a message: the earliest receive time stays.
    later = dict(rows[12], received_time=rows[12]["received_time"] + 5)
    earlier = dict(rows[13], received_time=rows[13]["received_time"] - 5)
    add(tail, [later, earlier])
    with tail.lock:
        assert tail.get_locked(rows[12]["message_hash"]).received_time == rows[12]["received_time"]
        assert tail.get_locked(rows[13]["message_hash"]).received_time == rows[13]["received_time"] - 5
    assert len(tail) == 20
    # Bounded: the oldest by receive time go first.
    add(tail, rows[30:40])
    assert len(tail) == 25 and tail.evicted == 5
    kept = sorted((m.received_time, m.digest) for m in tail.snapshot())
    every = sorted([(r["received_time"], r["digest"]) for r in rows[10:40] if r is not rows[13]]
                   + [(earlier["received_time"], earlier["digest"])])
    assert kept == every[5:]


def test_tail_applies_the_store_rules_like_the_load_generator_says():
    """core/validation.py on the load generator's records: valid ones become the stored form
    (message hash = the Kafka key), ephemeral ones are left out, each invalid kind is refused
    with its own rule name."""
    from tools.loadgen import INVALID_KINDS, LoadGenerator, LoadProfile

    seed, _ = seeded()
    gen = LoadGenerator(LoadProfile(seed=seed % 1000, invalid_share=0.3, ephemeral_share=0.1, duplicate_share=0.1,
                                    content_topics=20))
    now = 1_795_000_000.0
    records = gen.batch(3000, now)
    kinds = {}
    invalid = iter(gen.truth.quarantined)
    invalid_values = {v for _, v in gen.truth.quarantined}
    stored = 0
    for r in records:
        m, why = stored_form(r.value, Limits(), now)
        if r.value in invalid_values:
            kind, value = next(invalid)
            assert value == r.value and why == kind, (kind, why)
            kinds[kind] = kinds.get(kind, 0) + 1
        elif why == "ephemeral":
            continue
        else:
            assert why is None and m.message_hash == r.key
            stored += 1
    assert set(kinds) == set(INVALID_KINDS), f"seed {seed}"
    assert stored >= len(gen.truth.stored)


def test_what_the_job_refused_is_swept_at_its_committed_offsets(tmp_path):
    """Tail messages below the store job's committed offsets that the new snapshot does not
    hold were refused by the job: they leave with that snapshot; those above stay."""
    seed, rnd = seeded()
    rows = sorted(random_rows(rnd, 120)[:60], key=lambda r: (r["received_time"], r["digest"]))
    assert len(rows) == 60
    path, committed, tail, reader, fresh = table_and_tail(tmp_path, rnd, rows, 10)
    stored = [r for i, r in enumerate(fresh[:30]) if i % 5]  # the job refused every fifth
    commit(path, stored)
    committed[0] = 30
    reader.refresh()
    assert tail.dropped == len(stored) and tail.swept == 6
    assert sorted(m.message_hash for m in tail.snapshot()) == sorted(r["message_hash"] for r in fresh[30:])
    check_paging(reader.query, rows[:10] + stored + fresh[30:], "", (), True, 7, None)


def test_tail_settings_from_config():
    from core.config import ConfigError, load_config
    from ingest.store.server import StoreServiceSettings
    from ingest.store.tail import TailSettings

    cfg = load_config(["kafka.bootstrap_servers=k1:9092,k2:9092", "topics.messages=m",
                       "warehouse.checkpoints=/cp", "store_service.tail_max_messages=5",
                       "limits.max_meta_bytes=32"])
    t = TailSettings.from_config(cfg)
    assert (t.bootstrap_servers, t.topic, t.max_messages, t.checkpoint_path) == ("k1:9092,k2:9092", "m", 5, "/cp/store")
    assert t.limits.max_meta_bytes == 32 and t.lookback_s == 600.0
    assert (t.idle_after_s, t.idle_fetch_s) == (60.0, 1.0)
    assert StoreServiceSettings.from_config(cfg).tail == t
    assert StoreServiceSettings.from_config(load_config(["store_service.fresh_tail=false"])).tail is None
    for bad in ("store_service.tail_max_messages=0", "store_service.tail_lookback_s=-1",
                "store_service.tail_idle_after_s=-1", "store_service.tail_idle_fetch_s=0"):
        with pytest.raises(ConfigError):
            TailSettings.from_config(load_config([bad]))


def test_committed_offsets_from_the_store_jobs_checkpoint(tmp_path):
    """Spark's offset log: offsets/<batch> ("v1", metadata, one JSON line per source) counts
    only once commits/<batch> exists (the real format is checked against a real store job in
    tests/integration/test_store_freshness.py)."""
    from ingest.store.tail import committed_offsets

    cp = tmp_path / "store"
    assert committed_offsets(str(cp), "m") is None
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    for batch, offsets in ((0, {"0": 5, "1": 7}), (1, {"0": 9, "1": 12}), (2, {"0": 20, "1": 30})):
        (cp / "offsets" / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n' + json.dumps({"m": offsets}) + "\n")
    assert committed_offsets(str(cp), "m") is None  # nothing committed yet
    (cp / "commits" / "0").write_text("v1\n{}\n")
    (cp / "commits" / "1").write_text("v1\n{}\n")
    assert committed_offsets(str(cp), "m") == {0: 9, 1: 12}  # batch 2 is not committed
    assert committed_offsets(f"file:{cp}", "m") == {0: 9, 1: 12}
    assert committed_offsets(str(cp), "other") is None
    assert committed_offsets("s3a://bucket/cp/store", "m") is None  # not local: the lookback applies


def test_arrivals_racing_commits_leave_each_message_once(tmp_path):
    """The follower's path (TailFollower._take: rules, table check, chunked inserts with the
    generation check) while the "store job" commits the same messages to Delta: some before the
    tail reads them, some between its table check and its insert (the race the generation
    check closes: without it this test fails), the rest after; pages are read meanwhile.
    Every message ends in exactly one place and a walk gets each once, in order."""
    import time
    from collections import namedtuple

    from ingest.store.tail import TailFollower, TailSettings
    from tests.unit.test_store_query import _date
    from tools.loadgen import LoadGenerator, LoadProfile

    seed, rnd = seeded()
    gen = LoadGenerator(LoadProfile(content_topics=5, pubsub_topics=2, invalid_share=0.05, ephemeral_share=0.05,
                                    duplicate_share=0.1, payload_bytes=32, seed=seed % 10_000))
    now = time.time()
    records = [gen.next(now + i * 0.01) for i in range(3000)]
    Record = namedtuple("Record", "value partition offset kafka_time")
    kafka = [Record(r.value, 0, i, now + 30) for i, r in enumerate(records)]
    stored = {}
    for r in kafka:
        m, why = stored_form(r.value, Limits(), r.kafka_time)
        if m is not None and (m.message_hash not in stored or m.index < stored[m.message_hash].index):
            stored[m.message_hash] = m
    assert set(stored) == set(gen.truth.stored)

    def row(m: StoredMessage) -> dict:
        return {"received_time": m.received_time, "digest": m.digest, "message_hash": m.message_hash,
                "pubsub_topic": m.pubsub_topic, "content_topic": m.content_topic, "payload": m.payload,
                "version": m.version, "timestamp": m.timestamp, "meta": m.meta, "rate_limit_proof": m.rate_limit_proof,
                "source": "relay", "bridge_id": "b", "kafka_topic": "t", "kafka_partition": 0, "kafka_offset": 0,
                "kafka_timestamp": None, "received_date": _date(m.received_time)}

    path = str(tmp_path / "t")
    order = sorted(stored.values(), key=lambda m: m.index)
    first = order[:300]  # committed before the service starts
    commit(path, [row(m) for m in first])
    tail = Tail()
    reader = fresh_reader(path, tail)
    committed = {m.message_hash for m in first}
    commits = {"between": 0, "ahead": 0}

    def commit_some(ms, kind):
        ms = [m for m in ms if m.message_hash not in committed]
        if ms:
            committed.update(m.message_hash for m in ms)
            commit(path, [row(m) for m in ms])
            reader.refresh()
            commits[kind] += 1

    def racing_durable(hashes):
        """The table check, then (sometimes) the store job commits some of these very messages
        before the follower takes them in (the race the generation check closes), or some
        messages the follower has not read yet (they must be refused on arrival)."""
        found = reader.durable_among(hashes)
        if rnd.random() < 0.5:
            commit_some([stored[h] for h in hashes if h in stored and rnd.random() < 0.3], "between")
        if rnd.random() < 0.2:
            commit_some(rnd.sample(order, 40), "ahead")
        return found

    follower = TailFollower(TailSettings("unused:9092", limits=Limits()), tail, racing_durable)
    for i in range(0, len(kafka), 97):
        follower._take(kafka[i:i + 97])
        reader.query(StoreQuery(forward=False, page_size=20))
    assert commits["between"] > 3 and commits["ahead"] > 1
    assert len(tail) + len(committed) == len(stored)  # each in exactly one place
    commit_some(order, "between")  # the rest
    reader.refresh()
    assert len(tail) == 0, f"seed {seed}: {len(tail)} messages both in the tail and in Delta"
    got = [m for p in history_pages(reader.query, StoreQuery(page_size=100)) for m in p.messages]
    assert [m.message_hash for m in got] == [m.message_hash for m in order], f"seed {seed}"


def test_the_tail_gives_back_each_message_as_taken_in_and_holds_it_outside_the_gcs_walks():
    """The tail holds messages as plain tuples (a StoredMessage would stay in every full
    collection's walk: ~75 ms more per 200,000 messages, a pause of every thread)."""
    import gc

    _, rng = seeded()
    messages = [StoredMessage.from_mapping(r) for r in random_rows(rng, 50)]
    tail = Tail(100)
    with tail.lock:
        tail.add_locked(messages)
    gc.collect()
    with tail.lock:
        assert [tail.get_locked(m.message_hash) for m in messages] == messages
    assert sorted(tail.snapshot(), key=lambda m: m.index) == sorted(messages, key=lambda m: m.index)
    assert not any(gc.is_tracked(row) for row in tail._entries.values())


def test_a_commits_release_lets_the_lock_go_between_chunks_and_each_message_shows_once(tmp_path, monkeypatch):
    """A commit's messages leave the tail a chunk at a time (the lock is let go in between, so
    inserts and queries never wait for the whole release); at every point between two chunks
    a walk sees each message exactly once, and a copy of a committed message is not taken in
    again."""
    import ingest.store.tail as tail_module

    seed, rnd = seeded()
    rows = sorted(random_rows(rnd, 200), key=lambda r: (r["received_time"], r["digest"]))
    path, committed, tail, reader, fresh = table_and_tail(tmp_path, rnd, rows, 40)
    stored = fresh[:100]
    pauses = []

    def between_chunks() -> None:
        assert not tail.lock.locked()
        pubsub, contents = random_filters(rnd)
        check_paging(reader.query, rows, pubsub, contents, rnd.random() < 0.5, rnd.choice((3, 20)), None)
        if len(tail) > len(fresh) - len(stored):  # still forgetting the commit's messages
            again = rnd.choice(stored)
            add(tail, [dict(again, received_time=again["received_time"] - 1.0)])  # an earlier copy
            with tail.lock:
                assert tail.get_locked(again["message_hash"]) is None, f"seed {seed}"
        pauses.append(len(tail))

    monkeypatch.setattr(tail_module, "_RELEASE_CHUNK", 7)
    monkeypatch.setattr(tail_module, "_let_waiters_in", between_chunks)
    commit(path, stored)
    committed[0] = 100
    reader.refresh()
    assert len(pauses) > 100 // 7, f"seed {seed}"  # the release and the trims, 7 keys a hold
    assert any(n > len(fresh) - len(stored) for n in pauses)
    assert tail.dropped == len(stored) and len(tail) == len(fresh) - len(stored)
    check_paging(reader.query, rows, "", (), True, 20, None)


def test_a_kafka_error_that_stops_the_tails_loop_is_logged_once_without_a_traceback(caplog):
    """Kafka's answers (here: a partition's leader moving while the tail reads where the
    partitions end, as right after the topic was created) are expected network errors: one
    line however often it repeats, no traceback, and the tail starts again; transient, so not a
    failure of the thread (the bridge's health stays READY)."""
    from confluent_kafka import KafkaError, KafkaException

    from ingest.store.tail import TailFollower, TailSettings

    follower = TailFollower(TailSettings("127.0.0.1:1"), Tail(), lambda hashes: set())
    calls = []

    def loop() -> None:
        calls.append(1)
        if len(calls) <= 3:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION, "Failed to get watermark offsets"))

    follower._loop = loop
    follower._stop.wait = lambda timeout: False  # no 2 s pause before starting again
    with caplog.at_level("WARNING", logger="ingest.store.tail"):
        follower._run()
    assert len(calls) == 4
    records = [r for r in caplog.records if r.name == "ingest.store.tail"]
    assert len(records) == 1 and records[0].levelname == "WARNING" and records[0].exc_info is None
    assert "Failed to get watermark offsets" in records[0].getMessage()
    assert (follower.failures, follower.failed) == (0, None)


def test_kafka_seconds_matches_the_jobs_reading_of_kafka_timestamps():
    """The tail's `now` (librdkafka's milliseconds) is the job's `unix_micros(kafka_timestamp) / 1e6`
    to the last bit, and a record without a timestamp has none."""
    import confluent_kafka

    from ingest.store.tail import NO_KAFKA_TIMESTAMP, kafka_seconds

    assert NO_KAFKA_TIMESTAMP == confluent_kafka.TIMESTAMP_NOT_AVAILABLE
    for ms in (1_795_629_829_440, 1_795_629_829_441, 1_700_000_000_001, 1_577_836_800_999):
        assert kafka_seconds((confluent_kafka.TIMESTAMP_LOG_APPEND_TIME, ms)) == (ms * 1000) / 1e6
        assert kafka_seconds((confluent_kafka.TIMESTAMP_CREATE_TIME, ms)) == ms / 1000
    assert kafka_seconds((confluent_kafka.TIMESTAMP_NOT_AVAILABLE, -1)) is None
