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
    min_offsets_per_trigger: int | None = None,
    max_trigger_delay_s: float | None = None,
) -> DataFrame:
    """A streaming DataFrame of (key, value, topic, partition, offset, timestamp).

    `min_offsets_per_trigger` (with `max_trigger_delay_s`): a batch cadence that follows the
    load: a trigger that finds fewer new records waits, until that many have arrived or the delay
    has passed since the last batch (Spark's minOffsetsPerTrigger / maxTriggerDelay; not for an
    available-now query)."""
    reader = spark.readStream.format("kafka").options(**kafka_options(kafka))
    reader = reader.option("subscribe", topic).option("startingOffsets", starting_offsets)
    # A deleted/compacted offset range is reported, not silently skipped past.
    reader = reader.option("failOnDataLoss", "true")
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    if min_offsets_per_trigger:
        reader = reader.option("minOffsetsPerTrigger", str(min_offsets_per_trigger))
        if max_trigger_delay_s is not None:
            reader = reader.option("maxTriggerDelay", f"{int(max_trigger_delay_s * 1000)}ms")
    return reader.load()


def read_topic_batch(spark: SparkSession, kafka: KafkaSettings, topic: str) -> DataFrame:
    """The whole topic as a batch DataFrame (tests, back-fills)."""
    return (
        spark.read.format("kafka").options(**kafka_options(kafka))
        .option("subscribe", topic).option("startingOffsets", "earliest")
        .option("endingOffsets", "latest").load()
    )
