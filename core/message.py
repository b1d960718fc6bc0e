"""The Waku message model's two identifiers, in plain Python (the Spark column forms are in
pipeline/spark/columns.py and are tested against these).

- message hash (14/WAKU2-MESSAGE): sha256(pubsub_topic || payload || content_topic || meta ||
  timestamp as 8 bytes big-endian, 8 zero bytes when absent); the store's de-duplication key
  and the Kafka key of every ingest record.
- store digest (13/WAKU2-STORE Index): sha256(content_topic || payload); the paging order.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.config import Config
    from schemas.waku_message_pb2 import WakuMessage

# 14/WAKU2-MESSAGE limits of the reference nodes (configurable: limits.*).
MAX_MESSAGE_BYTES = 153_600  # 150 KiB
MAX_META_BYTES = 64


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


def timestamp_ns(msg: WakuMessage) -> int | None:
    """A WakuMessage's sender timestamp in nanoseconds: field 10, or an old peer's seconds
    double (field 4) counted as nanoseconds, as the store decodes it; None when absent."""
    if msg.HasField("timestamp"):
        return msg.timestamp
    if msg.HasField("legacy_timestamp"):
        ns = msg.legacy_timestamp * 1e9
        if ns != ns or ns in (float("inf"), float("-inf")):
            return None  # NaN or infinite: no timestamp (Spark's try_cast gives NULL too)
        n = int(ns)
        return n if -(2**63) <= n < 2**63 else None  # beyond int64: as Spark's try_cast
    return None


def hash_of(pubsub_topic: str, msg: WakuMessage) -> bytes:
    """The message hash of a decoded WakuMessage (schemas.waku_message_pb2) on `pubsub_topic`."""
    return message_hash(pubsub_topic, msg.payload, msg.content_topic,
                        msg.meta if msg.HasField("meta") else None, timestamp_ns(msg))


@dataclass(frozen=True)
class Limits:
    """`[limits]` of the configuration: what a message may be (relay, lightpush: the first
    two) and, for the store's rules (core/validation.py), how far its times may be off."""
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_meta_bytes: int = MAX_META_BYTES
    max_clock_skew_s: float = 20.0
    max_future_received_s: float = 60.0

    @classmethod
    def from_config(cls, config: Config) -> Limits:
        return cls(
            max_message_bytes=config.get("limits.max_message_bytes"),
            max_meta_bytes=config.get("limits.max_meta_bytes"),
            max_clock_skew_s=config.get("limits.max_clock_skew_s"),
            max_future_received_s=config.get("limits.max_future_received_s"),
        )


def check_message(data: bytes, limits: Limits = Limits()) -> tuple[WakuMessage | None, str | None]:
    """Decode and validate a WakuMessage as the reference nodes accept it from relay or
    lightpush: (message, None) or (None, reason), reason one of "oversized", "undecodable",
    "empty_content_topic", "meta_too_long"."""
    from google.protobuf.message import DecodeError

    from schemas.waku_message_pb2 import WakuMessage

    if len(data) > limits.max_message_bytes:
        return None, "oversized"
    msg = WakuMessage()
    try:
        msg.ParseFromString(data)
    except DecodeError:
        return None, "undecodable"
    if not msg.content_topic:
        return None, "empty_content_topic"
    if msg.HasField("meta") and len(msg.meta) > limits.max_meta_bytes:
        return None, "meta_too_long"
    return msg, None
