"""The message hash and store digest of core/message.py as Spark column expressions.

Only built-in functions (no Python UDF), so they run in the JVM; tests/unit/test_hashing.py
checks them against the Python forms on test vectors and random messages.
"""
from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def _utf8(col: Column) -> Column:
    return F.encode(col, "UTF-8")


def message_hash_col(
    pubsub_topic: Column,
    payload: Column,
    content_topic: Column,
    meta: Column,
    timestamp: Column,
) -> Column:
    """Binary column: the message hash. `timestamp` is a nullable bigint (nanoseconds)."""
    empty = F.lit(b"")
    # hex() of a bigint is its two's complement without leading zeros; pad to 16 digits.
    ts_bytes = F.unhex(F.lpad(F.hex(F.coalesce(timestamp.cast("bigint"), F.lit(0).cast("bigint"))), 16, "0"))
    data = F.concat(
        _utf8(F.coalesce(pubsub_topic, F.lit(""))),
        F.coalesce(payload, empty),
        _utf8(F.coalesce(content_topic, F.lit(""))),
        F.coalesce(meta, empty),
        ts_bytes,
    )
    return F.unhex(F.sha2(data, 256))


def store_digest_col(content_topic: Column, payload: Column) -> Column:
    """Binary column: the store Index digest."""
    data = F.concat(_utf8(F.coalesce(content_topic, F.lit(""))), F.coalesce(payload, F.lit(b"")))
    return F.unhex(F.sha2(data, 256))
