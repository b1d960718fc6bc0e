"""Store maintenance: retention of every table, compaction (keeping received_time order),
vacuum, the audit; `maintain` runs them in order and times each into a `MaintenanceRun`, whose
row goes to Delta job_metrics (job = maintain).

Safe while the store job runs: the store job's appends are blind appends, which never conflict
with OPTIMIZE; a DELETE that races an append touching the same files is retried (Delta's typed
conflict exceptions, pipeline/spark/delta.py). The `subscriptions` table (two MERGEs a
micro-batch from the subscriptions job) is compacted and vacuumed too.
"""
from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from core.settings import WarehouseSettings
from pipeline.spark.delta import retry_conflicts
from pipeline.spark.metrics import BatchFigures, run_row
from pipeline.store.settings import MaintainSettings
from pipeline.store.tables import UNTIMED_INDEX
from pipeline.store.validation import audit

log = logging.getLogger("waku.maintain")
# The warehouse's tables besides `messages` (which compaction treats apart): compacted,
# vacuumed and counted alike, each when it exists.
OTHER_TABLES = ("quarantine", "job_metrics", "subscriptions", UNTIMED_INDEX)
R = TypeVar("R")


@dataclass
class MaintenanceReport:
    deleted_by_age: int = 0
    deleted_by_capacity: int = 0
    quarantine_deleted: int = 0
    job_metrics_deleted: int = 0
    files_before: int = 0
    files_after: int = 0
    vacuumed: bool = False


def _exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def _file_count(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().select("numFiles").first()
    assert detail is not None  # detail(): one row
    return int(detail[0])


def _delete(spark: SparkSession, path: str, condition) -> int:
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    before = spark.read.format("delta").load(path).where(condition).count()
    if before:
        retry_conflicts(f"delete from {path}", lambda: table.delete(condition))
    return before


def apply_retention(spark: SparkSession, settings: MaintainSettings, now: float | None = None,
                    report: MaintenanceReport | None = None) -> MaintenanceReport:
    """Delete messages older than store.retention_days, then (if store.retention_max_messages
    is set) the oldest beyond that many; quarantine follows the same age limit; job_metrics keeps
    job_metrics.retention_days whole days."""
    report = report or MaintenanceReport()
    now = time.time() if now is None else now
    cutoff = now - settings.retention_days * 86400.0
    messages = settings.warehouse.table_path("messages")
    # received_date lets Delta drop whole days without reading them.
    cutoff_date = time.strftime("%Y-%m-%d", time.gmtime(cutoff))
    # The leading partition-only conjunct is what Delta's conflict check can evaluate on a
    # concurrent append's files: without it (an OR with a data column) every append of the store
    # job, to today's partition, conflicted with this DELETE (ConcurrentAppendException until the
    # retries ran out, so on a busy store retention never applied).
    by_age = (F.col("received_date") <= F.lit(cutoff_date)) & (
        (F.col("received_date") < F.lit(cutoff_date)) | (F.col("received_time") < F.lit(cutoff)))
    log.info("retention: deleting messages received before %.3f (%s UTC, %g days)", cutoff,
             time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(cutoff)), settings.retention_days)
    report.deleted_by_age = _delete(spark, messages, by_age)
    index = settings.warehouse.table_path(UNTIMED_INDEX)
    has_index = _exists(spark, index)
    if has_index:  # follows messages, so that a copy after the retention is stored again
        _delete(spark, index, F.col("received_time") < F.lit(cutoff))
    limit = settings.retention_max_messages
    if limit > 0:
        df = spark.read.format("delta").load(messages)
        excess = df.count() - limit
        if excess > 0:
            # Everything up to the excess-th oldest receive time goes; rows tied with it go too,
            # so at most `limit` remain.
            oldest = (df.select("received_time").orderBy("received_time").limit(excess)
                      .agg(F.max("received_time")).first())
            assert oldest is not None  # an aggregate: one row
            edge = oldest[0]
            edge_date = time.strftime("%Y-%m-%d", time.gmtime(edge))  # partition-only first, as by_age
            report.deleted_by_capacity = _delete(spark, messages, (F.col("received_date") <= F.lit(edge_date))
                                                 & (F.col("received_time") <= F.lit(edge)))
            if has_index:
                _delete(spark, index, F.col("received_time") <= F.lit(edge))
    report.quarantine_deleted = _delete(
        spark, settings.warehouse.table_path("quarantine"),
        F.col("quarantined_at") < F.timestamp_seconds(F.lit(cutoff)))
    metrics = settings.warehouse.table_path("job_metrics")
    if settings.metrics is not None and _exists(spark, metrics):
        # Whole days (the table is partitioned by job and day): a metadata-only delete.
        day = time.strftime("%Y-%m-%d", time.gmtime(now - settings.metrics.retention_days * 86400.0))
        report.job_metrics_deleted = _delete(spark, metrics, F.col("day") < F.lit(day))
    return report


def compact(spark: SparkSession, settings: MaintainSettings, report: MaintenanceReport | None = None,
            now: float | None = None) -> MaintenanceReport:
    """Rewrite the recent days' files into large ones sorted by received_time (ZORDER on one
    column is a sort), keeping per-file received_time ranges tight for cursor reads. Only the
    last `store.compact_days` UTC days are rewritten: older days were compacted before."""
    from delta.tables import DeltaTable

    report = report or MaintenanceReport()
    now = time.time() if now is None else now
    since = time.strftime("%Y-%m-%d", time.gmtime(now - (settings.compact_days - 1) * 86400.0))
    path = settings.warehouse.table_path("messages")
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(settings.optimize_target_file_bytes))
    report.files_before = _file_count(spark, path)
    retry_conflicts("optimize", lambda: DeltaTable.forPath(spark, path).optimize()
           .where(f"received_date >= '{since}'").executeZOrderBy("received_time"))
    for table in OTHER_TABLES:
        table_path = settings.warehouse.table_path(table)
        if not _exists(spark, table_path):
            continue
        retry_conflicts(f"optimize {table}", functools.partial(_compact_table, spark, table_path))
    report.files_after = _file_count(spark, path)
    return report


def _compact_table(spark: SparkSession, path: str) -> None:
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).optimize().executeCompaction()


def _vacuum_table(spark: SparkSession, path: str, hours: float) -> None:
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, path).vacuum(hours)


def vacuum(spark: SparkSession, settings: MaintainSettings,
           report: MaintenanceReport | None = None) -> MaintenanceReport:
    """Remove files no longer referenced, older than store.vacuum_retain_hours."""
    report = report or MaintenanceReport()
    hours = settings.vacuum_retain_hours
    if hours < 168:
        # Delta refuses retention below 7 days unless told the readers are known to be short-lived.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    for table in ("messages", *OTHER_TABLES):
        path = settings.warehouse.table_path(table)
        if _exists(spark, path):
            retry_conflicts(f"vacuum {table}", functools.partial(_vacuum_table, spark, path, hours))
    report.vacuumed = True
    return report


def table_rows(spark: SparkSession, warehouse: WarehouseSettings) -> dict[str, int]:
    """Rows of each table of the warehouse that exists (Delta answers a plain count from the
    file statistics in its log, without reading data files)."""
    out: dict[str, int] = {}
    for table in ("messages", *OTHER_TABLES):
        path = warehouse.table_path(table)
        if _exists(spark, path):
            out[table] = spark.read.format("delta").load(path).count()
    return out


@dataclass
class MaintenanceRun:
    """One run of the maintain job: its report, audit outcome, time per step and table rows."""
    report: MaintenanceReport = field(default_factory=MaintenanceReport)
    audit: dict[str, Any] | None = None
    figures: BatchFigures = field(default_factory=BatchFigures)
    rows_before: dict[str, int] = field(default_factory=dict)
    rows_after: dict[str, int] = field(default_factory=dict)
    began: float = field(default_factory=time.time)
    run_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def step(self, name: str, op: Callable[[], R]) -> R:
        began = time.monotonic()
        try:
            return op()
        finally:
            self.figures.phase_seconds[name] = round(time.monotonic() - began, 3)

    def metrics_row(self) -> dict[str, Any]:
        """The run's row for Delta job_metrics (job = maintain)."""
        r = self.report
        self.figures.counts = {
            "deleted_by_age": r.deleted_by_age, "deleted_by_capacity": r.deleted_by_capacity,
            "quarantine_deleted": r.quarantine_deleted, "job_metrics_deleted": r.job_metrics_deleted,
            "files_before": r.files_before, "files_after": r.files_after,
            **{f"{t}_rows": n for t, n in self.rows_after.items()}}
        if self.audit is not None:
            self.figures.counts["audit_failed"] = 0 if self.audit["success"] else 1
        return run_row("maintain", self.run_id, self.began, time.time(), input_rows=self.rows_before.get("messages"),
                       output_rows=self.rows_after.get("messages"), figures=self.figures,
                       report={"maintenance": vars(r), "audit": self.audit})


def maintain(spark: SparkSession, settings: MaintainSettings, run: MaintenanceRun,
             skip: Collection[str] = ()) -> MaintenanceRun:
    """Retention, compaction, vacuum, then the audit of `messages` (great-expectations on Spark),
    each timed into `run`; steps in `skip` are left out."""
    run.rows_before = table_rows(spark, settings.warehouse)
    steps = {"retention": lambda: apply_retention(spark, settings, report=run.report),
             "compact": lambda: compact(spark, settings, report=run.report),
             "vacuum": lambda: vacuum(spark, settings, report=run.report)}
    for name, op in steps.items():
        if name not in skip:
            run.step(name, op)
    log.info("maintenance done: %s", run.report)
    if "audit" not in skip:
        messages = spark.read.format("delta").load(settings.warehouse.table_path("messages"))
        run.audit = run.step("audit", lambda: audit(messages, settings.limits))
        log.log(logging.INFO if run.audit["success"] else logging.ERROR, "audit of messages: %s", run.audit)
    run.rows_after = table_rows(spark, settings.warehouse)
    return run
