"""Decoding the pipeline's Kafka records into flat columns, in the JVM (no Python UDF)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.spark.columns import message_hash_col, store_digest_col
from pipeline.spark.protobuf import from_protobuf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

INGEST_RECORD = "waku.pipeline.v1.IngestRecord"
PUSH_RECORD = "waku.pipeline.v1.PushRecord"

# Columns of a decoded ingest record, in the order the store writes them.
MESSAGE_COLUMNS = [
    "received_time", "digest", "message_hash", "pubsub_topic", "content_topic", "payload",
    "version", "timestamp", "meta", "rate_limit_proof", "ephemeral", "source", "bridge_id",
    "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp",
]


def decode_ingest_records(kafka_df: DataFrame) -> DataFrame:
    """Kafka rows of waku.messages -> one row per record with the message's fields flattened,
    its digest and message hash, the Kafka lineage, the raw value and `decoded` (false when the
    value is not an IngestRecord; such rows keep only raw value and lineage)."""
    from pyspark.sql import functions as F

    rec = from_protobuf(F.col("value"), INGEST_RECORD, kafka_df.sparkSession)
    df = kafka_df.select(
        F.col("value").alias("raw_value"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
        rec.alias("r"),
    )
    msg = F.col("r.message")
    # Old peers send the seconds-double timestamp (field 4); keep ns as the one timestamp.
    timestamp = F.coalesce(
        msg["timestamp"],
        # try_cast: NaN, infinities and values beyond int64 are no timestamp, never a failed
        # batch (a plain cast stops the query on one hostile record: CAST_OVERFLOW)
        F.when(msg["legacy_timestamp"].isNotNull(), (msg["legacy_timestamp"] * F.lit(1e9)).try_cast("bigint")),
    )
    df = df.select(
        "raw_value", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp",
        F.col("r").isNotNull().alias("decoded"),
        F.col("r.received_time").alias("received_time"),
        F.col("r.pubsub_topic").alias("pubsub_topic"),
        msg["content_topic"].alias("content_topic"),
        msg["payload"].alias("payload"),
        F.coalesce(msg["version"].cast("bigint"), F.lit(0).cast("bigint")).alias("version"),
        timestamp.alias("timestamp"),
        msg["meta"].alias("meta"),
        msg["rate_limit_proof"].alias("rate_limit_proof"),
        F.coalesce(msg["ephemeral"], F.lit(False)).alias("ephemeral"),
        F.col("r.source").alias("source"),
        F.col("r.bridge_id").alias("bridge_id"),
        msg.isNotNull().alias("has_message"),
    )
    return df.withColumn(
        "digest", store_digest_col(F.col("content_topic"), F.col("payload"))
    ).withColumn(
        "message_hash",
        message_hash_col(F.col("pubsub_topic"), F.col("payload"), F.col("content_topic"),
                         F.col("meta"), F.col("timestamp")),
    )
