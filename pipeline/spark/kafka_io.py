"""Spark's Kafka source and sink options for the pipeline's topics."""
from __future__ import annotations

from typing import TYPE_CHECKING

from core.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def kafka_options(kafka: KafkaSettings) -> dict[str, str]:
    """Options every Kafka source/sink gets: bootstrap servers plus client settings (kafka.*)."""
    opts = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    opts.update({f"kafka.{k}": v for k, v in kafka.client_options.items()})
    return opts


def read_topic_stream(
    spark: SparkSession,
    kafka: KafkaSettings,
    topic: str,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
) -> DataFrame:
    """A streaming DataFrame of (key, value, topic, partition, offset, timestamp)."""
    reader = spark.readStream.format("kafka").options(**kafka_options(kafka))
    reader = reader.option("subscribe", topic).option("startingOffsets", starting_offsets)
    # A deleted/compacted offset range is reported, not silently skipped past.
    reader = reader.option("failOnDataLoss", "true")
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def read_topic_batch(spark: SparkSession, kafka: KafkaSettings, topic: str) -> DataFrame:
    """The whole topic as a batch DataFrame (tests, back-fills)."""
    return (
        spark.read.format("kafka").options(**kafka_options(kafka))
        .option("subscribe", topic).option("startingOffsets", "earliest")
        .option("endingOffsets", "latest").load()
    )
