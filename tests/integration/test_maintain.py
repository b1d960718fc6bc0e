"""Maintenance on a real Delta store: retention by age and capacity, compaction keeping order and
content, vacuum, and all of it while the store job is writing."""
from __future__ import annotations

import datetime as dt
import time

import pytest

from core.config import load_config
from core.settings import WarehouseSettings
from pipeline.store.job import start_store_query
from pipeline.store.maintenance import apply_retention, compact, vacuum
from pipeline.store.settings import MaintainSettings, StoreJobSettings
from pipeline.store.tables import ensure_store_tables
from pipeline.store.writer import write_batch
from tools.loadgen import LoadGenerator, LoadProfile, produce

from .test_store_job import assert_store_matches, job_config, new_topic, run_available_now

pytestmark = pytest.mark.integration
DAY = 86400.0


def kafka_like(spark, records):
    now = dt.datetime.now()
    return spark.createDataFrame([(r.value, "t", 0, i, now) for i, r in enumerate(records)],
                                 "value binary, topic string, partition int, offset long, timestamp timestamp")


def test_retention_by_age_and_capacity(spark, tmp_path):
    cfg = load_config([f"warehouse.root={tmp_path}/wh", "store.retention_days=2",
                       "limits.max_clock_skew_s=1e9"])
    ensure_store_tables(spark, WarehouseSettings.from_config(cfg))
    now = time.time()
    gen = LoadGenerator(LoadProfile(duplicate_share=0, ephemeral_share=0, invalid_share=0, seed=3))
    ages = [5 * DAY, 3 * DAY, 1.5 * DAY, 0.5 * DAY, 60.0]
    for i, age in enumerate(ages):
        write_batch(kafka_like(spark, [gen.next(now - age + j) for j in range(50)]), i,
                    StoreJobSettings.from_config(cfg))
    def table():
        return spark.read.format("delta").load(cfg.table_path("messages"))

    assert table().count() == 250
    report = apply_retention(spark, MaintainSettings.from_config(cfg), now=now)
    assert report.deleted_by_age == 100
    assert table().where(f"received_time < {now - 2 * DAY}").count() == 0
    assert table().count() == 150
    capped = load_config([f"warehouse.root={tmp_path}/wh", "store.retention_max_messages=60"])
    report = apply_retention(spark, MaintainSettings.from_config(capped), now=now)
    assert report.deleted_by_capacity == 90
    kept = table().select("received_time").collect()
    assert len(kept) == 60 and min(r.received_time for r in kept) > now - DAY  # the newest stay
    # Ties at the edge go together: "at most" the limit is kept.
    assert apply_retention(spark, MaintainSettings.from_config(load_config([f"warehouse.root={tmp_path}/wh",
                                                "store.retention_max_messages=59"])), now=now).deleted_by_capacity == 1


def test_compaction_keeps_content_and_order_and_vacuum_runs(spark, tmp_path):
    cfg = load_config([f"warehouse.root={tmp_path}/wh", "store.vacuum_retain_hours=0",
                       "store.optimize_target_file_bytes=60000"])
    ensure_store_tables(spark, WarehouseSettings.from_config(cfg))
    gen = LoadGenerator(LoadProfile(duplicate_share=0, ephemeral_share=0, invalid_share=0, seed=4,
                                    payload_bytes=1024))
    for i in range(6):
        write_batch(kafka_like(spark, gen.batch(40)), i, StoreJobSettings.from_config(cfg))
    before = sorted(bytes(r.message_hash)
                    for r in spark.read.format("delta").load(cfg.table_path("messages")).collect())
    report = compact(spark, MaintainSettings.from_config(cfg))
    assert 1 < report.files_after < report.files_before
    # Compacted files cover disjoint received_time ranges (what cursor reads rely on).
    import pyarrow as pa
    from deltalake import DeltaTable

    adds = pa.table(DeltaTable(cfg.table_path("messages")).get_add_actions(flatten=True)).to_pydict()
    ranges = sorted(zip(adds["min.received_time"], adds["max.received_time"], strict=True))
    assert all(hi <= next_lo for (_, hi), (next_lo, _) in zip(ranges, ranges[1:], strict=False))
    after = sorted(bytes(r.message_hash) for r in spark.read.format("delta").load(cfg.table_path("messages")).collect())
    assert after == before
    assert vacuum(spark, MaintainSettings.from_config(cfg)).vacuumed
    assert sorted(bytes(r.message_hash)
                  for r in spark.read.format("delta").load(cfg.table_path("messages")).collect()) == before


def test_maintenance_while_the_store_job_writes(spark, kafka, tmp_path):
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=30, seed=21))
    cfg = job_config(kafka, topic, tmp_path, **{"store.max_offsets_per_trigger": 400})
    produce(kafka, topic, gen.batch(800))
    query = start_store_query(spark, StoreJobSettings.from_config(cfg))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (tmp_path / "wh" / "messages" / "_delta_log").exists():
            time.sleep(0.5)
        for _ in range(2):
            produce(kafka, topic, gen.batch(400))
            compact(spark, MaintainSettings.from_config(cfg))
            # 2 days: deletes nothing here, but commits race appends
            apply_retention(spark, MaintainSettings.from_config(cfg))
    finally:
        query.stop()
    run_available_now(spark, cfg)
    assert_store_matches(spark, cfg, gen)


def test_audit_with_great_expectations(spark, tmp_path):
    from pipeline.store.validation import Limits, audit

    cfg = load_config([f"warehouse.root={tmp_path}/wh"])
    ensure_store_tables(spark, WarehouseSettings.from_config(cfg))
    gen = LoadGenerator(LoadProfile(seed=8))
    write_batch(kafka_like(spark, gen.batch(200)), 0, StoreJobSettings.from_config(cfg))
    table = spark.read.format("delta").load(cfg.table_path("messages"))
    assert audit(table, Limits.from_config(cfg)) == {"success": True, "failures": {}}
    # A table that bypassed the store job: a duplicated hash and an empty content topic.
    from pyspark.sql import functions as F

    broken = table.unionByName(table.limit(1)).unionByName(
        table.limit(1).withColumn("content_topic", F.lit("")).withColumn("message_hash", F.lit(b"x")))
    limits = Limits.from_config(cfg)
    one = table.limit(1).withColumn("timestamp", (F.col("received_time") * 1e9).cast("long"))  # skew 0
    broken = broken.unionByName(  # and one row past each other limit a stored row can break
        one.withColumn("meta", F.lit(b"m" * (limits.max_meta_bytes + 1))).withColumn("message_hash", F.lit(b"m"))
    ).unionByName(one.withColumn("payload", F.lit(b"p" * (limits.max_message_bytes + 1)))
                  .withColumn("message_hash", F.lit(b"p"))
    ).unionByName(one.withColumn("timestamp", (F.col("received_time") - limits.max_clock_skew_s - 5)
                                 .cast("double") * 1e9).withColumn("timestamp", F.col("timestamp").cast("long"))
                  .withColumn("message_hash", F.lit(b"t"))
    ).unionByName(one.withColumn("received_time", F.lit(float("nan"))).withColumn("message_hash", F.lit(b"n")))
    outcome = audit(broken, limits)
    assert not outcome["success"]
    assert outcome["failures"] == {
        "expect_column_values_to_be_unique(message_hash)": 2,
        "expect_column_value_lengths_to_be_between(content_topic)": 1,
        "expect_column_values_to_be_between(audit_meta_bytes)": 1,
        "expect_column_values_to_be_between(audit_message_size)": 1,
        "expect_column_values_to_be_between(audit_clock_skew_s)": 2,  # so is the NaN receive time
        "expect_column_values_to_be_between(received_time)": 1,
    }, outcome
