"""Job metrics on real Kafka, Spark and Delta: the store query's listener rows in Delta
`job_metrics` (partitioned by job and day) carry the progress, Kafka lag per partition and the
validation counts per rule, and its Prometheus endpoint serves the same figures; the maintain
job records its run."""
from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.errors import StreamingQueryException

from core.config import load_config
from core.kafka import ensure_topics
from pipeline.spark.metrics import JobMetrics, kafka_lag
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings
from tools.loadgen import LoadGenerator, LoadProfile, produce

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_kafka_lag_is_latest_minus_end_offset():
    sources = [{"description": "KafkaV2[Subscribe[t]]", "endOffset": '{"t":{"0":10,"1":5}}',
                "latestOffset": '{"t":{"0":25,"1":5}}'},
               {"description": "DeltaSource[x]", "endOffset": "{}", "latestOffset": None}]
    assert kafka_lag(sources) == {"t/0": 15, "t/1": 0}


def test_store_metrics_in_delta_and_prometheus(spark, kafka, tmp_path):
    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    seed = 13
    print(f"seed {seed}")
    gen = LoadGenerator(LoadProfile(content_topics=5, duplicate_share=0.1, invalid_share=0.1, seed=seed))
    records = gen.batch(1200)
    produce(kafka, topic, records)
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
                       "store.max_offsets_per_trigger=700", "job_metrics.store_port=0",
                       "job_metrics.write_interval_s=60"])  # one append, at flush
    settings = StoreJobSettings.from_config(cfg)
    metrics = JobMetrics(spark, settings.metrics).start()
    try:
        q = start_store_query(spark, settings, available_now=True, metrics=metrics)
        q.awaitTermination(300)
        assert q.exception() is None
        metrics.flush()
        live = scrape(metrics.port)
        assert metrics.appended_by == "delta-rs"  # a local warehouse: no Spark job for the append
    finally:
        metrics.stop()

    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, cfg.table_path("job_metrics"))
    assert table.detail().first().partitionColumns == ["job", "day"]
    rows = table.toDF().where("job = 'store'").orderBy("batch_id").collect()
    assert len(rows) >= 2  # 1200 records, at most 700 offsets a batch
    assert sum(r.input_rows for r in rows) == len(records)
    assert sum(r.stored_rows for r in rows) == len(gen.truth.stored)
    assert sum(r.quarantined_rows for r in rows) == len(gen.truth.quarantined)
    first = rows[0]
    # The first batch read 700 of 1200: the rest was waiting in Kafka.
    assert first.kafka_lag_total == len(records) - first.input_rows
    assert set(first.kafka_lag) == {f"{topic}/0", f"{topic}/1"}
    assert rows[-1].kafka_lag_total == 0
    progress = json.loads(first.progress_json)
    assert progress["batchId"] == first.batch_id and progress["numInputRows"] == first.input_rows
    assert {"triggerExecution", "addBatch", "store.validate"} <= set(first.phase_seconds)
    assert first.day == first.batch_time.strftime("%Y-%m-%d")
    by_rule: dict[str, int] = {}
    for reason, _ in gen.truth.quarantined:
        by_rule[reason] = by_rule.get(reason, 0) + 1
    got: dict[str, int] = {}
    for r in rows:
        for k, v in (r.rule_failures or {}).items():
            got[k] = got.get(k, 0) + v
    assert got == by_rule

    labels = (("job", "store"), ("query", "store"))
    assert live[("waku_job_input_rows_total", labels)] == len(records)
    assert live[("waku_job_stored_rows_total", labels)] == len(gen.truth.stored)
    assert live[("waku_job_batches_total", labels)] == len(rows)
    for rule, n in by_rule.items():
        assert live[("waku_job_rule_failures_total", tuple(sorted((*labels, ("rule", rule)))))] == n
    assert live[("waku_job_batch_duration_seconds_count", labels)] == len(rows)
    lag = {k: v for k, v in live.items() if k[0] == "waku_job_kafka_lag"}
    assert len(lag) == 2 and sum(lag.values()) == 0


def test_maintain_records_its_run(spark, tmp_path):
    from jobs import maintain

    sets = [f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}"]
    args = [a for s in sets for a in ("--set", s)]
    assert maintain.main([*args, "--skip", "vacuum"]) == 0
    row = spark.read.format("delta").load(str(tmp_path / "wh" / "job_metrics")).where("job = 'maintain'").collect()
    assert len(row) == 1
    assert {"retention", "compact", "audit"} <= set(row[0].phase_seconds)
    assert row[0].counts["messages_rows"] == 0 and row[0].counts["audit_failed"] == 0
    assert json.loads(row[0].progress_json)["audit"]["success"] is True


def test_a_job_metrics_table_of_an_earlier_release_is_brought_to_the_contract(spark, tmp_path):
    import datetime as dt

    from delta.tables import DeltaTable
    from pyspark.sql import types as T

    from pipeline.spark.metrics import JOB_METRICS_SCHEMA, ensure_job_metrics_table

    old = T.StructType([T.StructField("job", T.StringType(), False), T.StructField("batch_id", T.LongType(), False),
                        T.StructField("batch_time", T.TimestampType(), False),
                        T.StructField("input_rows", T.LongType())])
    path = str(tmp_path / "job_metrics")
    when = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)
    spark.createDataFrame([("store", 0, when, 5), ("store", 1, when, 7)], old).write.format("delta").save(path)
    ensure_job_metrics_table(spark, path)
    ensure_job_metrics_table(spark, path)  # once migrated, left alone
    table = DeltaTable.forPath(spark, path)
    assert table.detail().first().partitionColumns == ["job", "day"]
    df = table.toDF()
    assert df.columns == [f.name for f in JOB_METRICS_SCHEMA.fields]
    assert sorted((r.batch_id, r.input_rows, r.day) for r in df.collect()) == [(0, 5, "2026-11-20"),
                                                                                (1, 7, "2026-11-20")]


def test_a_table_delta_rs_cannot_append_to_gets_spark_s_append_with_every_row_once(spark, tmp_path):
    """A job_metrics table with a writer feature delta-rs lacks (in-commit timestamps): the first
    append falls to Spark's Delta, says so once, and later appends stay with Spark."""
    import datetime as dt

    from pipeline.spark.metrics import JobMetricsSettings, run_row

    path = str(tmp_path / "wh" / "job_metrics")
    settings = JobMetricsSettings("maintain", path, write_interval_s=60)
    metrics = JobMetrics(spark, settings).start()
    try:
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
        began = dt.datetime(2026, 11, 26, 4, 0, tzinfo=dt.UTC).timestamp()
        for i in range(2):
            metrics.record(run_row("maintain", f"run-{i}", began + i, began + i + 1, input_rows=i + 1))
            assert metrics.write_pending() == 1
            assert metrics.appended_by == "spark"
    finally:
        metrics.stop()
    rows = spark.read.format("delta").load(path).orderBy("run_id").collect()
    assert [(r.run_id, r.input_rows) for r in rows] == [("run-0", 1), ("run-1", 2)]


def test_a_query_start_and_its_failure_reach_prometheus(spark, tmp_path):
    """The JVM-side listener's start and termination events (pipeline/spark/metrics.py): the
    query is active while it runs, and a failure, whose message has quotes and newlines,
    counts once and leaves it inactive."""
    import threading
    import time

    cfg = load_config([f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
                       "job_metrics.store_port=0"])
    metrics = JobMetrics(spark, StoreJobSettings.from_config(cfg).metrics).start()
    metrics.watch("failing")
    labels = (("job", "store"), ("query", "failing"))

    seen_active = threading.Event()

    def batch(df, batch_id: int) -> None:  # foreachBatch runs in this process, on the driver
        if seen_active.is_set():
            raise ValueError('a "quoted"\nfailure')

    try:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .writeStream.queryName("failing").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="300 milliseconds").foreachBatch(batch).start())
        deadline = time.monotonic() + 60
        while True:  # active, and a batch's progress seen
            live = scrape(metrics.port)
            if (live.get(("waku_job_query_active", labels)) == 1
                    and live.get(("waku_job_batches_total", labels), 0) >= 1):
                break
            assert time.monotonic() < deadline, f"the query's start or progress never reached Prometheus: {live}"
            time.sleep(0.2)
        seen_active.set()
        with pytest.raises(StreamingQueryException):
            q.awaitTermination(120)
        metrics.flush()
        live = scrape(metrics.port)
        assert metrics.appended_by == "delta-rs"  # a local warehouse: no Spark job for the append
    finally:
        metrics.stop()
    assert live[("waku_job_query_failures_total", labels)] == 1
    assert live[("waku_job_query_active", labels)] == 0
    assert live[("waku_job_batches_total", labels)] >= 1
