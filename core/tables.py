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

MESSAGES_PROPERTIES = {
    "delta.dataSkippingStatsColumns": MESSAGES_STATS_COLUMNS,
    # A checkpoint costs ~2 s of a micro-batch on two cores: every 100 commits, not every 20
    # (readers replay at most 100 small JSON commits; bridge B follows the log incrementally).
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 7 days",
    "delta.deletedFileRetentionDuration": "interval 1 days",
}

# Table names under the warehouse root.
MESSAGES = "messages"
QUARANTINE = "quarantine"
SUBSCRIPTIONS = "subscriptions"
JOB_METRICS = "job_metrics"
