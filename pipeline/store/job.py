"""Assembles the store job's streaming query: Kafka source -> write_batch (foreachBatch)."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.spark.kafka_io import read_topic_stream
from pipeline.store.settings import StoreJobSettings
from pipeline.store.tables import ensure_store_tables
from pipeline.store.writer import write_batch


def start_store_query(spark: SparkSession, settings: StoreJobSettings, available_now: bool = False,
                      query_name: str = "store") -> StreamingQuery:
    """Start the store query; `available_now` processes what Kafka holds, then stops."""
    ensure_store_tables(spark, settings.warehouse)
    checkpoint = settings.warehouse.checkpoint_path("store")
    source = read_topic_stream(spark, settings.kafka, settings.topic,
                               starting_offsets=settings.starting_offsets,
                               max_offsets_per_trigger=settings.max_offsets_per_trigger or None)

    query: StreamingQuery | None = None

    def process(batch, batch_id: int) -> None:
        write_batch(batch, batch_id, settings, str(query.id) if query else "")

    writer = (source.writeStream.queryName(query_name)
              .option("checkpointLocation", checkpoint).foreachBatch(process))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_seconds} seconds")
    query = writer.start()
    return query
