"""The store job's append to `messages` by delta-rs (small batches on a local warehouse) keeps the
table's contract as Spark's append does: the same rows, `received_date` partitions, each file
sorted by (received_time, digest), statistics on the stats columns only, no Parquet dictionary
for the all-distinct columns. And a delta-rs failure, before or after its commit, neither loses
a row nor stores one twice (pipeline/store/messages_append.py)."""
from __future__ import annotations

import glob
import json
import os
import random
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.config import load_config
from core.message import hash_of
from core.tables import MESSAGES_STATS_COLUMNS
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_store_dedup import produce
from tests.integration.test_store_job import new_topic, parquet_encodings

pytestmark = pytest.mark.integration

PT = "/waku/2/rs/1/0"


def records(seed: int, count: int) -> list[pr.IngestRecord]:
    """`count` records received across a UTC midnight (two `received_date` partitions), several
    with the same receive time (the digest orders them)."""
    rng = random.Random(seed)
    midnight = time.time() // 86400 * 86400
    out = []
    for i in range(count):
        received = midnight + rng.choice([-2.5, -1.0, 0.5, 3.0]) + rng.randrange(4) * 0.25
        message = WakuMessage(payload=rng.randbytes(64), content_topic=f"/append/1/t{i % 3}/proto",
                              timestamp=int(received * 1e9), meta=rng.randbytes(8))
        out.append(pr.IngestRecord(pubsub_topic=PT, received_time=received, message=message, bridge_id="A"))
    return out


def store(spark, kafka, tmp_path, name: str, recs: list[pr.IngestRecord], *overrides: str) -> str:
    """Run the store job once over `recs` in a topic of its own; returns the messages table."""
    topic = new_topic(kafka, 2)
    produce(kafka, topic, recs)
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"warehouse.root={tmp_path / name}", f"warehouse.checkpoints={tmp_path / name / 'cp'}",
                       *overrides], environ={})
    query = start_store_query(spark, StoreJobSettings.from_config(cfg), available_now=True)
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()
    return cfg.table_path("messages")


def engines(table: str) -> list[str]:
    """The engineInfo of each data commit (after the table's creation), in version order."""
    out = []
    for f in sorted(glob.glob(f"{table}/_delta_log/*.json"))[1:]:
        with open(f) as fh:
            for line in fh:
                if line.startswith('{"commitInfo"'):
                    out.append(json.loads(line)["commitInfo"].get("engineInfo", ""))
    return out


def rows_of(spark, table: str) -> list[tuple]:
    """The rows, but for the Kafka topic and append time (each run has a topic of its own)."""
    df = spark.read.format("delta").load(table)
    assert df.where("kafka_timestamp IS NULL OR kafka_timestamp < current_timestamp() - INTERVAL 1 HOUR").count() == 0
    return sorted(tuple(r) for r in df.select(*sorted(set(df.columns) - {"kafka_topic", "kafka_timestamp"})).collect())


def test_a_delta_rs_append_keeps_the_messages_contract(spark, kafka, tmp_path):
    seed = 4511
    print("seed", seed)
    recs = records(seed, 400)
    by_rust = store(spark, kafka, tmp_path, "rust", recs)
    by_spark = store(spark, kafka, tmp_path, "spark", recs, "store.delta_rs_append_max_rows=0")
    assert [e.split(":")[0] for e in engines(by_rust)] == ["delta-rs"]
    assert all(e.startswith("Apache-Spark") for e in engines(by_spark)), engines(by_spark)

    stored = rows_of(spark, by_rust)
    assert len(stored) == 400 and stored == rows_of(spark, by_spark)

    files = glob.glob(f"{by_rust}/received_date=*/*.parquet")
    assert len(files) == 2  # one per received_date
    for f in files:
        day = os.path.basename(os.path.dirname(f)).split("=")[1]
        t = pq.read_table(f)
        keys = list(zip(t["received_time"].to_pylist(), t["digest"].to_pylist(), strict=True))
        assert keys == sorted(keys)
        assert {time.strftime("%Y-%m-%d", time.gmtime(rt)) for rt, _ in keys} == {day}
    plain = parquet_encodings(by_rust)
    for column in ("digest", "message_hash", "payload", "meta", "received_time", "timestamp", "kafka_offset"):
        assert not any("DICTIONARY" in e for e in plain[column]), (column, plain[column])

    from deltalake import DeltaTable

    for add in pa.table(DeltaTable(by_rust).get_add_actions(flatten=True)).to_pylist():
        assert add["num_records"] > 0
        with_stats = {k.split(".", 1)[1] for k in add if k.startswith("min.") and add[k] is not None}
        assert with_stats == set(MESSAGES_STATS_COLUMNS.split(",")), with_stats


@pytest.mark.parametrize("when", ["before_commit", "after_commit"])
def test_a_failed_delta_rs_append_neither_loses_nor_repeats_a_row(spark, kafka, tmp_path, monkeypatch, when):
    import deltalake

    real = deltalake.write_deltalake

    def failing(*args, **kwargs):
        if when == "after_commit":
            real(*args, **kwargs)
        raise OSError(f"injected failure {when}")

    monkeypatch.setattr(deltalake, "write_deltalake", failing)
    recs = records(7, 50)
    table = store(spark, kafka, tmp_path, when, recs)
    writers = [e.split(":")[0].split("/")[0] for e in engines(table)]
    assert writers == (["Apache-Spark"] if when == "before_commit" else ["delta-rs"]), writers
    stored = spark.read.format("delta").load(table).select("message_hash").collect()
    assert sorted(bytes(r.message_hash) for r in stored) == sorted(hash_of(PT, r.message) for r in recs)


def test_delta_rs_appends_and_spark_s_maintain_commit_beside_each_other(spark, kafka, tmp_path):
    """On a local warehouse the store job's delta-rs appends and maintain's Spark commits
    (retention's DELETE, compaction's OPTIMIZE) go to one table side by side: every valid message
    is stored once (the same case on S3, Spark's appends: test_jobs_on_s3.py)."""
    from jobs import maintain
    from pipeline.store.job import start_store_query as start
    from tests.conftest import BATCH_AT_EVERY_TRIGGER
    from tests.integration.test_store_job import assert_store_matches, job_config, run_available_now
    from tools.loadgen import LoadGenerator, LoadProfile
    from tools.loadgen import produce as produce_load

    seed = 4512
    print("seed", seed)
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=30, duplicate_share=0.1, invalid_share=0.05, seed=seed))
    overrides = dict(item.split("=", 1) for item in BATCH_AT_EVERY_TRIGGER)
    cfg = job_config(kafka, topic, tmp_path, **overrides, **{"store.max_offsets_per_trigger": 200})
    messages = cfg.table_path("messages")
    produce_load(kafka, topic, gen.batch(600))
    query = start(spark, StoreJobSettings.from_config(cfg))
    try:
        wait_until = time.monotonic() + 300
        while len(engines(messages)) < 2:
            assert query.exception() is None and time.monotonic() < wait_until, query.exception()
            time.sleep(0.5)
        produce_load(kafka, topic, gen.batch(600))
        args = [a for s in (f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
                            f"kafka.bootstrap_servers={kafka}") for a in ("--set", s)]
        assert maintain.main([*args, "--skip", "vacuum", "--skip", "audit"]) == 0
    finally:
        query.stop()
    run_available_now(spark, cfg)
    assert_store_matches(spark, cfg, gen)
    ops = [r.operation for r in spark.sql(f"DESCRIBE HISTORY delta.`{messages}`").collect()]
    assert "OPTIMIZE" in ops, ops
    assert sum(e.startswith("delta-rs") for e in engines(messages)) >= 2, engines(messages)


def test_a_retention_delete_beside_delta_rs_appends_does_not_conflict(spark, kafka, tmp_path):
    """Maintain's retention DELETE (apply_retention, without its retries) of yesterday's rows while
    delta-rs appends to today's partition every 20 ms: neither fails. Its predicate was an OR with
    a data column, which Delta's conflict check cannot evaluate on a concurrent append's files, so
    every append conflicted with it (ConcurrentAppendException: in the soak of 2026-12-06 a run
    failed after its five retries; on a store committing every second retention would never
    apply); and delta-rs counts every file of its snapshot as read, so its append lost to the
    DELETE and the store job fell back to Spark's slower appends for good."""
    days_ago = 1.5
    import threading

    from pyspark.sql import functions as F

    from pipeline.store import maintenance
    from pipeline.store.messages_append import MessagesAppender
    from pipeline.store.settings import MaintainSettings

    seed = 4513
    print("seed", seed)
    rng = random.Random(seed)
    now = time.time()
    old = now - days_ago * 86400
    recs = [pr.IngestRecord(pubsub_topic=PT, received_time=t, bridge_id="A", message=WakuMessage(
        payload=rng.randbytes(64), content_topic="/append/1/blind/proto", timestamp=int(t * 1e9)))
        for t in [old] * 300 + [now] * 300]
    table = store(spark, kafka, tmp_path, "blind", recs)
    fresh = spark.read.format("delta").load(table).where(F.col("received_time") >= now - 1).limit(10).toArrow()
    appender = MessagesAppender(table, 20000)
    stop, appended, failures = threading.Event(), [0], []

    def keep_appending() -> None:
        while not stop.is_set():
            if not appender._append_with_delta_rs(fresh):
                failures.append("delta-rs append failed")
                return
            appended[0] += 1
            time.sleep(0.02)

    cfg = load_config([f"warehouse.root={tmp_path / 'blind'}", f"warehouse.checkpoints={tmp_path / 'blind' / 'cp'}",
                       "store.retention_days=1.0"], environ={})
    settings = MaintainSettings.from_config(cfg)
    writer = threading.Thread(target=keep_appending)
    writer.start()
    try:
        while appended[0] < 3 and not failures:
            time.sleep(0.05)
        before = appended[0]
        orig = maintenance.retry_conflicts
        maintenance.retry_conflicts = lambda what, fn, *a, **k: fn()  # no retries here
        try:
            report = maintenance.apply_retention(spark, settings, now=now)
        finally:
            maintenance.retry_conflicts = orig
        during = appended[0] - before
    finally:
        stop.set()
        writer.join()
    assert not failures, failures
    assert report.deleted_by_age == 300
    assert during >= 3, f"only {during} appends committed during the DELETE: nothing to conflict with"
    assert appender._rs_path is not None  # delta-rs still appends
    assert spark.read.format("delta").load(table).count() == 300 + 10 * appended[0]
