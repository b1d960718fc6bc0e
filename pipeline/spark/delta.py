"""Delta helpers every job uses."""
from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import types as T


def ensure_table(spark: SparkSession, path: str, schema: T.StructType,
                 partition_by: list[str] | None = None, properties: dict[str, str] | None = None) -> None:
    """Create the Delta table at path if it does not exist (idempotent, safe to race)."""
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    if partition_by:
        builder = builder.partitionedBy(*partition_by)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    builder.execute()
