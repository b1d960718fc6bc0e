"""The subscriptions job: SubscriptionEvents (waku.subscriptions, keyed by peer id) applied to
the Delta table `subscriptions`, one row per (peer_id, bridge_id, pubsub_topic, content_topic)
criterion: a subscription is a peer's *at a bridge* (pushes leave from the bridge it subscribed
to), so a peer that moves from bridge A to bridge B keeps B's rows when A later expires it.

Each micro-batch (foreachBatch; at most filter.subscriptions_max_events_per_trigger events, so
it fits in the driver) is collected to the driver, which reads the rows the batch can touch (its
peers' at their bridges, and the rows of a bridge that restarted) and folds the events over them
in per-peer order (Kafka offset order: one peer's events share a partition) by the rules in
pipeline/filter/batch_effect.py: restarts, then per-peer resets and refreshes, then each
criterion's last SUBSCRIBE / UNSUBSCRIBE. What changed is written by one MERGE on the full key
(none when nothing did): by delta-rs on a local warehouse, by Spark's Delta on an object store
(pipeline/filter/subscriptions_table.py; docs/decisions.md). Spark reads the batch from Kafka.

The fold is idempotent (a replayed batch, folded over rows that already hold its effect, writes
the same rows), so the at-least-once foreachBatch is exactly-once in effect; the job is the
table's only writer, and its batches and expiry run under one lock.
Expiry: rows whose `last_refresh` is older than the TTL (plus the cadence's longest wait, so a
refresh still on its way keeps its row) are deleted every `expire_interval_s` by the driver
(under the same lock as the batches: no concurrent Delta writers in the job), when any can be:
the driver keeps a lower bound of the table's smallest `last_refresh` (read by an aggregate
query when a check is due, lowered by each batch's earliest SUBSCRIBE) and reads nothing while
it is inside the TTL. The filter job ignores expired rows as soon as they pass the TTL, whatever
the deletion schedule.
Warm-up (filter.subscriptions_warm_up): at start, before its first expiry round, the driver runs
the batch path on a throw-away table under the same lock, so the first subscriber's batch does
not pay a fresh JVM's first Kafka batch and collect, nor Spark's first MERGE where Spark writes
(class loading, code generation, JIT: several times a warm one).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from core.settings import WarehouseSettings
from pipeline.filter import batch_effect
from pipeline.filter.settings import SubscriptionsJobSettings
from pipeline.filter.subscriptions_table import SUBSCRIPTIONS_SCHEMA, SubscriptionsTable, open_table
from pipeline.spark.delta import ensure_table
from pipeline.spark.kafka_io import read_topic_stream
from pipeline.spark.session import delete_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pipeline.spark.metrics import JobMetrics

log = logging.getLogger("waku.subscriptions")

def ensure_subscriptions_table(spark: SparkSession, warehouse: WarehouseSettings) -> str:
    path = warehouse.table_path("subscriptions")
    ensure_table(spark, path, SUBSCRIPTIONS_SCHEMA, properties={"delta.appendOnly": "false"})
    return path


def apply_batch(batch: DataFrame, table: SubscriptionsTable, ttl_s: float) -> dict[str, Any]:
    """Apply one micro-batch of raw Kafka rows (at most the stream's max_events_per_trigger) to
    the table: collected to the driver, its effect computed there (batch_effect) over the rows it
    can touch (one filtered read), then written by one MERGE on the full key (none when nothing
    changes). `ttl_s`: filter.subscription_ttl_s (a SUBSCRIBE finds a peer not refreshed within it
    expired). Returns its valid event count (`events`), the earliest SUBSCRIBE time in it
    (`first_subscribe`, None without one) and the rows deleted or written (`changes`)."""
    return apply_records([(r[0], r[1], r[2]) for r in batch.select("value", "partition", "offset").collect()], table,
                         ttl_s)


def apply_records(records: Iterable[tuple[bytes, int, int]], table: SubscriptionsTable,
                  ttl_s: float) -> dict[str, Any]:
    """`apply_batch` on a batch's collected (value, partition, offset) records: decode, read the
    rows they can touch, fold (batch_effect), one MERGE (tests/filter_twins.py drives it over an
    in-memory table)."""
    events = batch_effect.decode(records)
    if not events:
        return {"events": 0}
    pairs, restarts = batch_effect.touched(events)
    current = {}
    for row in table.touched_rows(sorted({p for p, _ in pairs}), sorted(restarts)):
        if (row.peer_id, row.bridge_id) in pairs or row.bridge_id in restarts:
            current[row.key] = row
    effect = batch_effect.effect(events, current, ttl_s)
    if effect.changes:
        table.write(effect)
    return {"events": effect.events, "first_subscribe": effect.first_subscribe, "changes": effect.changes}


def warm_up(spark: SparkSession, path: str, ttl_s: float) -> float:
    """Run the batch path once on a throw-away table at `path` (then deleted): a few events that
    take every MERGE branch, then an expiry. A fresh JVM's first batch (and Spark's first MERGE,
    where Spark writes) costs several times a warm one (class loading, code generation, the JIT),
    paid here at start instead of in the first subscriber's batch. Returns the seconds it took."""
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
        table = open_table(path)
        offset = 0
        for values in batches:
            rows = [(v, 0, offset + i) for i, v in enumerate(values)]
            offset += len(values)
            apply_batch(spark.createDataFrame(rows, "value binary, partition int, offset long"), table, ttl_s)
        table.expire(3.5 - 1.0)
        table.earliest_refresh()
    finally:
        delete_path(spark, path)
    return time.monotonic() - began


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
        self.table = open_table(self.path)
        self.ttl_s = settings.ttl_s
        self.lock = threading.Lock()
        self.query: StreamingQuery | None = None
        self._stop = threading.Event()
        self._expirer: threading.Thread | None = None
        # A lower bound of the table's smallest last_refresh (None: not known yet): rows only
        # come in with their SUBSCRIBE's time or later and refreshes only raise it, so while the
        # bound is inside the TTL nothing can expire and the DELETE (a scan and a commit) is not
        # run. Read and kept under `lock`.
        self.earliest: float | None = None
        self.expiry_runs = {"skipped": 0, "checked": 0, "deleted": 0}

    def _warm_up(self) -> None:
        path = self.settings.warehouse.checkpoint_path("subscriptions") + "-warm-up"
        with self.lock:  # a batch that comes meanwhile waits for it
            try:
                log.info("warm-up: the batch path ran in %.1f s", warm_up(self.spark, path, self.ttl_s))
            except Exception as exc:  # noqa: BLE001 - only the first batch is slower without it
                log.warning("warm-up failed (the first batch will be slower): %s", exc)

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        with self.lock:
            began = time.monotonic()
            counts = apply_batch(batch, self.table, self.ttl_s)
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
        checked first (no read), then the table's smallest last_refresh (one small read), and
        only then the DELETE."""
        ttl = self.ttl_s + self.expiry_grace_s
        now = time.time() if now is None else now
        with self.lock:
            if not expiry_due(self.earliest, now - ttl):
                self.expiry_runs["skipped"] += 1
                return
            self.earliest = self.table.earliest_refresh()
            if not expiry_due(self.earliest, now - ttl):
                self.expiry_runs["checked"] += 1
                return
            self.table.expire(now - ttl)
            self.earliest = self.table.earliest_refresh()
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
                                   max_offsets_per_trigger=s.max_events_per_trigger,
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
