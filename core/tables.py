"""The Delta `messages` table as a data contract: its columns, their types and nullability,
its partitioning and table properties. The Spark store job writes it
(pipeline/store/tables.py derives the Spark schema from this) and the online store reader
reads it (ingest/store/reader.py derives the Arrow schema); neither side knows the other.

Types are named once here: double, binary, string, long, int, timestamp.
"""
from __future__ import annotations

# (name, type, nullable), in the order the store job writes them.
MESSAGES_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("received_time", "double", False),
    ("digest", "binary", False),
    ("message_hash", "binary", False),
    ("pubsub_topic", "string", False),
    ("content_topic", "string", False),
    ("payload", "binary", True),
    ("version", "long", True),
    ("timestamp", "long", True),
    ("meta", "binary", True),
    ("rate_limit_proof", "binary", True),
    ("source", "string", True),
    ("bridge_id", "string", True),
    ("kafka_topic", "string", True),
    ("kafka_partition", "int", True),
    ("kafka_offset", "long", True),
    ("kafka_timestamp", "timestamp", True),
    ("received_date", "string", False),
)

MESSAGES_PARTITION_BY = ("received_date",)

# Statistics only where queries filter: the cursor's received_time and the topics (Delta keeps
# no statistics for binary columns, so digest and hash cannot have any).
MESSAGES_STATS_COLUMNS = "received_time,pubsub_topic,content_topic,timestamp"

# Spark's Delta checkpoints a table in the commit whose version is a multiple of
# delta.checkpointInterval (2-3 s of that micro-batch on two cores). The tables the jobs append
# to have it this high (never, in practice: 31 years at a commit a second), and the job writes
# their checkpoints beside its batches with delta-rs, every 100 versions
# (pipeline/spark/log_checkpoints.py): readers replay at most 100 small JSON commits.
NO_SPARK_CHECKPOINTS = {"delta.checkpointInterval": "1000000000"}

# The log of a table a job commits to every micro-batch: its checkpoints as above, and log files
# kept an hour (3 files a commit: the commit, Delta's .crc and Hadoop's sidecar of that; at a
# commit a second, 10,800 entries in _delta_log). Every
# reader lists that directory on each update, at a cost per entry: Spark's Delta ~10 us on a
# local file system (a readdir with our LocalDirLogStore: nothing measurable at 100,000),
# delta-rs ~0.9 us; 7 days of a commit a second would have made Spark's commits take seconds
# within hours (docs/decisions.md, session 19). Time travel reaches an hour back; a Delta stream
# reading the table must not stop longer. Delta requires the removed files' retention to be at
# most the log's: an hour too, which only bounds a VACUUM without a retention of its own
# (`maintain` vacuums with store.vacuum_retain_hours).
JOB_LOG_PROPERTIES = {**NO_SPARK_CHECKPOINTS, "delta.logRetentionDuration": "interval 1 hours",
                      "delta.deletedFileRetentionDuration": "interval 1 hours"}

MESSAGES_PROPERTIES = {
    "delta.dataSkippingStatsColumns": MESSAGES_STATS_COLUMNS,
    **JOB_LOG_PROPERTIES,
}

# Table names under the warehouse root.
MESSAGES = "messages"
QUARANTINE = "quarantine"
SUBSCRIPTIONS = "subscriptions"
JOB_METRICS = "job_metrics"
