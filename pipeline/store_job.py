"""Assembles the store job's streaming query: Kafka source -> write_batch (foreachBatch)."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.config import Config
from pipeline.kafka_io import read_topic_stream
from pipeline.store_tables import ensure_store_tables
from pipeline.store_writer import write_batch


def start_store_query(spark: SparkSession, config: Config, available_now: bool = False,
                      query_name: str = "store") -> StreamingQuery:
    """Start the store query; `available_now` processes what Kafka holds, then stops."""
    ensure_store_tables(spark, config)
    checkpoint = config.checkpoint_path("store")
    max_offsets = config.get("store.max_offsets_per_trigger") or None
    source = read_topic_stream(spark, config, config.get("topics.messages"),
                               starting_offsets=config.get("store.starting_offsets"),
                               max_offsets_per_trigger=max_offsets)

    query: StreamingQuery | None = None

    def process(batch, batch_id: int) -> None:
        write_batch(batch, batch_id, config, str(query.id) if query else "")

    writer = (source.writeStream.queryName(query_name)
              .option("checkpointLocation", checkpoint).foreachBatch(process))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.get('store.trigger_seconds')} seconds")
    query = writer.start()
    return query
