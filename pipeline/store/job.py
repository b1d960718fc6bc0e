"""Assembles the store job's streaming query: Kafka source -> check_records -> write_checked_batch
(foreachBatch)."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.spark.kafka_io import read_topic_stream
from pipeline.spark.log_checkpoints import LogCheckpointer
from pipeline.spark.metrics import JobMetrics
from pipeline.spark.session import release_java_objects
from pipeline.store.recent import RecentHashes
from pipeline.store.settings import StoreJobSettings
from pipeline.store.tables import UNTIMED_INDEX, ensure_store_tables
from pipeline.store.writer import QuarantineMarks, check_records, figures, messages_appender, write_checked_batch


def start_store_query(spark: SparkSession, settings: StoreJobSettings, available_now: bool = False,
                      query_name: str = "store", metrics: JobMetrics | None = None) -> StreamingQuery:
    """Start the store query; `available_now` processes what Kafka holds, then stops. With
    `metrics` (started), every batch's figures go to Delta job_metrics and Prometheus."""
    ensure_store_tables(spark, settings.warehouse, update_properties=True)
    # The batch is cached once (decoded and validated) and read twice (the driver's narrow
    # collect, the messages write). Waku payloads are encrypted, so compressing the cached
    # columns is wasted work: ~11 µs of CPU a 1 KiB record, a fifth of the batch's (docs/benchmarks.md).
    spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
    checkpoint = settings.warehouse.checkpoint_path("store")
    # The cadence follows the load (store.min_offsets_per_trigger): a batch's fixed cost (~0.3
    # CPU-s) is paid at most every store.max_trigger_delay_s at a trickle, every trigger under load. Freshness does not
    # wait for it: the store service's fresh tail follows Kafka (docs/decisions.md, issue 41).
    least = settings.min_offsets_per_trigger  # never more than a batch may hold
    if settings.max_offsets_per_trigger:
        least = min(least, settings.max_offsets_per_trigger)
    source = read_topic_stream(spark, settings.kafka, settings.topic,
                               starting_offsets=settings.starting_offsets,
                               max_offsets_per_trigger=settings.max_offsets_per_trigger or None,
                               min_offsets_per_trigger=None if available_now else least,
                               max_trigger_delay_s=settings.max_trigger_delay_s)

    marks = QuarantineMarks(settings.warehouse.table_path("quarantine"), settings.topic)
    recent = RecentHashes(settings.recent_hashes_max, settings.recent_keep_s)
    appender = messages_appender(spark, settings)
    # The tables' Delta log checkpoints, beside the batches (Spark's are off on these tables).
    checkpoints = LogCheckpointer([settings.warehouse.table_path(t) for t in ("messages", "quarantine", UNTIMED_INDEX)],
                                  settings.log_checkpoint_interval, spark)

    def process(batch, batch_id: int) -> None:
        stats = write_checked_batch(batch, batch_id, settings, marks, recent, appender)
        with stats.phase("release_java"):
            release_java_objects()
        checkpoints.poke()
        if metrics is not None:
            metrics.add_figures(query_name, batch_id, figures(stats))

    if metrics is not None:
        metrics.watch(query_name)
    # Decoded and validated in the streaming plan: built once, not per micro-batch.
    writer = (check_records(source, settings.limits).writeStream.queryName(query_name)
              .option("checkpointLocation", checkpoint).foreachBatch(process))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_seconds} seconds")
    return writer.start()
