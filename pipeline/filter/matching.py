"""The filter job: waku.messages (stream) looked up in the resident criteria index
(pipeline/filter/criteria.py, one per executor JVM) -> PushRecords on waku.push.<bridge_id> via
Spark's Kafka sink. One matcher: the stream-static join with Delta `subscriptions` that DESIGN.md
draws was removed (docs/decisions.md, "Filter: resident criteria instead of the stream-static join").

* No Python on the hot path: IngestRecords are read by the JVM UDF FilterKeys (the topics and
  the message hash, nothing else) and the PushRecord bytes are built by the JVM UDF
  PushFanoutEncode (jvm/src/waku/pipeline/), which copies the WakuMessage bytes as relayed.
* Ephemeral messages are matched and pushed like any other.
* Each PushRecord carries its source record's Kafka partition and offset in waku.messages: the
  plan is a lookup and an explode, no shuffle, so each source partition's records reach the sink
  in offset order, and the bridge's pusher drops a record at or below the highest offset it
  already pushed to that peer from that partition, which is what a restarted or retried task's
  replay is. The Kafka source must not split a partition's range across tasks (its
  minPartitions option, which kafka_io does not set).
* Trigger: micro-batch (processingTime filter.trigger_seconds) or Spark's real-time mode
  (filter.trigger = "realtime"), selected by configuration.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql import types as T

from core.config import ConfigError
from pipeline.filter.criteria import fanouts, prepare_index, register_fanout, warm_up
from pipeline.filter.settings import FilterJobSettings
from pipeline.spark.kafka_io import kafka_options, read_topic_stream
from pipeline.spark.session import delete_path, register_java_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.spark.metrics import JobMetrics

log = logging.getLogger("waku.filter")

PUSH_FANOUT_CLASS = "waku.pipeline.PushFanoutEncode"
FILTER_KEYS_CLASS = "waku.pipeline.FilterKeys"
FILTER_KEYS_FN = "waku_filter_keys"
FILTER_KEYS = T.StructType([
    T.StructField("pubsub_topic", T.StringType()),
    T.StructField("content_topic", T.StringType()),
    T.StructField("message_hash", T.BinaryType()),
])
PUSH_FANOUT_FN = "waku_push_fanout"


def message_stream(spark: SparkSession, settings: FilterJobSettings) -> DataFrame:
    """waku.messages -> (pubsub_topic, content_topic, message_hash, raw_value, kafka_partition,
    kafka_offset) of each IngestRecord with a message and a content topic. The JVM UDF FilterKeys
    reads only those fields and computes the hash (the store's, pipeline/spark/columns.py)."""
    source = read_topic_stream(spark, settings.kafka, settings.messages_topic,
                               starting_offsets=settings.starting_offsets,
                               max_offsets_per_trigger=settings.max_offsets_per_trigger or None)
    fn = register_java_function(spark, FILTER_KEYS_FN, FILTER_KEYS_CLASS,
                                T.ArrayType(FILTER_KEYS, containsNull=False))
    keyed = source.select(F.col("value").alias("raw_value"), F.col("partition").alias("kafka_partition"),
                          F.col("offset").alias("kafka_offset"),
                          F.explode(F.call_function(fn, F.col("value"))).alias("k"))
    return keyed.select("k.pubsub_topic", "k.content_topic", "k.message_hash", "raw_value", "kafka_partition",
                        "kafka_offset")


def resident_matches(messages: DataFrame, config: str, push_prefix: str) -> DataFrame:
    """Decoded ingest records looked up in the resident criteria index (pipeline/filter/criteria.py)
    -> Kafka sink rows (topic, key, value): one fan-out PushRecord per (message, bridge holding live
    subscribers), its subscribers in field 10. A lookup and an explode: no shuffle, so the push
    records carry their source coordinates (`source_ordered`), and they are keyed by the source
    partition, which keeps one source partition's records in one push partition, in order."""
    spark = messages.sparkSession
    fn = register_java_function(spark, PUSH_FANOUT_FN, PUSH_FANOUT_CLASS, T.BinaryType())
    register_fanout(spark)
    joined = messages.select("message_hash", "raw_value", "kafka_partition", "kafka_offset", F.explode(
        fanouts(F.col("pubsub_topic"), F.col("content_topic"), config)).alias("b"))
    return joined.select(
        F.concat(F.lit(push_prefix), F.col("b.bridge_id")).alias("topic"),
        F.col("kafka_partition").cast("string").cast("binary").alias("key"),
        F.call_function(fn, F.col("raw_value"), F.col("b.targets"), F.col("message_hash"),
                        F.col("kafka_partition"), F.col("kafka_offset")).alias("value"),
    )


def build_filter_stream(spark: SparkSession, settings: FilterJobSettings) -> DataFrame:
    config = prepare_index(spark, settings)
    warm_up(spark, config)
    return resident_matches(message_stream(spark, settings), config, settings.push_prefix)


def check_task_slots(spark: SparkSession, settings: FilterJobSettings) -> None:
    """Real-time mode runs one long task per Kafka partition of the messages topic, all at once."""
    slots = spark.sparkContext.defaultParallelism
    if settings.trigger == "realtime" and slots < settings.messages_partitions:
        raise ConfigError(
            f"filter.trigger = realtime needs a task slot per partition of {settings.messages_topic} "
            f"({settings.messages_partitions}), the application has {slots}: use a master with more slots "
            f"(e.g. --master local[{settings.messages_partitions}]; ./spark-submit.sh filter does this in local "
            f"mode) or set filter.trigger = microbatch")


def start_filter_query(spark: SparkSession, settings: FilterJobSettings, query_name: str = "filter",
                       checkpoint: str | None = None, metrics: JobMetrics | None = None) -> StreamingQuery:
    """Start the filter query; with `metrics` (started) its progress (output rows = push
    records) goes to Delta job_metrics and Prometheus."""
    check_task_slots(spark, settings)
    out = build_filter_stream(spark, settings)
    mode = settings.trigger
    # Push records are produced like every record of the pipeline: acks=all, idempotent.
    sink = {**kafka_options(settings.kafka), "kafka.acks": "all", "kafka.enable.idempotence": "true"}
    writer = (out.writeStream.queryName(query_name).format("kafka").options(**sink)
              .option("checkpointLocation", checkpoint or settings.warehouse.checkpoint_path("filter")))
    if mode == "microbatch":
        writer = writer.outputMode("append").trigger(processingTime=f"{settings.trigger_seconds} seconds")
    elif mode == "realtime":
        # pyspark 4.2's overloads of trigger() omit realTime, which its implementation takes
        writer = writer.outputMode("update").trigger(  # type: ignore[call-overload]
            realTime=settings.realtime_checkpoint_interval)
    else:
        raise ConfigError(f"filter.trigger: expected microbatch or realtime, got {mode!r}")
    if mode == "realtime" and settings.realtime_warm_up_epochs > 0:
        warm_up_epochs(out, sink, settings, f"{query_name}-warm-up",
                       (checkpoint or settings.warehouse.checkpoint_path("filter")) + "-warm-up")
    if metrics is not None:
        metrics.watch(query_name)
    query = writer.start()
    log.info("filter query started (%s, resident criteria from %s): %s -> %s<bridge_id>", mode,
             settings.subscriptions_topic, settings.messages_topic, settings.push_prefix)
    return query


# The warm-up's epochs: real-time mode's shortest (spark.sql.streaming.realTimeMode.minBatchDuration).
WARM_UP_EPOCH = "5 seconds"


def warm_up_epochs(out: DataFrame, sink: dict[str, str], settings: FilterJobSettings, name: str,
                   checkpoint: str, timeout_s: float = 120.0) -> float:
    """Run the real-time query's plan, every row filtered out before its Kafka sink (real-time
    mode allows no noop sink), with 5 s epochs until `settings.realtime_warm_up_epochs` epochs
    have ended, then stop it and delete its checkpoint.
    An epoch boundary stops and relaunches every task after committing the epoch; the first ones
    in a JVM run cold code (class loading, first-time initialisation, the interpreter), and every
    push waits meanwhile. Returns the seconds it took; a warm-up that fails or times out is logged
    and skipped (the real query starts anyway)."""
    spark = out.sparkSession
    began = time.monotonic()
    query = None
    done = False
    try:
        nothing = out.where(F.length(F.col("value")) < 0)  # not folded away: the plan stays whole
        query = (nothing.writeStream.queryName(name).format("kafka").options(**sink).outputMode("update")
                 .option("checkpointLocation", checkpoint)
                 .trigger(realTime=WARM_UP_EPOCH)  # type: ignore[call-overload]
                 .start())
        while time.monotonic() - began < timeout_s:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] + 1 >= settings.realtime_warm_up_epochs:
                done = True
                break
            if not query.isActive:
                raise RuntimeError(f"warm-up query ended: {query.exception()}")
            time.sleep(0.2)
        else:
            log.warning("real-time warm-up: %d epochs not done in %.0f s; starting anyway",
                        settings.realtime_warm_up_epochs, timeout_s)
    except Exception as exc:  # noqa: BLE001 - only the first epoch boundary is slower without it
        log.warning("real-time warm-up failed (the first epoch boundary will be slower): %s", exc)
    finally:
        jvm = spark.sparkContext._jvm
        waited_ms = 0
        if query is not None and jvm is not None:  # inside an epoch: without the writer's lines about it
            waited_ms = jvm.waku.pipeline.StopQueriesFirst.stopQuietly(query._jsq)
        delete_path(spark, checkpoint)
    took = time.monotonic() - began
    if done:
        log.info("real-time warm-up: %d epochs in %.1f s (its cancelled tasks ended %d ms after the stop)",
                 settings.realtime_warm_up_epochs, took, waited_ms)
    return took


def join_strategy(query: StreamingQuery) -> str:
    """The physical join of the running query's last micro-batch: "BroadcastHashJoin",
    "SortMergeJoin", ... ("none yet" before the first batch with data)."""
    jsq = query._jsq
    execution = (jsq.streamingQuery() if hasattr(jsq, "streamingQuery") else jsq).lastExecution()
    if execution is None:
        return "none yet"
    text = execution.executedPlan().toString()
    for name in ("BroadcastHashJoin", "SortMergeJoin", "ShuffledHashJoin", "BroadcastNestedLoopJoin"):
        if name in text:
            return name
    return "unknown"
