"""Delta helpers every job uses: table creation that is safe to race, and retries of
optimistic-concurrency conflicts by Delta's typed exceptions."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from delta.exceptions import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    ConcurrentWriteException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from pyspark.sql import SparkSession
from pyspark.sql import types as T

log = logging.getLogger("waku.delta")
R = TypeVar("R")

# Delta's commit conflicts (a concurrent writer won the commit): the operation may be retried.
CONFLICTS: tuple[type[BaseException], ...] = (
    ConcurrentAppendException, ConcurrentDeleteDeleteException, ConcurrentDeleteReadException,
    ConcurrentTransactionException, ConcurrentWriteException, DeltaConcurrentModificationException,
    MetadataChangedException, ProtocolChangedException,
)


def retry_conflicts(what: str, op: Callable[[], R], attempts: int = 5, backoff_s: float = 1.0) -> R:
    """Run a Delta operation, retrying it (with a growing pause) when a concurrent commit wins."""
    for attempt in range(1, attempts + 1):
        try:
            return op()
        except CONFLICTS as exc:
            if attempt == attempts:
                raise
            log.warning("%s: concurrent commit (%s), retrying (%d/%d)", what, type(exc).__name__, attempt, attempts)
            time.sleep(backoff_s * attempt)
    raise AssertionError("unreachable")


# What a creator may see while another creator's first commit is under way.
CREATE_RACES = ("DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION", "DELTA_TABLE_NOT_FOUND")


def ensure_table(spark: SparkSession, path: str, schema: T.StructType,
                 partition_by: list[str] | None = None, properties: dict[str, str] | None = None) -> None:
    """Create the Delta table at path if it does not exist (idempotent). Jobs starting together
    on a fresh warehouse race to create it: the loser's commit conflicts, and its retry finds
    the table there."""
    from delta.tables import DeltaTable

    def create() -> None:
        builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        for key, value in (properties or {}).items():
            builder = builder.property(key, value)
        builder.execute()

    from pyspark.errors import AnalysisException

    for attempt in range(1, 6):
        try:
            retry_conflicts(f"create {path}", create, backoff_s=0.2)
            return
        except AnalysisException as exc:
            # Another creator has written files (or the log directory) but not yet committed the
            # table's first version: seen as a non-empty location, or as a table not found.
            if _condition(exc) not in CREATE_RACES or attempt == 5:
                raise
            time.sleep(0.2 * attempt)


def ensure_properties(spark: SparkSession, path: str, properties: dict[str, str]) -> None:
    """Give an existing table the properties it lacks or holds with another value (a table made
    by an older version); one metadata commit, only when something differs. A metadata commit
    fails every transaction that overlaps it, so only a table's streaming writer calls this,
    at its start, before its own appends begin."""
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, path).detail().select("properties").first()
    assert detail is not None  # detail(): one row
    held = detail[0] or {}
    missing = {k: v for k, v in properties.items() if held.get(k) != v}
    if not missing:
        return
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(missing.items()))
    log.info("table %s: setting %s", path, settings)
    retry_conflicts(f"set properties of {path}",
                    lambda: spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({settings})"), backoff_s=0.2)


def _condition(exc: BaseException) -> str | None:
    """The error condition (class) of a Spark exception."""
    for name in ("getCondition", "getErrorClass"):
        fn = getattr(exc, name, None)
        if fn is not None:
            try:
                return fn()
            except Exception:  # noqa: BLE001 - not a captured JVM error
                return None
    return None
