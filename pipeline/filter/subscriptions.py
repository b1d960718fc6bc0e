"""The subscriptions job: SubscriptionEvents (waku.subscriptions, keyed by peer id) applied to
the Delta table `subscriptions`, one row per (peer_id, bridge_id, pubsub_topic, content_topic)
criterion: a subscription is a peer's *at a bridge* (pushes leave from the bridge it subscribed
to), so a peer that moves from bridge A to bridge B keeps B's rows when A later expires it.

Each micro-batch (foreachBatch) is reduced to its net effect, in per-peer order (Kafka offset
order: one peer's events share a partition), then applied with two MERGEs:

1. per (peer, bridge): an UNSUBSCRIBE_ALL / EXPIRE in the batch deletes every row of the peer at that bridge that was
   there before (all older than the reset); a REFRESH (a PING that found subscriptions) after
   the last reset raises `last_refresh` of the peer's rows;
2. per criterion: the last SUBSCRIBE / UNSUBSCRIBE after the peer's last reset upserts or
   deletes the row (`last_refresh` = the later of the event and the peer's refresh).

Both steps are idempotent (a replayed batch gives the same table: deletes of what is gone,
`greatest` for times), so the at-least-once foreachBatch is exactly-once in effect.
Expiry: rows whose `last_refresh` is older than the TTL (plus the cadence's longest wait, so a
refresh still on its way keeps its row) are deleted every `expire_interval_s` by the driver
(under the same lock as the batches: no concurrent Delta writers in the job), when any can be:
the driver keeps a lower bound of the table's smallest `last_refresh` (read by an aggregate
query when a check is due, lowered by each batch's earliest SUBSCRIBE) and runs no Spark work while
it is inside the TTL. The filter job ignores expired rows as soon as they pass the TTL, whatever
the deletion schedule.
Warm-up (filter.subscriptions_warm_up): at start, before its first expiry round, the driver runs
the batch path on a throw-away table under the same lock, so the first subscriber's batch does
not pay a fresh JVM's first MERGE (class loading, code generation, JIT: several times a warm one).
"""
from __future__ import annotations

import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from core.settings import WarehouseSettings
from pipeline.filter.settings import SubscriptionsJobSettings
from pipeline.spark.delta import ensure_table
from pipeline.spark.kafka_io import read_topic_stream
from pipeline.spark.protobuf import from_protobuf
from pipeline.spark.records import SUBSCRIPTION_EVENT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.spark.metrics import JobMetrics

log = logging.getLogger("waku.subscriptions")

SUBSCRIPTIONS_SCHEMA = T.StructType([
    T.StructField("peer_id", T.StringType(), False),
    T.StructField("pubsub_topic", T.StringType(), False),
    T.StructField("content_topic", T.StringType(), False),
    T.StructField("bridge_id", T.StringType(), False),
    T.StructField("protocol", T.StringType(), True),
    T.StructField("request_id", T.StringType(), True),
    T.StructField("subscribed_time", T.DoubleType(), True),   # first SUBSCRIBE (Unix seconds, bridge clock)
    T.StructField("last_refresh", T.DoubleType(), False),     # last SUBSCRIBE / PING
])

RESET_OPS = ("UNSUBSCRIBE_ALL", "EXPIRE")
RESTART_PEER = "*"  # BRIDGE_RESTART records name no peer


def ensure_subscriptions_table(spark: SparkSession, warehouse: WarehouseSettings) -> str:
    path = warehouse.table_path("subscriptions")
    ensure_table(spark, path, SUBSCRIPTIONS_SCHEMA, properties={"delta.appendOnly": "false"})
    return path


def decode_events(kafka_df: DataFrame) -> DataFrame:
    """Kafka rows -> valid SubscriptionEvents with their Kafka order (`seq`)."""
    ev = from_protobuf(F.col("value"), SUBSCRIPTION_EVENT, kafka_df.sparkSession)
    df = kafka_df.select(ev.alias("e"), F.col("partition"), F.col("offset"))
    df = df.where(F.col("e").isNotNull() & (F.col("e.peer_id") != "") & (F.col("e.bridge_id") != "")
                  & ((F.col("e.op") != "BRIDGE_RESTART") | (F.col("e.peer_id") == RESTART_PEER)))
    return df.select(
        "e.peer_id", "e.bridge_id", "e.op", "e.pubsub_topic", "e.content_topics", "e.event_time",
        "e.request_id", "e.protocol",
        # per-peer order: one peer's events are in one partition (keyed by peer id)
        (F.col("partition").cast("long") * F.lit(1 << 40) + F.col("offset")).alias("seq"),
    )


def net_effect(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(per-peer resets/refreshes, per-criterion last op) of a batch of decoded events."""
    key = ["peer_id", "bridge_id"]
    resets = events.where(F.col("op").isin(*RESET_OPS)).groupBy(*key).agg(F.max("seq").alias("reset_seq"))
    after = events.join(resets, key, "left").where(
        F.col("reset_seq").isNull() | (F.col("seq") > F.col("reset_seq")))
    refresh = after.where(F.col("op") == "REFRESH").groupBy(*key).agg(F.max("event_time").alias("refresh_time"))
    peers = resets.join(refresh, key, "full_outer").select(
        *key, F.col("reset_seq").isNotNull().alias("reset"), "refresh_time")
    crit = after.where(F.col("op").isin("SUBSCRIBE", "UNSUBSCRIBE")).select(
        "peer_id", "bridge_id", "op", "pubsub_topic", F.explode("content_topics").alias("content_topic"),
        "event_time", "request_id", "protocol", "seq")
    w = Window.partitionBy("peer_id", "bridge_id", "pubsub_topic", "content_topic").orderBy(F.col("seq").desc())
    crit = crit.withColumn("rn", F.row_number().over(w)).where("rn = 1").drop("rn", "seq")
    crit = crit.join(refresh, key, "left").withColumn(
        "last_refresh", F.greatest(F.col("event_time"), F.coalesce(F.col("refresh_time"), F.col("event_time"))))
    return peers, crit.drop("refresh_time")


def apply_batch(batch: DataFrame, path: str) -> dict[str, Any]:
    """Apply one micro-batch of raw Kafka rows to the table; returns its event count (`events`)
    and the earliest SUBSCRIBE time in it (`first_subscribe`, None without one)."""
    from delta.tables import DeltaTable

    spark = batch.sparkSession
    # The MERGE sources derive from the batch, a fixed Kafka offset range: deterministic when
    # re-read, so Delta need not materialize them (its local-checkpoint copy lost blocks under
    # memory pressure in tests). Nothing in the source plan may then be cached.
    spark.conf.set("spark.databricks.delta.merge.materializeSource", "none")
    events = decode_events(batch)
    by_op: dict[str, int] = {}
    first_subscribe = None  # the earliest time a row this batch inserts can carry
    for r in events.groupBy("op").agg(F.count(F.lit(1)).alias("n"), F.min("event_time").alias("first")).collect():
        by_op[r["op"]] = r["n"]
        if r["op"] == "SUBSCRIBE":
            first_subscribe = r["first"]
    n = sum(by_op.values())
    if n == 0:
        return {"events": 0}
    table = DeltaTable.forPath(spark, path)
    if by_op.get("BRIDGE_RESTART"):
        # A bridge restarted empty: what an earlier run of it left (refreshed before the
        # restart) is gone, and so are that run's events in this batch (earlier event times, any
        # partition: the restart record is keyed "*"); what the new run answered stays.
        restarts = events.where(F.col("op") == "BRIDGE_RESTART").groupBy("bridge_id").agg(
            F.max("event_time").alias("restart_time"))
        (table.alias("t").merge(restarts.alias("s"), "t.bridge_id = s.bridge_id")
         .whenMatchedDelete(condition="t.last_refresh < s.restart_time")
         .execute())
        events = events.join(F.broadcast(restarts), "bridge_id", "left").where(
            F.col("restart_time").isNull() | (F.col("event_time") >= F.col("restart_time"))).drop("restart_time")
    peers, crit = net_effect(events.where(F.col("op") != "BRIDGE_RESTART"))
    if any(by_op.get(op) for op in (*RESET_OPS, "REFRESH")):
        (table.alias("t").merge(peers.alias("s"), "t.peer_id = s.peer_id AND t.bridge_id = s.bridge_id")
         .whenMatchedDelete(condition="s.reset")
         .whenMatchedUpdate(condition="s.refresh_time IS NOT NULL AND s.refresh_time > t.last_refresh",
                            set={"last_refresh": "s.refresh_time"})
         .execute())
    if by_op.get("SUBSCRIBE") or by_op.get("UNSUBSCRIBE"):
        (table.alias("t").merge(
            crit.alias("s"),
            "t.peer_id = s.peer_id AND t.bridge_id = s.bridge_id AND t.pubsub_topic = s.pubsub_topic "
            "AND t.content_topic = s.content_topic")
         .whenMatchedDelete(condition="s.op = 'UNSUBSCRIBE'")
         .whenMatchedUpdate(condition="s.op = 'SUBSCRIBE'", set={
             "protocol": "s.protocol", "request_id": "s.request_id",
             "last_refresh": "greatest(t.last_refresh, s.last_refresh)"})
         .whenNotMatchedInsert(condition="s.op = 'SUBSCRIBE'", values={
             "peer_id": "s.peer_id", "pubsub_topic": "s.pubsub_topic", "content_topic": "s.content_topic",
             "bridge_id": "s.bridge_id", "protocol": "s.protocol", "request_id": "s.request_id",
             "subscribed_time": "s.event_time", "last_refresh": "s.last_refresh"})
         .execute())
    return {"events": n, "first_subscribe": first_subscribe}


def warm_up(spark: SparkSession, path: str) -> float:
    """Run the batch path once on a throw-away table at `path` (then deleted): a few events that
    take every MERGE branch, then an expiry. A fresh JVM's first MERGE costs several times a
    warm one (class loading, code generation, the JIT), paid here at start instead of in the
    first subscriber's batch. Returns the seconds it took."""
    from core.records import subscription_event
    from schemas import pipeline_records_pb2 as pr

    began = time.monotonic()

    def ev(peer: str, op: pr.SubscriptionOp, t: float, cts: tuple[str, ...] = ()) -> bytes:
        return subscription_event(peer, "warm-up", op, t, "/warm-up" if cts else "", cts,
                                  request_id="warm-up", protocol="v2")[1]

    batches = [
        [ev("p1", pr.SUBSCRIBE, 1.0, ("a", "b")), ev("p2", pr.SUBSCRIBE, 1.0, ("a",)), ev("p1", pr.REFRESH, 2.0)],
        [ev("p1", pr.UNSUBSCRIBE, 3.0, ("b",)), ev("p1", pr.REFRESH, 3.0), ev("p2", pr.UNSUBSCRIBE_ALL, 3.0),
         ev("p2", pr.SUBSCRIBE, 4.0, ("c",))],
    ]
    ensure_table(spark, path, SUBSCRIPTIONS_SCHEMA, properties={"delta.appendOnly": "false"})
    try:
        offset = 0
        for values in batches:
            rows = [(v, 0, offset + i) for i, v in enumerate(values)]
            offset += len(values)
            apply_batch(spark.createDataFrame(rows, "value binary, partition int, offset long"), path)
        expire(spark, path, 1.0, now=3.5)
        earliest_refresh(spark, path)
    finally:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a live session has its gateway
        target = jvm.org.apache.hadoop.fs.Path(path)
        target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(target, True)
    return time.monotonic() - began


def expire(spark: SparkSession, path: str, ttl_s: float, now: float | None = None) -> None:
    """Delete criteria not refreshed within the TTL."""
    from delta.tables import DeltaTable

    cutoff = (time.time() if now is None else now) - ttl_s
    DeltaTable.forPath(spark, path).delete(F.col("last_refresh") < F.lit(cutoff))


def earliest_refresh(spark: SparkSession, path: str) -> float:
    """The table's smallest `last_refresh` (+inf when empty): one aggregate query (~0.5 s of the
    driver's CPU on a small table; Delta may answer MIN from the files' statistics)."""
    first = spark.read.format("delta").load(path).agg(F.min("last_refresh")).collect()[0][0]
    return math.inf if first is None else float(first)


def expiry_due(earliest: float | None, cutoff: float) -> bool:
    """Whether a row may be older than `cutoff`, given a lower bound of the table's smallest
    `last_refresh` (None: not known)."""
    return earliest is None or earliest < cutoff


class SubscriptionsJob:
    """The streaming query plus the driver-side expiry; `run()` blocks, `start()` does not."""

    def __init__(self, spark: SparkSession, settings: SubscriptionsJobSettings,
                 query_name: str = "subscriptions", metrics: JobMetrics | None = None) -> None:
        self.spark = spark
        self.settings = settings
        self.query_name = query_name
        self.metrics = metrics
        self.path = ensure_subscriptions_table(spark, settings.warehouse)
        self.ttl_s = settings.ttl_s
        self.lock = threading.Lock()
        self.query: StreamingQuery | None = None
        self._stop = threading.Event()
        self._expirer: threading.Thread | None = None
        # A lower bound of the table's smallest last_refresh (None: not known yet): rows only
        # come in with their SUBSCRIBE's time or later and refreshes only raise it, so while the
        # bound is inside the TTL nothing can expire and the DELETE (a scan and a commit, ~2 s of
        # a driver's CPU) is not run. Read and kept under `lock`.
        self.earliest: float | None = None
        self.expiry_runs = {"skipped": 0, "checked": 0, "deleted": 0}

    def _warm_up(self) -> None:
        path = self.settings.warehouse.checkpoint_path("subscriptions") + "-warm-up"
        with self.lock:  # a batch that comes meanwhile waits for it
            try:
                log.info("warm-up: the batch path ran in %.1f s", warm_up(self.spark, path))
            except Exception as exc:  # noqa: BLE001 - only the first batch is slower without it
                log.warning("warm-up failed (the first batch will be slower): %s", exc)

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        with self.lock:
            began = time.monotonic()
            counts = apply_batch(batch, self.path)
            first = counts.get("first_subscribe")
            if first is not None and self.earliest is not None:
                self.earliest = min(self.earliest, first)
            if self.metrics is not None:
                from pipeline.spark.metrics import BatchFigures

                self.metrics.add_figures(self.query_name, batch_id, BatchFigures(
                    output_rows=counts["events"], counts={"subscription_events": counts["events"]},
                    phase_seconds={"subscriptions.apply": round(time.monotonic() - began, 3)}))
            if counts["events"]:
                log.info("batch %d: %d events applied in %.2f s", batch_id, counts["events"], time.monotonic() - began)

    @property
    def expiry_grace_s(self) -> float:
        """How late an event may reach the table (the cadence's longest wait plus a trigger): a
        row is deleted that much after its TTL, so a refresh still on its way keeps it."""
        s = self.settings
        return (s.max_trigger_delay_s if s.min_events_per_trigger else 0.0) + s.trigger_seconds

    def expire_now(self, now: float | None = None) -> None:
        """Delete the rows past TTL + grace, when the bound says there may be any: the bound is
        checked first (no Spark work), then the table's statistics (one small query), and only
        then the DELETE."""
        ttl = self.ttl_s + self.expiry_grace_s
        now = time.time() if now is None else now
        with self.lock:
            if not expiry_due(self.earliest, now - ttl):
                self.expiry_runs["skipped"] += 1
                return
            self.earliest = earliest_refresh(self.spark, self.path)
            if not expiry_due(self.earliest, now - ttl):
                self.expiry_runs["checked"] += 1
                return
            expire(self.spark, self.path, ttl, now)
            self.earliest = earliest_refresh(self.spark, self.path)
            self.expiry_runs["deleted"] += 1

    def _expire_loop(self) -> None:
        interval = self.settings.expire_interval_s
        while not self._stop.wait(interval):
            try:
                self.expire_now()
            except Exception as exc:  # noqa: BLE001 - next round retries
                log.warning("expiry failed: %s", exc)

    def start(self) -> StreamingQuery:
        s = self.settings
        if self.metrics is not None:
            self.metrics.watch(self.query_name)
        # The cadence follows the load (filter.subscriptions_min_events_per_trigger): each batch
        # MERGEs into the whole table, a fixed cost paid every few seconds only when events come
        # that fast. Matching does not wait for it (the resident index follows the events).
        source = read_topic_stream(self.spark, s.kafka, s.topic, starting_offsets="earliest",
                                   min_offsets_per_trigger=s.min_events_per_trigger or None,
                                   max_trigger_delay_s=s.max_trigger_delay_s)
        self.query = (source.writeStream.queryName(self.query_name)
                      .option("checkpointLocation", s.warehouse.checkpoint_path("subscriptions"))
                      .foreachBatch(self._process)
                      .trigger(processingTime=f"{s.trigger_seconds} seconds")
                      .start())
        def expiry() -> None:
            if s.warm_up:
                self._warm_up()
            self._expire_loop()

        self._expirer = threading.Thread(target=expiry, name="subscriptions-expiry", daemon=True)
        self._expirer.start()
        return self.query

    def stop(self) -> None:
        self._stop.set()
        if self.query is not None:
            self.query.stop()
        if self._expirer is not None:
            self._expirer.join(60)
