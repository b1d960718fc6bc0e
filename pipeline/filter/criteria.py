"""The filter job's resident criteria: the one matcher (docs/decisions.md).

Matching is a lookup join of the message stream against an index of the subscriptions held in
each executor JVM (jvm/src/waku/pipeline/CriteriaIndex.java) and changed incrementally from the
subscription event stream, so no batch or epoch re-reads Delta:

1. At the job's start the driver reads the subscriptions job's committed Kafka offsets (its
   checkpoint's offset log), *then* writes the live rows of Delta `subscriptions` as a text
   snapshot next to the filter checkpoint (base64 fields, one line per criterion).
2. The UDF `waku_criteria_fanout(pubsub_topic, content_topic, config)` finds this run's index by
   its configuration literal; on first use in a JVM it loads the snapshot, replays
   `waku.subscriptions` from those offsets to the end and then follows the topic on a thread.
   Replaying events the snapshot holds is harmless (each sets or deletes what it names).
3. The job's UDF `waku_criteria_fanout` groups the subscribers by bridge, each as its PushRecord
   field 10 bytes; `explode` gives one row per (message, bridge), one fan-out PushRecord.

Delta `subscriptions` stays the durable, queryable state (the subscriptions job); the index is
rebuilt from it at every start. An executor that starts later bootstraps from the same snapshot
and replays from the same offsets (a longer replay the longer the job has run).
"""
from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.filter.subscriptions import ensure_subscriptions_table
from pipeline.spark.kafka_io import kafka_options
from pipeline.spark.session import register_java_function

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from pipeline.filter.settings import FilterJobSettings

log = logging.getLogger("waku.filter.criteria")

INDEX_CLASS = "waku.pipeline.CriteriaIndex"
SNAPSHOTS_KEPT = 2

def _jvm_index(spark: SparkSession):
    return getattr(spark.sparkContext._jvm, INDEX_CLASS)


def committed_offsets(spark: SparkSession, checkpoint: str, topic: str) -> dict[int, int]:
    """Offsets of `topic` up to which the streaming checkpoint's last committed batch wrote its
    sink (any Hadoop file system); {} when the job has not committed a batch."""
    text = _jvm_index(spark).committedOffsets(checkpoint, topic)
    return {int(p): int(o) for p, o in json.loads(text).items()} if text else {}


def write_snapshot(spark: SparkSession, settings: FilterJobSettings, path: str) -> None:
    """The live rows of Delta `subscriptions` as text lines the index reads."""
    table = ensure_subscriptions_table(spark, settings.warehouse)
    cutoff = time.time() - settings.ttl_s
    rows = spark.read.format("delta").load(table).where(F.col("last_refresh") >= F.lit(cutoff))

    def b64(name: str) -> Column:
        return F.base64(F.encode(F.coalesce(F.col(name), F.lit("")), "UTF-8"))

    # subscribed_time last (empty when null): the index's restart rule reads it (CriteriaIndex.loadSnapshot)
    line = F.concat_ws("\t", b64("peer_id"), b64("bridge_id"), b64("pubsub_topic"), b64("content_topic"),
                       b64("protocol"), b64("request_id"), F.col("last_refresh").cast("string"),
                       F.coalesce(F.col("subscribed_time").cast("string"), F.lit("")))
    rows.select(line.alias("value")).write.mode("overwrite").text(path)


def _prune_snapshots(spark: SparkSession, root: str, keep: str) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session has its gateway
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    base = jvm.org.apache.hadoop.fs.Path(root)
    fs = base.getFileSystem(conf)
    if not fs.exists(base):
        return
    names = sorted(s.getPath().getName() for s in fs.listStatus(base))
    for name in names[:-SNAPSHOTS_KEPT]:
        if name != keep:
            fs.delete(jvm.org.apache.hadoop.fs.Path(base, name), True)


def prepare_index(spark: SparkSession, settings: FilterJobSettings) -> str:
    """Bootstrap data of this job run's index; returns its configuration (a JSON literal)."""
    began = time.monotonic()
    offsets = committed_offsets(spark, settings.warehouse.checkpoint_path("subscriptions"),
                                settings.subscriptions_topic)
    root = settings.warehouse.checkpoint_path("filter") + "-criteria"
    name = f"{int(time.time() * 1000):015d}"
    snapshot = f"{root}/{name}"
    write_snapshot(spark, settings, snapshot)
    _prune_snapshots(spark, root, name)
    kafka = {k[len("kafka."):]: v for k, v in kafka_options(settings.kafka).items()}
    config = json.dumps({"snapshot": snapshot, "topic": settings.subscriptions_topic, "offsets": offsets,
                         "ttl_s": settings.ttl_s, "poll_ms": settings.index_poll_ms, "kafka": kafka},
                        sort_keys=True)
    log.info("criteria snapshot %s written in %.1f s; events replayed from %s", snapshot,
             time.monotonic() - began, offsets or "the beginning of " + settings.subscriptions_topic)
    return config


FANOUT_CLASS = "waku.pipeline.CriteriaFanout"
FANOUT_FN = "waku_criteria_fanout"
FANOUT = T.StructType([
    T.StructField("bridge_id", T.StringType()),
    T.StructField("targets", T.BinaryType()),
])


def register_fanout(spark: SparkSession) -> str:
    return register_java_function(spark, FANOUT_FN, FANOUT_CLASS, T.ArrayType(FANOUT, containsNull=False))


def fanouts(pubsub_topic: Column, content_topic: Column, config: str) -> Column:
    """array<struct<bridge_id, targets>>: per bridge holding live subscribers, their PushRecord
    field 10 entries (jvm/src/waku/pipeline/CriteriaFanout.java)."""
    return F.call_function(FANOUT_FN, pubsub_topic, content_topic, F.lit(config))


def warm_up(spark: SparkSession, config: str) -> None:
    """Bootstrap the index in this JVM now (the driver's, which runs the tasks in local mode) so
    the first message does not wait for it."""
    register_fanout(spark)
    spark.range(1).select(fanouts(F.lit(""), F.lit(""), config)).collect()


def index_stats(spark: SparkSession) -> list[dict]:
    """Figures of the indexes in the driver's JVM (every index in local mode)."""
    return json.loads(_jvm_index(spark).stats())


def close_indexes(spark: SparkSession) -> None:
    _jvm_index(spark).closeAll()


class IndexCollector:
    """Prometheus collector of the resident index in the driver's JVM (the executor's in local
    mode; on a cluster the indexes live in the executors and this reports none):
    waku_filter_index_* read through py4j at each scrape."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        try:
            stats = index_stats(self.spark)
        except Exception:  # noqa: BLE001 - the JVM is going away: nothing to report
            stats = []
        g = GaugeMetricFamily("waku_filter_index_criteria", "Criteria held by the resident index")
        g.add_metric([], sum(s["criteria"] for s in stats))
        yield g
        for name, key, text in (("events", "events", "Subscription events applied"),
                                ("skipped_events", "skipped", "Subscription events skipped (undecodable, no peer)"),
                                ("lookups", "lookups", "Messages looked up"),
                                ("matches", "matched", "Subscribers found (push records made)")):
            c = CounterMetricFamily(f"waku_filter_index_{name}", text)
            c.add_metric([], sum(s[key] for s in stats))
            yield c
        b = GaugeMetricFamily("waku_filter_index_bootstrap_seconds", "Snapshot load and replay at the index's start")
        b.add_metric([], max([s["bootstrap_ms"] / 1000 for s in stats] or [0]))
        yield b
        e = GaugeMetricFamily("waku_filter_index_errors", "1 while the index's event consumer reports an error")
        e.add_metric([], float(any(s["error"] for s in stats)))
        yield e
