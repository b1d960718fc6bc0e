"""The two identifiers of a stored message, in Python and as Spark column expressions.

- message hash (14/WAKU2-MESSAGE): sha256(pubsub_topic || payload || content_topic || meta ||
  timestamp as 8 bytes big-endian, 8 zero bytes when absent); used for de-duplication.
- store digest (13/WAKU2-STORE Index): sha256(content_topic || payload); used for paging order.

The Spark forms use only built-in functions (no Python UDF), so they run in the JVM.
"""
from __future__ import annotations

import hashlib
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def message_hash(
    pubsub_topic: str,
    payload: bytes,
    content_topic: str,
    meta: bytes | None,
    timestamp: int | None,
) -> bytes:
    h = hashlib.sha256()
    h.update(pubsub_topic.encode())
    h.update(payload)
    h.update(content_topic.encode())
    if meta:
        h.update(meta)
    h.update(struct.pack(">q", timestamp or 0))
    return h.digest()


def store_digest(content_topic: str, payload: bytes) -> bytes:
    return hashlib.sha256(content_topic.encode() + payload).digest()


def _utf8(col: "Column") -> "Column":
    from pyspark.sql import functions as F

    return F.encode(col, "UTF-8")


def message_hash_col(
    pubsub_topic: "Column",
    payload: "Column",
    content_topic: "Column",
    meta: "Column",
    timestamp: "Column",
) -> "Column":
    """Binary column: the message hash. `timestamp` is a nullable bigint (nanoseconds)."""
    from pyspark.sql import functions as F

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


def store_digest_col(content_topic: "Column", payload: "Column") -> "Column":
    """Binary column: the store Index digest."""
    from pyspark.sql import functions as F

    data = F.concat(_utf8(F.coalesce(content_topic, F.lit(""))), F.coalesce(payload, F.lit(b"")))
    return F.unhex(F.sha2(data, 256))
