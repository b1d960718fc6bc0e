"""Store maintenance: compaction (keeping received_time order), retention, vacuum.

Safe while the store job runs: the store job's appends are blind appends, which never conflict
with OPTIMIZE; a DELETE that races an append touching the same files is retried (Delta's typed
conflict exceptions, pipeline/spark/delta.py). The `subscriptions` table (two MERGEs a
micro-batch from the subscriptions job) is compacted and vacuumed too.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipeline.spark.delta import retry_conflicts
from pipeline.store.settings import MaintainSettings

log = logging.getLogger("waku.maintain")


@dataclass
class MaintenanceReport:
    deleted_by_age: int = 0
    deleted_by_capacity: int = 0
    quarantine_deleted: int = 0
    files_before: int = 0
    files_after: int = 0
    vacuumed: bool = False


def _exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def _file_count(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).detail().select("numFiles").first()[0]


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
    is set) the oldest beyond that many; quarantine follows the same age limit."""
    report = report or MaintenanceReport()
    now = time.time() if now is None else now
    cutoff = now - settings.retention_days * 86400.0
    messages = settings.warehouse.table_path("messages")
    # received_date lets Delta drop whole days without reading them.
    cutoff_date = time.strftime("%Y-%m-%d", time.gmtime(cutoff))
    by_age = (F.col("received_date") < F.lit(cutoff_date)) | (F.col("received_time") < F.lit(cutoff))
    report.deleted_by_age = _delete(spark, messages, by_age)
    limit = settings.retention_max_messages
    if limit > 0:
        df = spark.read.format("delta").load(messages)
        excess = df.count() - limit
        if excess > 0:
            # Everything up to the excess-th oldest receive time goes; rows tied with it go too,
            # so at most `limit` remain.
            edge = (df.select("received_time").orderBy("received_time").limit(excess)
                    .agg(F.max("received_time")).first()[0])
            report.deleted_by_capacity = _delete(spark, messages, F.col("received_time") <= F.lit(edge))
    report.quarantine_deleted = _delete(
        spark, settings.warehouse.table_path("quarantine"),
        F.col("quarantined_at") < F.timestamp_seconds(F.lit(cutoff)))
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
    for table in ("quarantine", "job_metrics", "subscriptions"):
        if not _exists(spark, settings.warehouse.table_path(table)):
            continue
        retry_conflicts(f"optimize {table}",
               lambda t=table: DeltaTable.forPath(spark, settings.warehouse.table_path(t)).optimize().executeCompaction())
    report.files_after = _file_count(spark, path)
    return report


def vacuum(spark: SparkSession, settings: MaintainSettings, report: MaintenanceReport | None = None) -> MaintenanceReport:
    """Remove files no longer referenced, older than store.vacuum_retain_hours."""
    from delta.tables import DeltaTable

    report = report or MaintenanceReport()
    hours = settings.vacuum_retain_hours
    if hours < 168:
        # Delta refuses retention below 7 days unless told the readers are known to be short-lived.
        spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    for table in ("messages", "quarantine", "job_metrics", "subscriptions"):
        path = settings.warehouse.table_path(table)
        if _exists(spark, path):
            retry_conflicts(f"vacuum {table}", lambda p=path: DeltaTable.forPath(spark, p).vacuum(hours))
    report.vacuumed = True
    return report
