"""Writing ingest records into the Delta store (`messages`) and `quarantine`.

Each micro-batch is written with Delta's idempotent-write options (txnAppId = the query's
checkpoint identity, txnVersion = the batch id): when Spark re-runs a batch after a crash, Delta
skips the commit it already made, so offsets in the checkpoint plus these options give
exactly-once into both tables.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.config import Config
from pipeline.records import MESSAGE_COLUMNS, decode_ingest_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUARANTINE_COLUMNS = [
    "reason", "raw_value", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp",
]


def split_batch(decoded: "DataFrame") -> tuple["DataFrame", "DataFrame"]:
    """(rows for `messages`, rows for `quarantine` with a reason). Ephemeral messages go to
    neither: they are relayed and pushed, never stored."""
    from pyspark.sql import functions as F

    reason = (
        F.when(~F.col("decoded"), F.lit("undecodable"))
        .when(~F.col("has_message"), F.lit("missing_message"))
    )
    tagged = decoded.withColumn("reason", reason)
    good = tagged.where(F.col("reason").isNull() & ~F.col("ephemeral")).select(*MESSAGE_COLUMNS)
    bad = tagged.where(F.col("reason").isNotNull()).select(*QUARANTINE_COLUMNS)
    return good, bad


def write_batch(batch: "DataFrame", batch_id: int, config: Config, app_id: str) -> None:
    decoded = decode_ingest_records(batch).persist()
    try:
        good, bad = split_batch(decoded)
        for df, table in ((good, "messages"), (bad, "quarantine")):
            (df.write.format("delta").mode("append")
             .option("txnAppId", f"{app_id}:{table}").option("txnVersion", batch_id)
             .save(config.table_path(table)))
    finally:
        decoded.unpersist()
