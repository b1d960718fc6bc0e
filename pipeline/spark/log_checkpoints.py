"""Delta log checkpoints written beside a Spark job, with delta-rs (`deltalake`), on a thread of
the driver's Python process: never inside a micro-batch.

Spark's Delta writes a table's checkpoint in the commit that reaches `delta.checkpointInterval`:
six Spark jobs (state reconstruction, checksum, the parquet write) and their planning, 1.5-2.5 s
on an idle two-core machine and 2.7-3.4 s under the store's load, in the batch that commits it.
On a Spark thread beside the batches it is worse (its tasks queue with theirs for the same
cores; docs/decisions.md, session 10). delta-rs writes the same classic checkpoint (the Delta
protocol's format, read by Spark and every Delta reader) in ~20-70 ms of one core, outside the
JVM and its task slots. So the tables a job appends to have Spark's own checkpoints turned off
(`core.tables.NO_SPARK_CHECKPOINTS`), and the job's `LogCheckpointer` writes one at every `interval`-th
version instead. Should delta-rs fail on a table (a table feature it cannot write, say), the
checkpointer asks Spark's Delta for the checkpoint instead, and says so once.

The checkpoint is at the exact multiple of `interval` (the table loaded as of that version), so
several jobs checkpointing one table (every job appends to job_metrics) write the same file.
Expired log files (by the table's `delta.logRetentionDuration`) are deleted after each
checkpoint, as Spark's checkpoint did.

On a local file system, Hadoop's checksum sidecars (`.<file>.crc`, written by Spark beside every
log file) must follow: a stale `._last_checkpoint.crc` (left by a checkpoint Spark wrote earlier)
fails Spark's read of `_last_checkpoint` (and a stale one of a checkpoint file, its reads),
and the sidecars of deleted log files would be left behind. The checkpointer removes them.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.settings import local_path

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession

log = logging.getLogger("waku.delta.checkpoints")

# Versions between two checkpoints: readers replay at most this many small JSON commits.
DEFAULT_INTERVAL = 100
LAST_CHECKPOINT_SIDECAR = "._last_checkpoint.crc"


def remove_stale_sidecars(log_dir: str, version: int | None = None, orphans: bool = False,
                          min_age_s: float = 60.0) -> int:
    """Remove Hadoop checksum sidecars that no longer match their file: `._last_checkpoint.crc`
    and the checkpoint's of `version` (delta-rs rewrote them without one: Spark may have written
    that version's checkpoint before) and, with `orphans`, the sidecars (older than `min_age_s`:
    not one of a file being renamed) of log files that are gone. Returns how many were removed."""
    stale = [LAST_CHECKPOINT_SIDECAR]
    if version is not None:
        stale.append(f".{version:020d}.checkpoint.parquet.crc")
    if orphans:
        now = time.time()
        with os.scandir(log_dir) as entries:
            found = {e.name: e for e in entries}
        stale += [name for name, e in found.items()
                  if name.startswith(".") and name.endswith(".crc") and name[1:-len(".crc")] not in found
                  and now - e.stat().st_mtime >= min_age_s]
    removed = 0
    for name in stale:
        try:
            os.remove(os.path.join(log_dir, name))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


class LogCheckpointer:
    """Checkpoints the Delta logs of `paths` every `interval` versions. `poke()` after a commit
    runs a check on a short-lived thread (one at a time: a poke during a check runs one more
    after it), so the caller never waits. `spark` (optional) is the fallback when delta-rs
    cannot write a table's checkpoint.

    Made at a job's start, before its first commit: the tables that exist then are loaded, and
    their last multiple of the interval counts as done, so the first commit of this run that
    reaches a multiple gets its checkpoint (a restarted job's first commit may be one)."""

    def __init__(self, paths: Sequence[str], interval: int = DEFAULT_INTERVAL,
                 spark: SparkSession | None = None) -> None:
        if interval < 1:
            raise ValueError(f"checkpoint interval must be positive, got {interval}")
        self.paths = list(paths)
        self.interval = interval
        self._spark = spark
        self._tables: dict[str, DeltaTable] = {}
        self._done: dict[str, int] = {}          # the last multiple of interval checkpointed (or seen at start)
        self._spark_fallback: set[str] = set()
        self._failing: dict[str, str] = {}       # the error last logged per table
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again = False
        self.written: list[tuple[str, int, str]] = []  # (path, version, "delta-rs" | "spark")
        self.failures = 0  # times the thread ended in an error (started again by the next poke)
        self._baseline()

    def poke(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._again = True
                return
            # Not a daemon: the interpreter waits for a check under way before it exits. A daemon
            # thread inside delta-rs when the interpreter finalizes crashes the process (SIGSEGV,
            # seen at the end of an available-now run).
            self._thread = threading.Thread(target=self._drain, name="delta-log-checkpoints")
            try:
                self._thread.start()
            except RuntimeError:  # the interpreter is shutting down: no new threads
                self._thread = None
                self.check_all()

    def wait(self, timeout: float = 60.0) -> None:
        """Wait for the check under way, if any."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _drain(self) -> None:
        try:
            while True:
                self.check_all()
                with self._lock:
                    if not self._again:
                        self._thread = None
                        return
                    self._again = False
        except BaseException as exc:  # counted; the next commit's poke starts a new thread
            self.failures += 1
            log.error("delta log checkpoints: thread failed (%d so far; the next commit starts it again): %s: %s",
                      self.failures, type(exc).__name__, exc, exc_info=self.failures == 1)
            with self._lock:
                self._thread = None
                self._again = False

    def check_all(self) -> None:
        for path in self.paths:
            try:
                self.check(path)
            except Exception as exc:  # noqa: BLE001 - a table not created yet, a transient read error
                said = f"{type(exc).__name__}: {exc}"
                if self._failing.get(path) != said:  # once per distinct error, not every batch
                    log.warning("delta log checkpoint of %s: %s (retried after the next commit)", path, said)
                self._failing[path] = said
            else:
                if self._failing.pop(path, None) is not None:
                    log.info("delta log checkpoint of %s: working again", path)

    def _baseline(self) -> None:
        """Load the tables that exist now (see the class): without it, the first check (after this
        run's first commit) would take that commit's version as done. A table not readable yet is
        loaded by its first check."""
        for path in self.paths:
            try:
                self._load(path)
            except Exception as exc:  # noqa: BLE001 - not created yet or unreadable: the first check retries
                log.info("delta log checkpoint of %s: not loaded at start (%s: %s)", path, type(exc).__name__, exc)

    def _load(self, path: str) -> DeltaTable | None:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(path):
            return None
        table = self._tables[path] = DeltaTable(path)
        # At start, the last multiple is taken as done: a checkpoint missed by an earlier run
        # costs readers one more interval of commits until the next one.
        self._done[path] = table.version() // self.interval * self.interval
        return table

    def check(self, path: str) -> int | None:
        """Checkpoint `path` at the latest multiple of the interval not yet done; returns that
        version, or None when there is nothing to do."""
        table = self._tables.get(path)
        if table is None:
            table = self._load(path)
            if table is None:
                return None
        else:
            table.update_incremental()
        latest = table.version()
        target = latest // self.interval * self.interval
        if target <= self._done[path]:
            return None
        how = "spark" if path in self._spark_fallback else "delta-rs"
        began = time.monotonic()
        if how == "delta-rs":
            try:
                table.load_as_version(target)
                table.create_checkpoint()
            except Exception as exc:
                if self._spark is None:
                    raise
                log.warning("delta-rs cannot checkpoint %s (%s: %s); Spark's Delta writes its checkpoints from now on",
                            path, type(exc).__name__, exc)
                self._spark_fallback.add(path)
                how = "spark"
            finally:
                table.update_incremental()
        if how == "spark":
            assert self._spark is not None and self._spark._jvm is not None  # the fallback needs a live session
            self._spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self._spark._jsparkSession, path).checkpoint()
        self._done[path] = target
        self.written.append((path, target, how))
        local = local_path(path)
        if local is not None and how == "delta-rs":
            remove_stale_sidecars(os.path.join(local, "_delta_log"), target)
        log.info("delta log checkpoint of %s at version %d by %s (%.0f ms)", path, target, how,
                 (time.monotonic() - began) * 1000)
        # Log files past the table's retention, before this checkpoint (Spark's checkpoint did the
        # same): the log directory stays the size of its retention.
        table.cleanup_metadata()
        if local is not None:
            remove_stale_sidecars(os.path.join(local, "_delta_log"), orphans=True)
        return target
