"""The Delta tables the store job writes: their schemas, layout and table properties.

Layout of `messages` (justified with measurements in docs/store-layout.md):
- partitioned by `received_date` (UTC day of received_time): retention drops whole days and a
  cursor range touches one or two partitions;
- inside a partition, each micro-batch writes files range-partitioned on received_time and
  sorted by (received_time, digest), so file min/max statistics on received_time are tight and
  a cursor range plus topic filter skips almost every file; `maintain` compacts small files
  keeping that order (OPTIMIZE ... ZORDER BY received_time: on one column, a sort);
- statistics are collected only on the columns queries filter on (not on payload).
"""
from __future__ import annotations

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from core.settings import WarehouseSettings
from core.tables import JOB_LOG_PROPERTIES, MESSAGES_COLUMNS, MESSAGES_PARTITION_BY, MESSAGES_PROPERTIES
from pipeline.spark.delta import ensure_properties, ensure_table
from pipeline.spark.metrics import ensure_job_metrics_table

_SPARK_TYPES = {"double": T.DoubleType(), "binary": T.BinaryType(), "string": T.StringType(),
                "long": T.LongType(), "int": T.IntegerType(), "timestamp": T.TimestampType()}

# The contract of core/tables.py as a Spark schema.
MESSAGES_SCHEMA = T.StructType([T.StructField(name, _SPARK_TYPES[kind], nullable)
                                for name, kind, nullable in MESSAGES_COLUMNS])

QUARANTINE_SCHEMA = T.StructType([
    T.StructField("reason", T.StringType(), False),
    T.StructField("raw_value", T.BinaryType(), True),
    T.StructField("kafka_topic", T.StringType(), True),
    T.StructField("kafka_partition", T.IntegerType(), True),
    T.StructField("kafka_offset", T.LongType(), True),
    T.StructField("kafka_timestamp", T.TimestampType(), True),
    T.StructField("quarantined_at", T.TimestampType(), True),
])

# Quarantine takes a commit in every batch that refused a record: its log checkpoints, like
# those of `messages` and the untimed index, are written beside the batches by the store job
# (pipeline/spark/log_checkpoints.py), not by Spark's Delta inside one (Delta's default of 10
# put a ~2 s checkpoint in every tenth batch).
QUARANTINE_PROPERTIES = dict(JOB_LOG_PROPERTIES)

# The untimed index: the hash (and first receive time) of every stored message without a sender
# timestamp. Such a message can come again at any time, so its copies are checked against the
# whole retention; this narrow table (32 bytes a row, only untimed messages) is what that check
# reads, instead of every file of `messages` that holds an untimed row (docs/decisions.md).
UNTIMED_INDEX = "untimed_hashes"
# Appended in every batch that stores an untimed message: its log kept like the others'.
UNTIMED_PROPERTIES = dict(JOB_LOG_PROPERTIES)
UNTIMED_SCHEMA = T.StructType([
    T.StructField("message_hash", T.BinaryType(), False),
    T.StructField("received_time", T.DoubleType(), False),
])


def untimed(timestamp: Column) -> Column:
    """A stored message without sender timestamp (absent or 0)."""
    return timestamp.isNull() | (timestamp == F.lit(0))


def ensure_store_tables(spark: SparkSession, warehouse: WarehouseSettings, update_properties: bool = False) -> None:
    """Create the store's tables where missing. `update_properties` (the store job, at its start:
    their one appender) also brings the properties of tables made by an older version up to date."""
    ensure_table(spark, warehouse.table_path("messages"), MESSAGES_SCHEMA, list(MESSAGES_PARTITION_BY),
                 MESSAGES_PROPERTIES)
    ensure_table(spark, warehouse.table_path("quarantine"), QUARANTINE_SCHEMA, properties=QUARANTINE_PROPERTIES)
    ensure_job_metrics_table(spark, warehouse.table_path("job_metrics"))
    ensure_untimed_index(spark, warehouse)
    if update_properties:
        ensure_properties(spark, warehouse.table_path("messages"), MESSAGES_PROPERTIES)
        ensure_properties(spark, warehouse.table_path("quarantine"), QUARANTINE_PROPERTIES)
        ensure_properties(spark, warehouse.table_path(UNTIMED_INDEX), UNTIMED_PROPERTIES)


def ensure_untimed_index(spark: SparkSession, warehouse: WarehouseSettings) -> None:
    """Create the untimed index with its content in one commit: the untimed rows `messages`
    already holds (one pass over the table at the first start of a store job that has the
    index, e.g. after an upgrade; nothing on a new warehouse). Created atomically with its
    content, so it is never there but incomplete."""
    from delta.tables import DeltaTable

    path = warehouse.table_path(UNTIMED_INDEX)
    if DeltaTable.isDeltaTable(spark, path):
        return
    held = (spark.read.format("delta").load(warehouse.table_path("messages"))
            .where(untimed(F.col("timestamp")))
            .groupBy("message_hash").agg(F.min("received_time").alias("received_time")))
    try:
        held.select(*UNTIMED_SCHEMA.fieldNames()).coalesce(1).write.format("delta").mode(
            "errorifexists").save(path)
    except Exception:
        # The loser of two jobs starting together sees the table there, or a concurrent first
        # commit; either way the winner's table, with the same content, is in place.
        if not DeltaTable.isDeltaTable(spark, path):
            raise
