"""The store job's append of a batch's new rows to `messages`: one commit, by delta-rs for a small
batch, by Spark's Delta for a large one: chosen by the batch's size, never by where the table lives
(a local disk and an object store alike).

* **delta-rs** (`deltalake`): the rows come to the driver as Arrow (one Spark job over the cached
  batch, already sorted by (received_time, digest)) and delta-rs writes them, one file per
  `received_date`, with statistics on `delta.dataSkippingStatsColumns` and one commit, in ~5-16 ms
  of the driver's CPU for 1,500 rows. Spark's Parquet write and Delta transaction took 0.17-0.28 s
  of wall for the same batch (2026-11-30, docs/decisions.md). Only up to
  `store.delta_rs_append_max_rows` rows: larger batches are written by Spark's tasks, in
  parallel and without bringing the payloads to the driver.
* **Spark's Delta** for larger batches, and from the first time delta-rs fails on the table.

On an object store both commit with S3's conditional PUT (delta-rs by itself, Spark's Delta
through `S3ConditionalLogStore`), so either is safe beside the maintain job's commits
(tests/integration/test_store_on_s3.py); delta-rs reads the store's `AWS_*` settings from the
environment the job's entry point sets (pipeline/spark/entrypoint.setup_job).

A delta-rs failure never adds a row twice and never loses one: every delta-rs commit carries a
token in its commitInfo; after a failure the versions committed since are read, and the rows
are appended by Spark only when none of them carries the token (delta-rs writes nothing after
the commit: checkpoints and log cleanup are the LogCheckpointer's).
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.settings import delta_rs_location

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

log = logging.getLogger("waku.store")

TOKEN_KEY = "waku.append"
CONFLICT_RETRIES = 3  # delta-rs appends tried again after losing to a concurrent commit


class MessagesAppender:
    """Appends to the `messages` table at `path`; kept by the query across its batches (the
    delta-rs table is opened once and brought up to date before each append)."""

    def __init__(self, path: str, delta_rs_max_rows: int, no_dictionary: Sequence[str] = ()) -> None:
        """`no_dictionary`: the columns written without a Parquet dictionary (those Spark's
        writer has `parquet.enable.dictionary#<column>` false for: conf/spark-defaults.conf)."""
        self.path = path
        self.delta_rs_max_rows = delta_rs_max_rows
        self.no_dictionary = tuple(no_dictionary)
        self._rs_path = delta_rs_location(path) if delta_rs_max_rows > 0 else None
        self._table: DeltaTable | None = None

    def append(self, rows: DataFrame, count: int) -> str:
        """Append `rows` (`count` of them, in the table's columns and file order) in one commit;
        returns who wrote them: "delta-rs" or "spark"."""
        if self._rs_path is not None and count <= self.delta_rs_max_rows:
            if self._append_with_delta_rs(rows.toArrow()):
                return "delta-rs"
        rows.write.format("delta").mode("append").save(self.path)
        return "spark"

    def _latest(self, location: str) -> DeltaTable:
        from deltalake import DeltaTable

        if self._table is None:
            self._table = DeltaTable(location)
        else:
            self._table.update_incremental()
        return self._table

    def _append_with_delta_rs(self, data: pa.Table) -> bool:
        """Append with delta-rs; False (and Spark's Delta from now on) when it failed without
        committing. A commit that lost to a concurrent one (delta-rs counts every file of its
        snapshot as read, so maintain's DELETE removing any of them conflicts) is tried again on
        the new version, up to CONFLICT_RETRIES times."""
        for _ in range(CONFLICT_RETRIES):
            outcome = self._try_delta_rs(data)
            if outcome != "conflict":
                return outcome == "committed"
        log.warning("messages: delta-rs lost %d commits in a row to concurrent ones; Spark's Delta appends",
                    CONFLICT_RETRIES)
        return False

    def _try_delta_rs(self, data: pa.Table) -> str:
        """One delta-rs append: "committed", "conflict" (nothing committed; delta-rs is kept) or
        "failed" (nothing committed; Spark's Delta from now on)."""
        import pyarrow as pa
        from deltalake import (
            ColumnProperties,
            CommitProperties,
            PostCommitHookProperties,
            WriterProperties,
            write_deltalake,
        )
        from deltalake.exceptions import CommitFailedError

        assert self._rs_path is not None
        location, token, before = self._rs_path, uuid.uuid4().hex, None
        try:
            table = self._latest(location)
            before = table.version()
            data = data.cast(pa.schema(table.schema().to_arrow()).remove_metadata())
            plain = ColumnProperties(dictionary_enabled=False)
            write_deltalake(table, data, mode="append", partition_by=table.metadata().partition_columns,
                            writer_properties=WriterProperties(
                                column_properties={c: plain for c in self.no_dictionary}),
                            commit_properties=CommitProperties(custom_metadata={TOKEN_KEY: token}),
                            post_commithook_properties=PostCommitHookProperties(create_checkpoint=False,
                                                                                cleanup_expired_logs=False))
            return "committed"
        except Exception as exc:  # noqa: BLE001 - any failure of delta-rs: Spark appends from now on
            was_committed = before is not None and committed(location, before, token)
            if not was_committed and isinstance(exc, CommitFailedError) and "concurrent" in str(exc):
                log.info("messages: a delta-rs append lost to a concurrent commit (%s); trying again", exc)
                self._table = None  # reread at the new version
                return "conflict"
            self._rs_path = self._table = None
            if was_committed:
                log.warning("messages: delta-rs committed, then failed (%s: %s); Spark's Delta appends from now on",
                            type(exc).__name__, exc)
                return "committed"
            log.warning("messages: delta-rs cannot append to %s (%s: %s); Spark's Delta appends from now on",
                        self.path, type(exc).__name__, exc)
            return "failed"


def committed(location: str, before: int, token: str) -> bool:
    """Whether a version of the table after `before` carries `token` in its commitInfo."""
    from deltalake import DeltaTable

    table = DeltaTable(location)
    newer = table.version() - before
    return newer > 0 and any(c.get(TOKEN_KEY) == token for c in table.history(newer))
