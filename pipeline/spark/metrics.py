"""Job metrics of every Spark job: a StreamingQueryListener on the driver turns each query
progress (merged with the job's own figures for that batch) into a row of Delta `job_metrics`
and into Prometheus series `waku_job_*` served by an exporter on the driver.

    metrics = JobMetrics(spark, settings.metrics).start()   # listener, exporter, Delta writer
    metrics.watch("store")                                  # a query name, before the query starts
    ...                                                     # the job adds its figures per batch:
    metrics.add_figures("store", batch_id, BatchFigures(stored_rows=..., rule_failures=...))
    metrics.stop()                                          # flushes what is gathered

* The listener only records queries it watches (by name), so several jobs can share a session
  (tests) and each writes its own rows.
* The listener is JVM-side (`waku.pipeline.ProgressQueue` in our jar): on Spark's listener bus
  it only queues each event as a line of JSON. A thread here takes the lines every
  `EVENT_POLL_S` (one py4j call), updates Prometheus and queues a row. (PySpark's Python
  listener cost ~53 ms of the driver's CPU per progress, converting it through py4j.)
  A writer thread appends the queued rows to Delta every `write_interval_s` (one commit for all
  of them), retrying concurrent-commit conflicts. `flush()` waits for the listener bus to
  deliver what has been posted, takes it, then writes at once.
* The append is delta-rs's (`deltalake`, ~20 ms in this process), on a local disk and an object
  store alike (there by S3's conditional PUT, safe beside Spark's commits): with Spark it was a
  Spark job and a Delta transaction in the job's JVM every 10 s, and the store job's
  micro-batches beside it took up to twice their time (docs/decisions.md). A table delta-rs
  cannot append to (an older contract's columns; it says so once) gets Spark's append.
* Rows are at most once per batch: a driver that dies between a batch's commit and the next
  write loses those rows (they are observations; the data tables are exactly once).
* Kafka lag per topic-partition is the source's `latestOffset` (what the broker held when the
  batch was planned) minus the batch's `endOffset` (what it read up to).
* The contract (columns, partitioning, names) is core/job_metrics.py.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from core.config import Config, ConfigError
from core.job_metrics import (
    JOB_METRICS_COLUMN_NAMES,
    JOB_METRICS_COLUMNS,
    JOB_METRICS_PARTITION_BY,
    JOBS,
    METRIC_PREFIX,
)
from core.settings import WarehouseSettings, delta_rs_location
from core.tables import JOB_LOG_PROPERTIES
from core.threads import SupervisedThread
from pipeline.spark.delta import ensure_properties, ensure_table, retry_conflicts
from pipeline.spark.log_checkpoints import LogCheckpointer

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from deltalake import DeltaTable

log = logging.getLogger("waku.metrics")

_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(), "long": T.LongType(), "double": T.DoubleType(), "timestamp": T.TimestampType(),
    "map<string,long>": T.MapType(T.StringType(), T.LongType()),
    "map<string,double>": T.MapType(T.StringType(), T.DoubleType()),
}
JOB_METRICS_SCHEMA = T.StructType([T.StructField(n, _TYPES[t], nullable) for n, t, nullable in JOB_METRICS_COLUMNS])
# How often the events the JVM-side listener queued are taken (Prometheus lags them by at most this).
# Each take is a py4j call; five a second cost an idle driver ~0.005-0.01 core (issue 41).
EVENT_POLL_S = 1.0
PROGRESS_PREFIX = '{"event":"progress","progress":'
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)


@dataclass(frozen=True)
class JobMetricsSettings:
    job: str
    table: str                      # the Delta job_metrics table
    host: str = "127.0.0.1"
    port: int = -1                  # Prometheus endpoint of this driver (0: any free port; -1: off)
    write_interval_s: float = 10.0
    retention_days: float = 30.0    # maintain deletes older rows (whole days)

    @classmethod
    def from_config(cls, config: Config, job: str) -> JobMetricsSettings:
        if job not in JOBS:
            raise ConfigError(f"job_metrics: unknown job {job!r} (one of {', '.join(JOBS)})")
        m = config["job_metrics"]
        port = m[f"{job}_port"]
        if not -1 <= port <= 65535:
            raise ConfigError(f"job_metrics.{job}_port: expected a port, 0 (any) or -1 (off), got {port}")
        if m["write_interval_s"] <= 0:
            raise ConfigError(f"job_metrics.write_interval_s: expected a positive value, got {m['write_interval_s']}")
        return cls(job, WarehouseSettings.from_config(config).table_path("job_metrics"), m["host"], port,
                   m["write_interval_s"], m["retention_days"])


def ensure_job_metrics_table(spark: SparkSession, path: str) -> None:
    """Create job_metrics, or bring a table of an earlier release (unpartitioned, fewer columns)
    to the contract: its rows are rewritten partitioned by (job, day), new columns null."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        ensure_table(spark, path, JOB_METRICS_SCHEMA, list(JOB_METRICS_PARTITION_BY), dict(JOB_LOG_PROPERTIES))
        return

    def migrate() -> None:
        from pyspark.sql import functions as F

        detail = DeltaTable.forPath(spark, path).detail().first()
        assert detail is not None  # detail(): one row
        if list(detail.partitionColumns) == list(JOB_METRICS_PARTITION_BY):
            return
        old = spark.read.format("delta").load(path)
        if "day" not in old.columns:
            old = old.withColumn("day", F.date_format("batch_time", "yyyy-MM-dd"))
        cols = [F.col(f.name).cast(f.dataType) if f.name in old.columns else F.lit(None).cast(f.dataType).alias(f.name)
                for f in JOB_METRICS_SCHEMA.fields]
        (old.select(*cols).write.format("delta").mode("overwrite").option("overwriteSchema", "true")
         .partitionBy(*JOB_METRICS_PARTITION_BY).save(path))
        log.info("job_metrics at %s rewritten partitioned by %s", path, ", ".join(JOB_METRICS_PARTITION_BY))

    retry_conflicts("migrate job_metrics", migrate)
    # A table of an earlier release: Spark's checkpoints off, the log kept an hour (a metadata
    # commit, once; a concurrent append of another job retries on its conflict).
    ensure_properties(spark, path, dict(JOB_LOG_PROPERTIES))


@dataclass
class BatchFigures:
    """What a job knows of one batch beyond Spark's progress (all optional)."""
    output_rows: int | None = None
    stored_rows: int | None = None
    duplicate_rows: int | None = None
    ephemeral_rows: int | None = None
    quarantined_rows: int | None = None
    rule_failures: dict[str, int] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    phase_seconds: dict[str, float] = field(default_factory=dict)


def kafka_lag(sources: list[Mapping[str, Any]]) -> dict[str, int]:
    """"<topic>/<partition>" -> latestOffset - endOffset of every Kafka source of a progress."""
    lag: dict[str, int] = {}
    for source in sources:
        if "kafka" not in str(source.get("description", "")).lower():
            continue
        try:
            latest = _offsets(source.get("latestOffset"))
            end = _offsets(source.get("endOffset"))
        except (TypeError, ValueError):
            continue
        for topic, partitions in latest.items():
            for partition, offset in partitions.items():
                done = end.get(topic, {}).get(partition)
                if done is not None and offset >= 0 and done >= 0:
                    lag[f"{topic}/{partition}"] = lag.get(f"{topic}/{partition}", 0) + max(0, int(offset) - int(done))
    return lag


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if value is None:
        return {}
    data = json.loads(value) if isinstance(value, str) else value
    return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in (data or {}).items()
            if isinstance(parts, dict)}


def progress_row(job: str, progress: Mapping[str, Any], figures: BatchFigures | None,
                 progress_json: str | None) -> dict[str, Any]:
    """A job_metrics row from a progress (as the dict of its JSON) and the job's figures."""
    f = figures or BatchFigures()
    when = _timestamp(progress.get("timestamp"))
    phases = {k: round(v / 1000.0, 3) for k, v in (progress.get("durationMs") or {}).items()}
    phases.update(f.phase_seconds)
    lag = kafka_lag(progress.get("sources") or [])
    states = progress.get("stateOperators") or []
    sink_rows = (progress.get("sink") or {}).get("numOutputRows")
    output: int | None
    if f.output_rows is not None:
        output = f.output_rows
    else:
        output = sink_rows if sink_rows is not None and sink_rows >= 0 else None
    return {
        "job": job, "day": when.strftime("%Y-%m-%d"), "query_name": progress.get("name"),
        "query_id": str(progress.get("id")), "run_id": str(progress.get("runId")),
        "batch_id": int(progress.get("batchId", -1)), "batch_time": when,
        "duration_s": (progress.get("batchDuration") or 0) / 1000.0,
        "input_rows": int(progress.get("numInputRows") or 0),
        "input_rows_per_s": _finite(progress.get("inputRowsPerSecond")),
        "processed_rows_per_s": _finite(progress.get("processedRowsPerSecond")),
        "output_rows": output, "stored_rows": f.stored_rows, "duplicate_rows": f.duplicate_rows,
        "ephemeral_rows": f.ephemeral_rows, "quarantined_rows": f.quarantined_rows,
        "rule_failures": f.rule_failures, "counts": f.counts or None, "phase_seconds": phases,
        "kafka_lag": lag or None, "kafka_lag_total": sum(lag.values()) if lag else None,
        "state_rows": sum(int(s.get("numRowsTotal") or 0) for s in states) if states else None,
        "state_memory_bytes": sum(int(s.get("memoryUsedBytes") or 0) for s in states) if states else None,
        "progress_json": progress_json,
    }


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x and x not in (float("inf"), float("-inf")) else None


def _timestamp(text: Any) -> dt.datetime:
    """A progress timestamp ("2026-11-23T13:40:00.123Z") as an aware UTC datetime (Spark
    converts aware datetimes exactly, whatever the Python process's local zone)."""
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).astimezone(dt.UTC)
    except ValueError:
        return dt.datetime.now(dt.UTC)


class JobExporter:
    """The `waku_job_*` series of one driver (own registry, like the bridge's)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        q = ["job", "query"]
        p = METRIC_PREFIX
        self.batches = Counter(f"{p}batches", "Micro-batches (runs, for maintain) completed", q, registry=r)
        self.input_rows = Counter(f"{p}input_rows", "Rows read by the job's batches", q, registry=r)
        self.output_rows = Counter(f"{p}output_rows",
                                   "Rows written by the job's batches (store: stored; filter: push records)", q,
                                   registry=r)
        self.stored_rows = Counter(f"{p}stored_rows", "Messages appended to Delta messages", q, registry=r)
        self.duplicate_rows = Counter(f"{p}duplicate_rows", "Valid messages not stored again (already stored)", q,
                                      registry=r)
        self.ephemeral_rows = Counter(f"{p}ephemeral_rows", "Ephemeral messages (never stored)", q, registry=r)
        self.quarantined_rows = Counter(f"{p}quarantined_rows", "Records refused into Delta quarantine", q,
                                        registry=r)
        self.rule_failures = Counter(f"{p}rule_failures", "Records refused, by validation rule", q + ["rule"],
                                     registry=r)
        self.figures = Counter(f"{p}figures",
                               "Other counts of a job's batches (subscription events, push records, deleted rows, ...)",
                               q + ["figure"], registry=r)
        self.input_rate = Gauge(f"{p}input_rows_per_second", "Rows arriving per second (last batch)", q, registry=r)
        self.processed_rate = Gauge(f"{p}processed_rows_per_second", "Rows processed per second (last batch)", q,
                                    registry=r)
        self.batch_seconds = Histogram(f"{p}batch_duration_seconds", "Wall time of a batch", q,
                                       buckets=DURATION_BUCKETS, registry=r)
        self.phase_seconds = Gauge(f"{p}phase_seconds",
                                   "Time of the last batch by phase (progress durationMs and the job's own phases)",
                                   q + ["phase"], registry=r)
        self.lag = Gauge(f"{p}kafka_lag",
                         "Records in Kafka not yet read (latest offset minus the last batch's end offset)",
                         q + ["topic", "partition"], registry=r)
        self.state_rows = Gauge(f"{p}state_rows", "Rows in the query's state stores", q, registry=r)
        self.state_memory = Gauge(f"{p}state_memory_bytes", "Memory used by the query's state stores", q, registry=r)
        self.last_batch = Gauge(f"{p}last_batch_id", "Id of the last completed batch", q, registry=r)
        self.last_progress = Gauge(f"{p}last_progress_timestamp_seconds", "Unix time of the last completed batch", q,
                                   registry=r)
        self.active = Gauge(f"{p}query_active", "1 while the query runs", q, registry=r)
        self.failures = Counter(f"{p}query_failures", "Queries terminated by an exception", q, registry=r)
        self.thread_failures = Gauge(f"{p}thread_failures",
                                     "Times a thread of the job's driver failed and was started again",
                                     ["job", "thread"], registry=r)

    def record(self, row: Mapping[str, Any]) -> None:
        labels = (row["job"], row.get("query_name") or row["job"])
        self.batches.labels(*labels).inc()
        self.input_rows.labels(*labels).inc(row.get("input_rows") or 0)
        for metric, key in ((self.output_rows, "output_rows"), (self.stored_rows, "stored_rows"),
                            (self.duplicate_rows, "duplicate_rows"), (self.ephemeral_rows, "ephemeral_rows"),
                            (self.quarantined_rows, "quarantined_rows")):
            if row.get(key) is not None:
                metric.labels(*labels).inc(max(0, row[key]))
        for rule, n in (row.get("rule_failures") or {}).items():
            self.rule_failures.labels(*labels, rule).inc(n)
        for name, n in (row.get("counts") or {}).items():
            self.figures.labels(*labels, name).inc(max(0, n))
        for gauge, key in ((self.input_rate, "input_rows_per_s"), (self.processed_rate, "processed_rows_per_s"),
                           (self.state_rows, "state_rows"), (self.state_memory, "state_memory_bytes")):
            if row.get(key) is not None:
                gauge.labels(*labels).set(row[key])
        if row.get("duration_s") is not None:
            self.batch_seconds.labels(*labels).observe(row["duration_s"])
        for phase, s in (row.get("phase_seconds") or {}).items():
            self.phase_seconds.labels(*labels, phase).set(s)
        for tp, n in (row.get("kafka_lag") or {}).items():
            topic, _, partition = tp.rpartition("/")
            self.lag.labels(*labels, topic, partition).set(n)
        self.last_batch.labels(*labels).set(row.get("batch_id", 0))
        self.last_progress.labels(*labels).set(row["batch_time"].timestamp())

    def serve(self, host: str, port: int) -> tuple[WSGIServer, int]:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server, server.server_address[1]


class JobMetrics:
    """One job's metrics on its driver: the listener, the exporter and the Delta writer."""

    def __init__(self, spark: SparkSession, settings: JobMetricsSettings,
                 registry: CollectorRegistry | None = None) -> None:
        self.spark = spark
        self.settings = settings
        self.exporter = JobExporter(registry)
        self.port: int | None = None
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._runs: dict[str, str] = {}                  # run id -> query name
        self._figures: dict[tuple[str, int], BatchFigures] = {}
        self._rows: queue.Queue[dict[str, Any]] = queue.Queue()
        self._write_lock = threading.Lock()
        self._listener: Any = None                       # the JVM-side ProgressQueue
        self._events_lock = threading.Lock()
        self._events_thread: SupervisedThread | None = None
        self._server: WSGIServer | None = None
        self._stop = threading.Event()
        self._thread: SupervisedThread | None = None
        self._checkpoints: LogCheckpointer | None = None
        self._rs_path: str | None = delta_rs_location(settings.table)  # None: delta-rs failed, Spark appends
        self._rs_table: DeltaTable | None = None  # delta-rs's handle of the table, kept between appends
        self.rows_written = 0
        self.appended_by: str | None = None       # "delta-rs" or "spark": who made the last append

    @property
    def registry(self) -> CollectorRegistry:
        return self.exporter.registry

    def start(self) -> JobMetrics:
        ensure_job_metrics_table(self.spark, self.settings.table)
        if self.settings.port >= 0:  # OSError when the port is taken
            self._server, self.port = self.exporter.serve(self.settings.host, self.settings.port)
            log.info("job metrics of %s on http://%s:%d/metrics", self.settings.job, self.settings.host, self.port)
        jvm = self.spark._jvm
        assert jvm is not None  # a live session has its gateway
        self._listener = jvm.waku.pipeline.ProgressQueue()
        self.spark._jsparkSession.streams().addListener(self._listener)
        # Both threads are started again after a failure, counted in waku_job_thread_failures.
        self._events_thread = self._supervised(f"job-metrics-events-{self.settings.job}", self._event_loop)
        # Every job appends here: the log is checkpointed beside the appends (Spark's own
        # checkpoints are off on this table, pipeline/spark/log_checkpoints.py).
        self._checkpoints = LogCheckpointer([self.settings.table], spark=self.spark)
        self._thread = self._supervised(f"job-metrics-{self.settings.job}", self._write_loop)
        return self

    def _supervised(self, name: str, loop: Callable[[], None]) -> SupervisedThread:
        thread = SupervisedThread(name, lambda _stop: loop())
        self.exporter.thread_failures.labels(self.settings.job, name).set_function(lambda: thread.failures)
        thread.start()
        return thread

    def watch(self, query_name: str) -> None:
        """Record the query of this name (call before it starts)."""
        with self._lock:
            self._names.add(query_name)

    def add_figures(self, query_name: str, batch_id: int, figures: BatchFigures) -> None:
        """The job's own figures of a batch, merged into that batch's row when its progress arrives."""
        with self._lock:
            self._figures[(query_name, batch_id)] = figures

    def record(self, row: dict[str, Any]) -> None:
        """A row not from a streaming progress (the maintain job's run)."""
        self.exporter.record(row)
        self._rows.put(row)

    # listener side: the events the JVM-side listener queued, taken in order
    def _event_loop(self) -> None:
        said = ""
        while not self._stop.wait(EVENT_POLL_S):
            try:
                self.take_events()
                said = ""
            except Exception as exc:  # noqa: BLE001 - the JVM is going away, or a py4j hiccup
                if str(exc) != said:  # once per distinct error, not every poll
                    log.warning("job metrics: taking listener events failed: %s", exc)
                said = str(exc)

    def take_events(self) -> int:
        """Handle every event the listener has queued so far; returns how many."""
        with self._events_lock:
            if self._listener is None:
                return 0
            lines = [line for line in str(self._listener.drain()).split("\n") if line]
            for line in lines:
                try:
                    if line.startswith(PROGRESS_PREFIX):
                        text = line[len(PROGRESS_PREFIX):-1]
                        self._progress(json.loads(text), text)
                        continue
                    event = json.loads(line)
                    if event["event"] == "started":
                        self._started(event)
                    elif event["event"] == "terminated":
                        self._terminated(event)
                except Exception:
                    log.exception("job metrics: listener event %.200s", line)
            return len(lines)

    def _started(self, event: Mapping[str, Any]) -> None:
        with self._lock:
            if event.get("name") in self._names:
                self._runs[event["runId"]] = event["name"]
                self.exporter.active.labels(self.settings.job, event["name"]).set(1)

    def _progress(self, progress: Mapping[str, Any], text: str) -> None:
        with self._lock:
            name = self._runs.get(progress["runId"])
            if name is None:
                return
            batch_id = progress["batchId"]
            figures = self._figures.pop((name, batch_id), None)
            # figures of batches whose progress never came (a failed attempt) are dropped
            for key in [k for k in self._figures if k[0] == name and k[1] < batch_id]:
                del self._figures[key]
        row = progress_row(self.settings.job, progress, figures, text)
        self.exporter.record(row)
        self._rows.put(row)

    def _terminated(self, event: Mapping[str, Any]) -> None:
        with self._lock:
            name = self._runs.pop(event["runId"], None)
        if name is not None:
            self.exporter.active.labels(self.settings.job, name).set(0)
            if event.get("exception"):
                self.exporter.failures.labels(self.settings.job, name).inc()

    # writer side
    def _write_loop(self) -> None:
        said = ""
        while not self._stop.wait(self.settings.write_interval_s):
            try:
                self.write_pending()
                said = ""
            except Exception as exc:  # noqa: BLE001 - the rows stay queued for the next round
                if str(exc) != said:  # once per distinct error
                    log.warning("job metrics: append to %s failed: %s", self.settings.table, exc)
                said = str(exc)

    def write_pending(self) -> int:
        """Append every queued row to Delta job_metrics in one commit; returns how many."""
        with self._write_lock:
            rows: list[dict[str, Any]] = []
            while True:
                try:
                    rows.append(self._rows.get_nowait())
                except queue.Empty:
                    break
            if not rows:
                return 0
            try:
                if not self._append_with_delta_rs(rows):
                    self._append_with_spark(rows)
            except Exception:
                for r in rows:
                    self._rows.put(r)
                raise
            self.rows_written += len(rows)
            if self._checkpoints is not None:
                self._checkpoints.poke()
            return len(rows)

    def _append_with_delta_rs(self, rows: list[dict[str, Any]]) -> bool:
        """Append `rows` with delta-rs; False when it is not the table's writer here (a table of an
        older contract, or delta-rs failed on it once: Spark from then on)."""
        if self._rs_path is None:
            return False
        import pyarrow as pa
        from deltalake import DeltaTable, PostCommitHookProperties, write_deltalake

        try:
            if self._rs_table is None:
                self._rs_table = DeltaTable(self._rs_path)
            else:
                self._rs_table.update_incremental()
            schema = pa.schema(self._rs_table.schema().to_arrow())
            if not set(JOB_METRICS_COLUMN_NAMES) <= set(schema.names):
                return False  # columns the table lacks: Spark's append merges them in
            data = pa.Table.from_pylist([{name: r.get(name) for name in schema.names} for r in rows], schema=schema)
            # Nothing after the commit: checkpoints and the log's cleanup are the LogCheckpointer's
            # (so an error here means no commit, and Spark's append below adds no row twice).
            write_deltalake(self._rs_table, data, mode="append",
                            post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                                cleanup_expired_logs=False))
        except Exception as exc:  # noqa: BLE001 - any failure of delta-rs: Spark appends from now on
            log.warning("job metrics: delta-rs cannot append to %s (%s: %s); Spark's Delta appends from now on",
                        self.settings.table, type(exc).__name__, exc)
            self._rs_path = self._rs_table = None
            return False
        self.appended_by = "delta-rs"
        return True

    def _append_with_spark(self, rows: list[dict[str, Any]]) -> None:
        df = self.spark.createDataFrame([tuple(r.get(f.name) for f in JOB_METRICS_SCHEMA.fields) for r in rows],
                                        JOB_METRICS_SCHEMA)
        retry_conflicts("append job_metrics",
                        lambda: df.write.format("delta").mode("append").option("mergeSchema", "true")
                        .save(self.settings.table))
        self.appended_by = "spark"

    def flush(self, timeout_s: float = 60.0) -> int:
        """Deliver every event Spark has posted so far, then write the queued rows now."""
        try:
            self.spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(int(timeout_s * 1000))
        except Exception as exc:  # noqa: BLE001 - a timeout: write what arrived
            log.warning("job metrics: listener bus not drained: %s", exc)
        self.take_events()
        return self.write_pending()

    def stop(self) -> None:
        """Flush, then remove the listener and stop the exporter and the writer."""
        self._stop.set()
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - stopping anyway
            log.warning("job metrics: last append failed: %s", exc)
        try:
            if self._listener is not None:
                self.spark._jsparkSession.streams().removeListener(self._listener)
        except Exception:  # noqa: BLE001 - stopping anyway: a JVM already gone has no listener to remove
            pass
        with self._events_lock:
            self._listener = None
        if self._events_thread is not None:
            self._events_thread.stop()
            self._events_thread.join(5)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.stop()
            self._thread.join(5)


def run_row(job: str, run_id: str, began: float, ended: float, *, input_rows: int | None = None,
            output_rows: int | None = None, figures: BatchFigures | None = None,
            report: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A job_metrics row for one run of a batch job (maintain)."""
    f = figures or BatchFigures()
    when = dt.datetime.fromtimestamp(began, dt.UTC)
    duration = max(ended - began, 1e-9)
    return {
        "job": job, "day": when.strftime("%Y-%m-%d"), "query_name": job, "query_id": run_id, "run_id": run_id,
        "batch_id": 0, "batch_time": when, "duration_s": round(ended - began, 3), "input_rows": input_rows,
        "input_rows_per_s": None, "processed_rows_per_s": (input_rows / duration) if input_rows else None,
        "output_rows": output_rows, "stored_rows": None, "duplicate_rows": None, "ephemeral_rows": None,
        "quarantined_rows": None, "rule_failures": f.rule_failures, "counts": f.counts or None,
        "phase_seconds": f.phase_seconds or None, "kafka_lag": None, "kafka_lag_total": None,
        "state_rows": None, "state_memory_bytes": None,
        "progress_json": json.dumps(report, default=str) if report is not None else None,
    }
