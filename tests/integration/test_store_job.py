"""Store job acceptance on real Kafka, Spark and Delta: exactly the distinct valid non-ephemeral
messages land once, refused records land in quarantine with their reason; a stop at a random
point, a restart and a re-produced slice leave the same table."""
from __future__ import annotations

import time
import uuid

import pytest

from core.config import load_config
from core.kafka import ensure_topics
from pipeline.spark.metrics import JobMetrics
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings
from schemas import pipeline_records_pb2 as pr
from tests.integration.test_log_checkpoints import checkpoints
from tests.seeds import seeded
from tools.loadgen import LoadGenerator, LoadProfile, produce

pytestmark = pytest.mark.integration


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: partitions})
    return topic


def job_config(kafka: str, topic: str, tmp_path, **extra):
    sets = {"kafka.bootstrap_servers": kafka, "topics.messages": topic,
            "warehouse.root": str(tmp_path / "wh"), "warehouse.checkpoints": str(tmp_path / "cp"),
            "store.trigger_seconds": "0.5"}
    sets.update({k: str(v) for k, v in extra.items()})
    return load_config([f"{k}={v}" for k, v in sets.items()])


def run_available_now(spark, cfg, metrics=None) -> None:
    q = start_store_query(spark, StoreJobSettings.from_config(cfg), available_now=True, metrics=metrics)
    q.awaitTermination(600)
    assert q.exception() is None, q.exception()


def assert_store_matches(spark, cfg, gen: LoadGenerator, exact_quarantine: bool = True) -> None:
    rows = spark.read.format("delta").load(cfg.table_path("messages")).select(
        "message_hash", "received_time", "pubsub_topic", "content_topic", "payload", "meta",
        "timestamp", "bridge_id").collect()
    hashes = [bytes(r.message_hash) for r in rows]
    assert len(hashes) == len(set(hashes)), "a hash is stored twice"
    assert set(hashes) == set(gen.truth.stored)
    for r in rows:
        rec = pr.IngestRecord.FromString(gen.truth.stored[bytes(r.message_hash)])
        assert r.pubsub_topic == rec.pubsub_topic
        assert r.content_topic == rec.message.content_topic
        assert bytes(r.payload) == rec.message.payload
        assert r.timestamp == rec.message.timestamp
        assert (bytes(r.meta) if r.meta is not None else b"") == rec.message.meta
        # The first copy's receive time is kept: copies share the key (hash), so the partition.
        assert r.received_time == rec.received_time
    q = spark.read.format("delta").load(cfg.table_path("quarantine")).collect()
    coordinates = [(r.kafka_topic, r.kafka_partition, r.kafka_offset) for r in q]
    assert len(coordinates) == len(set(coordinates)), "a Kafka record is quarantined twice"
    got = sorted((r.reason, bytes(r.raw_value)) for r in q)
    if exact_quarantine:
        assert got == sorted(gen.truth.quarantined)
    else:  # re-produced invalid records are new Kafka records: refused (and recorded) again
        assert set(got) == set(gen.truth.quarantined)


def test_store_job_stores_exactly_the_valid_messages_once(spark, kafka, tmp_path):
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=50, duplicate_share=0.15, ephemeral_share=0.05,
                                    invalid_share=0.08, payload_bytes=None, seed=5))
    records = gen.batch(3000)
    produce(kafka, topic, records)
    cfg = job_config(kafka, topic, tmp_path, **{"job_metrics.store_port": 0})
    metrics = JobMetrics(spark, StoreJobSettings.from_config(cfg).metrics).start()
    try:
        run_available_now(spark, cfg, metrics)
    finally:
        metrics.stop()  # flushes the rows of every batch into job_metrics
    assert gen.truth.duplicates > 100 and gen.truth.ephemeral > 50
    assert {reason for reason, _ in gen.truth.quarantined} == {
        "undecodable", "missing_message", "empty_pubsub_topic", "empty_content_topic",
        "oversized_message", "oversized_meta", "bad_received_time", "timestamp_skew"}
    assert_store_matches(spark, cfg, gen)
    metrics = spark.read.format("delta").load(cfg.table_path("job_metrics")).collect()
    assert sum(m.input_rows for m in metrics) == len(records)
    assert sum(m.quarantined_rows for m in metrics) == len(gen.truth.quarantined)
    assert sum(m.ephemeral_rows for m in metrics) == gen.truth.ephemeral
    failures: dict[str, int] = {}
    for m in metrics:
        for k, v in m.rule_failures.items():
            failures[k] = failures.get(k, 0) + v
    expected: dict[str, int] = {}
    for reason, _ in gen.truth.quarantined:
        expected[reason] = expected.get(reason, 0) + 1
    assert failures == expected
    assert all(m.job == "store" and m.progress_json for m in metrics)


def test_all_distinct_columns_are_written_without_a_parquet_dictionary(spark, tmp_path):
    """conf/spark-defaults.conf turns Parquet's dictionary off for the store's all-distinct
    columns (hashes, payloads, times, offsets), which would fall back to plain encoding anyway
    after hashing every value; topics keep theirs. Values repeated here, so a dictionary would be
    kept wherever it is on."""
    from pyspark.sql import functions as F

    path = str(tmp_path / "t")
    (spark.range(2000).select(
        F.lit(b"x" * 32).alias("message_hash"), F.lit(b"p" * 100).alias("payload"),
        F.lit(1.5).alias("received_time"), F.lit(7).cast("long").alias("kafka_offset"),
        (F.col("id") % 3).cast("string").alias("content_topic"))
     .coalesce(1).write.format("delta").save(path))
    encodings = parquet_encodings(path)
    for column in ("message_hash", "payload", "received_time", "kafka_offset"):
        assert not any("DICTIONARY" in e for e in encodings[column]), (column, encodings[column])
    assert any("DICTIONARY" in e for e in encodings["content_topic"])


def test_a_finished_batch_s_java_objects_are_freed_by_release_java_objects(spark):
    """py4j keeps a Java object in a reference cycle with its bound methods, so a batch's
    DataFrames (their plans: every literal of its filters) outlive the batch in the JVM until
    Python's cyclic collector runs. The store job calls release_java_objects after each batch."""
    import gc
    import weakref

    from pipeline.spark.session import release_java_objects

    def batch() -> weakref.ref:
        df = spark.range(10).where("id IN (1, 2, 3)")
        assert df.count() == 3
        return weakref.ref(df._jdf)

    enabled = gc.isenabled()
    gc.disable()  # no collection between the batch and the check
    try:
        java_df = batch()
        assert java_df() is not None, "py4j no longer holds its objects in cycles: release_java_objects is moot"
        release_java_objects()
        assert java_df() is None
    finally:
        if enabled:
            gc.enable()


def parquet_encodings(table: str) -> dict[str, set[str]]:
    """Every encoding of each column across the table's Parquet files."""
    import glob

    import pyarrow.parquet as pq

    out: dict[str, set[str]] = {}
    for f in glob.glob(f"{table}/**/*.parquet", recursive=True):
        meta = pq.read_metadata(f)
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                out.setdefault(col.path_in_schema, set()).update(col.encodings)
    return out


def test_stop_at_random_point_restart_and_reproduce_slice(spark, kafka, tmp_path):
    seed, rng = seeded()
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=20, duplicate_share=0.1, invalid_share=0.05, seed=9))
    records = gen.batch(4000)
    produce(kafka, topic, records)
    # A Delta log checkpoint every 2 versions: the stops fall around checkpoints too, and every
    # read below starts from one that delta-rs wrote beside the batches.
    cfg = job_config(kafka, topic, tmp_path, **{"store.max_offsets_per_trigger": 1500,
                                                "store.log_checkpoint_interval": 2})
    q = start_store_query(spark, StoreJobSettings.from_config(cfg))
    time.sleep(rng.uniform(1.0, 20.0))  # stop somewhere mid-stream, possibly mid-batch
    q.stop()
    run_available_now(spark, cfg)  # restart on the same checkpoint, catch up
    assert_store_matches(spark, cfg, gen)
    # Re-produce a slice of the input (as a bridge retrying after a timeout would), process again.
    start = rng.randrange(0, len(records) - 500)
    produce(kafka, topic, records[start:start + 500])
    run_available_now(spark, cfg)
    assert_store_matches(spark, cfg, gen, exact_quarantine=False)
    # A fresh checkpoint re-reading the whole topic (a reset job) adds no message.
    cfg2 = job_config(kafka, topic, tmp_path, **{"warehouse.checkpoints": str(tmp_path / "cp2"),
                                                 "store.log_checkpoint_interval": 2})
    run_available_now(spark, cfg2)
    assert_store_matches(spark, cfg2, gen, exact_quarantine=False)
    # The log checkpoints: delta-rs wrote them (no Spark footer), none by Spark's commits.
    time.sleep(2)  # the last batch's checkpoint thread
    for table in ("messages", "quarantine"):
        written = checkpoints(cfg.table_path(table))
        assert written and not any(written.values()), (table, written)


def test_store_tables_of_an_older_version_get_the_current_properties(spark, tmp_path):
    """A warehouse made when Spark's Delta checkpointed `messages` and `quarantine` every 20 and
    10 commits gets Spark's checkpoints turned off on every store table at the store job's start
    (the job writes them with delta-rs), in one metadata commit each; a table already right gets
    no commit."""
    from delta.tables import DeltaTable

    from core.settings import WarehouseSettings
    from core.tables import MESSAGES_PARTITION_BY, MESSAGES_PROPERTIES, NO_SPARK_CHECKPOINTS
    from pipeline.spark.delta import ensure_table
    from pipeline.store.tables import MESSAGES_SCHEMA, QUARANTINE_SCHEMA, UNTIMED_INDEX, ensure_store_tables

    wh = WarehouseSettings(str(tmp_path / "wh"), str(tmp_path / "cp"))
    old = {**MESSAGES_PROPERTIES, "delta.checkpointInterval": "20"}
    ensure_table(spark, wh.table_path("messages"), MESSAGES_SCHEMA, list(MESSAGES_PARTITION_BY), old)
    ensure_table(spark, wh.table_path("quarantine"), QUARANTINE_SCHEMA)

    def props(table: str) -> dict:
        return DeltaTable.forPath(spark, wh.table_path(table)).detail().select("properties").first()[0]

    def version(table: str) -> int:
        return DeltaTable.forPath(spark, wh.table_path(table)).history(1).select("version").first()[0]

    assert props("messages")["delta.checkpointInterval"] == "20"
    ensure_store_tables(spark, wh)  # as maintain does: creates what is missing, changes nothing
    assert props("messages")["delta.checkpointInterval"] == "20"
    ensure_store_tables(spark, wh, update_properties=True)  # as the store job does at its start
    off = NO_SPARK_CHECKPOINTS["delta.checkpointInterval"]
    assert props("messages")["delta.checkpointInterval"] == off
    assert props("messages")["delta.dataSkippingStatsColumns"] == MESSAGES_PROPERTIES["delta.dataSkippingStatsColumns"]
    assert props("quarantine")["delta.checkpointInterval"] == off
    assert props(UNTIMED_INDEX)["delta.checkpointInterval"] == off
    assert props("job_metrics")["delta.checkpointInterval"] == off
    before = (version("messages"), version("quarantine"), version(UNTIMED_INDEX))
    ensure_store_tables(spark, wh, update_properties=True)
    assert (version("messages"), version("quarantine"), version(UNTIMED_INDEX)) == before


def test_a_steady_batch_compiles_no_code(spark, kafka, tmp_path, monkeypatch):
    """Spark generates a stage's code and Janino compiles it only when the code cache lacks it: a
    per-batch literal in a stage (the batch's time, say) makes a new class every batch, which the
    JIT then starts over on (docs/decisions.md, session 18). Full batches of the load generator's
    mix (copies, ephemeral and invalid records of every kind), after the first two, compile none."""
    from pipeline.store import job as store_job

    seed = 18
    print(f"seed {seed}")
    topic = new_topic(kafka, partitions=4)
    gen = LoadGenerator(LoadProfile(content_topics=50, payload_bytes=256, seed=seed))
    produce(kafka, topic, gen.batch(12_500))
    compiles = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    per_batch: list[tuple[int, int]] = []
    real = store_job.write_checked_batch

    def counted(batch, batch_id, *rest):
        before = compiles.getCount()
        stats = real(batch, batch_id, *rest)
        per_batch.append((stats.input_rows, compiles.getCount() - before))
        return stats

    monkeypatch.setattr(store_job, "write_checked_batch", counted)
    run_available_now(spark, job_config(kafka, topic, tmp_path, **{"store.max_offsets_per_trigger": 2500}))
    full = [n for rows, n in per_batch[2:] if rows >= 2400]
    assert len(full) >= 2, per_batch
    assert sum(full) == 0, f"classes compiled per batch (input rows, compiles): {per_batch}"
