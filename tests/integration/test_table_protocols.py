"""Every Delta table has two writers (delta-rs for small appends and MERGEs, Spark's Delta for
large batches and `maintain`: docs/decisions.md), so each table's commit protocol and features
are pinned here: made as the jobs make them (Spark's Delta), written by delta-rs as the jobs write
them, then maintained by Spark — the protocol, the features and the properties the two engines
rely on stay the same, and delta-rs can still write after Spark's OPTIMIZE. A Delta upgrade that
turns on a feature delta-rs cannot write (deletion vectors, column mapping, row tracking...)
fails here, not in production."""
from __future__ import annotations

import pyarrow as pa
import pytest

from core.config import load_config

pytestmark = pytest.mark.integration

# (min reader, min writer, reader features, writer features) of each table as created today.
PINNED = {
    "messages": (1, 2, None, None),
    "quarantine": (1, 2, None, None),
    "job_metrics": (1, 2, None, None),
    "subscriptions": (1, 2, None, None),
}
# Features delta-rs 1.x does not write: none of them may ever be on.
NEVER = ("delta.enableDeletionVectors", "delta.columnMapping.mode", "delta.enableRowTracking",
         "delta.enableTypeWidening", "delta.enableChangeDataFeed")


def protocol_of(path: str) -> tuple:
    from deltalake import DeltaTable

    p = DeltaTable(path).protocol()
    return (p.min_reader_version, p.min_writer_version,
            sorted(p.reader_features) if p.reader_features else None,
            sorted(p.writer_features) if p.writer_features else None)


def test_every_table_keeps_the_protocol_both_writers_share(spark, tmp_path):
    from deltalake import DeltaTable, write_deltalake

    from core.settings import WarehouseSettings
    from pipeline.filter.batch_effect import Effect, Row
    from pipeline.filter.subscriptions import ensure_subscriptions_table
    from pipeline.filter.subscriptions_table import open_table
    from pipeline.store.tables import ensure_store_tables

    warehouse = WarehouseSettings.from_config(load_config([f"warehouse.root={tmp_path}"], environ={}))
    ensure_store_tables(spark, warehouse, update_properties=True)
    ensure_subscriptions_table(spark, warehouse)
    paths = {name: warehouse.table_path(name) for name in PINNED}
    made = {name: protocol_of(path) for name, path in paths.items()}
    assert made == PINNED

    for name, path in paths.items():
        props = DeltaTable(path).metadata().configuration
        assert not [k for k in NEVER if props.get(k) not in (None, "false", "none")], (name, props)

    # delta-rs writes each as the jobs do: an append of a row of the table's own schema (messages,
    # quarantine, job_metrics), the subscriptions MERGE through the job's writer
    for name in ("messages", "quarantine", "job_metrics"):
        table = DeltaTable(paths[name])
        schema = pa.schema(table.schema().to_arrow())
        row = spark.read.format("delta").load(paths[name]).limit(0).toArrow().schema
        assert set(row.names) == set(schema.names), name
        empty = pa.Table.from_pylist([], schema=schema)
        write_deltalake(table, empty, mode="append", partition_by=table.metadata().partition_columns or None)
    open_table(paths["subscriptions"]).write(Effect(
        deleted=[], written=[Row("p", "/waku/2/rs/0/0", "/a/1/b/proto", "B", "v2", "r", 1.0, 1.0)],
        events=1, first_subscribe=1.0))

    # maintain's engine on the same tables: OPTIMIZE, then delta-rs appends again
    for path in paths.values():
        spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    assert {name: protocol_of(path) for name, path in paths.items()} == PINNED
    open_table(paths["subscriptions"]).write(Effect(
        deleted=[("p", "B", "/waku/2/rs/0/0", "/a/1/b/proto")], written=[], events=1, first_subscribe=None))
    assert spark.read.format("delta").load(paths["subscriptions"]).count() == 0
