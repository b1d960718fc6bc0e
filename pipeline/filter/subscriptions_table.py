"""The Delta table `subscriptions` as the subscriptions job reads and writes it: the rows a batch
can touch, one MERGE of a batch's effect, the TTL's DELETE and the smallest `last_refresh`.

One writer, delta-rs (`deltalake`), on a local disk and an object store alike: a MERGE of 20
rows took 11-24 ms of wall, one of 20,000 23-33 ms of CPU (2026-11-30), where Spark's Delta MERGE
on the job's C1 driver took ~1-2 CPU-seconds (a Spark job, its planning and a Delta transaction
in the JVM). The subscriptions job is the table's only writer of rows; `maintain` (Spark's Delta)
compacts and vacuums it, and on an object store both commit with S3's conditional PUT (delta-rs
by itself, Spark's Delta through `S3ConditionalLogStore`). delta-rs reads the store's `AWS_*`
settings from the environment the job's entry point sets.

One commit per batch that changes anything; each call reads the table's latest version. The
filter job reads the table with Spark.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import types as T

from core.settings import delta_rs_location
from pipeline.filter.batch_effect import Effect, Row

if TYPE_CHECKING:
    from deltalake import DeltaTable as RsTable

SUBSCRIPTIONS_SCHEMA = T.StructType([
    T.StructField("peer_id", T.StringType(), False),
    T.StructField("pubsub_topic", T.StringType(), False),
    T.StructField("content_topic", T.StringType(), False),
    T.StructField("bridge_id", T.StringType(), False),
    T.StructField("protocol", T.StringType(), True),
    T.StructField("request_id", T.StringType(), True),
    T.StructField("subscribed_time", T.DoubleType(), True),   # latest SUBSCRIBE naming it (Unix s, bridge clock)
    T.StructField("last_refresh", T.DoubleType(), False),     # last SUBSCRIBE / PING
])
COLUMNS = tuple(SUBSCRIPTIONS_SCHEMA.fieldNames())
KEY_COLUMNS = ("peer_id", "bridge_id", "pubsub_topic", "content_topic")
KEY_MATCH = " AND ".join(f"t.{c} = s.{c}" for c in KEY_COLUMNS)
# The MERGE source: a row to write ("put") or a key to delete ("delete"), in the table's column
# order plus `action`.
CHANGES_SCHEMA = T.StructType(
    [T.StructField(f.name, f.dataType, f.name not in KEY_COLUMNS) for f in SUBSCRIPTIONS_SCHEMA.fields]
    + [T.StructField("action", T.StringType(), False)])
# The MERGE's clauses: a "put" inserts every column, or updates the non-key ones of a matched
# row; a "delete" deletes a matched row.
INSERT_VALUES = {c: f"s.{c}" for c in COLUMNS}
UPDATE_VALUES = {c: v for c, v in INSERT_VALUES.items() if c not in KEY_COLUMNS}
PUT, DELETE = "s.action = 'put'", "s.action = 'delete'"


def _changes(effect: Effect) -> list[tuple[object, ...]]:
    """The MERGE source's rows (CHANGES_SCHEMA) of a batch's effect."""
    deleted = [(peer, pubsub, content, bridge, None, None, None, None, "delete")
               for peer, bridge, pubsub, content in effect.deleted]
    return deleted + [(*(getattr(r, c) for c in COLUMNS), "put") for r in effect.written]


class SubscriptionsTable(Protocol):
    def touched_rows(self, peers: Sequence[str], bridges: Sequence[str]) -> Iterable[Row]:
        """The rows of these peers (at any bridge) and of these bridges (any peer)."""

    def write(self, effect: Effect) -> None:
        """One MERGE on the full key: the effect's deleted keys and written rows."""

    def expire(self, cutoff: float) -> None:
        """Delete the rows last refreshed before `cutoff` (Unix seconds)."""

    def earliest_refresh(self) -> float:
        """The smallest `last_refresh` (+inf when the table is empty)."""


def open_table(path: str) -> SubscriptionsTable:
    """The table's writer (the table must exist: `ensure_subscriptions_table`)."""
    return RustSubscriptions(delta_rs_location(path))


class RustSubscriptions:
    """The table through delta-rs: one `DeltaTable` opened once, brought to the latest version
    before each operation (cheap: it reads only the commits since)."""

    def __init__(self, location: str) -> None:
        self._location = location
        self._table: RsTable | None = None

    def _latest(self) -> RsTable:
        from deltalake import DeltaTable

        if self._table is None:
            self._table = DeltaTable(self._location)
        else:
            self._table.update_incremental()
        return self._table

    def touched_rows(self, peers: Sequence[str], bridges: Sequence[str]) -> Iterable[Row]:
        import pyarrow as pa
        import pyarrow.compute as pc

        # Read whole, then filtered: a filter inside the scan fails once delta-rs's MERGE has
        # written a file (its statistics typed as string views against string columns: Arrow
        # cannot compare them; deltalake 1.6.6).
        rows = self._latest().to_pyarrow_dataset().to_table(columns=list(COLUMNS))
        keep = pc.or_(pc.is_in(rows["peer_id"], value_set=pa.array(peers, rows.schema.field("peer_id").type)),
                      pc.is_in(rows["bridge_id"], value_set=pa.array(bridges, rows.schema.field("bridge_id").type)))
        return [Row(**r) for r in rows.filter(keep).to_pylist()]

    def write(self, effect: Effect) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(CHANGES_SCHEMA)
        rows = [dict(zip(schema.names, r, strict=True)) for r in _changes(effect)]
        source = pa.Table.from_pylist(rows, schema=schema)
        (self._latest().merge(source, KEY_MATCH, source_alias="s", target_alias="t", streamed_exec=False)
         .when_matched_delete(predicate=DELETE)
         .when_matched_update(UPDATE_VALUES, predicate=PUT)
         .when_not_matched_insert(INSERT_VALUES, predicate=PUT)
         .execute())

    def expire(self, cutoff: float) -> None:
        self._latest().delete(f"last_refresh < {cutoff!r}")

    def earliest_refresh(self) -> float:
        import pyarrow.compute as pc

        column = self._latest().to_pyarrow_dataset().to_table(columns=["last_refresh"]).column(0)
        first = pc.min(column).as_py()
        return math.inf if first is None else float(first)
