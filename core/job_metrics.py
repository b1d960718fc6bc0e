"""The job metrics contract: what every Spark job's driver records (pipeline/spark/metrics.py)
and what the ops dashboard (tools/dashboard.py) and Grafana (conf/grafana/waku.json) read.

- Delta `job_metrics`: one row per micro-batch of a streaming query (from its
  StreamingQueryListener progress, merged with the job's own figures for that batch) and one row
  per run of the batch job `maintain`; partitioned by `job` and `day` (UTC day of `batch_time`).
- Prometheus: each job's driver serves `waku_job_*` series labelled `job` and `query` (the
  query's name), in the naming scheme of the bridge's `waku_bridge_*` (ingest/metrics.py).
"""
from __future__ import annotations

JOBS = ("store", "subscriptions", "filter", "maintain")

# (name, type, nullable); types as in core/tables.py, plus map<string,long|double>.
JOB_METRICS_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("job", "string", False),
    ("day", "string", False),                 # yyyy-MM-dd (UTC) of batch_time
    ("query_name", "string", True),
    ("query_id", "string", True),
    ("run_id", "string", True),
    ("batch_id", "long", False),
    ("batch_time", "timestamp", False),       # the progress's trigger time (UTC)
    ("duration_s", "double", True),           # the batch's wall time
    ("input_rows", "long", True),
    ("input_rows_per_s", "double", True),
    ("processed_rows_per_s", "double", True),
    ("output_rows", "long", True),            # rows the batch wrote (store: stored; filter: push records)
    ("stored_rows", "long", True),            # store only
    ("duplicate_rows", "long", True),         # store only
    ("ephemeral_rows", "long", True),         # store only
    ("quarantined_rows", "long", True),       # store only
    ("rule_failures", "map<string,long>", True),   # store: refused rows per validation rule
    ("counts", "map<string,long>", True),     # other figures of the job (events, pushes, deleted rows...)
    ("phase_seconds", "map<string,double>", True),  # progress durationMs by phase, and the job's own phases
    ("kafka_lag", "map<string,long>", True),  # "<topic>/<partition>" -> latest offset minus the batch's end offset
    ("kafka_lag_total", "long", True),
    ("state_rows", "long", True),             # rows in state stores (stateOperators)
    ("state_memory_bytes", "long", True),
    ("progress_json", "string", True),        # the StreamingQueryProgress as JSON (maintain: its report)
)
JOB_METRICS_PARTITION_BY = ("job", "day")
JOB_METRICS_COLUMN_NAMES = tuple(name for name, _, _ in JOB_METRICS_COLUMNS)

# Prometheus names of the job exporter (without the _total of counters).
METRIC_PREFIX = "waku_job_"
