"""The pipeline's Kafka records (schemas/pipeline_records.proto), written and read the same way
by every process: keys, values and the few decisions about their bytes.

| topic | key | value |
|---|---|---|
| waku.messages | message hash | IngestRecord (the WakuMessage embedded exactly as received) |
| waku.subscriptions | peer id | SubscriptionEvent |
| waku.push.<bridge_id> | source partition (fan-out) or peer id | PushRecord (the filter job's JVM encoder) |
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.message import hash_of
from schemas import pipeline_records_pb2 as pr

if TYPE_CHECKING:
    from schemas.waku_message_pb2 import WakuMessage

_MESSAGE_FIELD_TAG = b"\x12"  # IngestRecord.message: field 2, length-delimited


def _uvarint(n: int) -> bytes:
    """Protobuf's unsigned varint (the length of the embedded message)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ingest_key(pubsub_topic: str, msg: WakuMessage) -> bytes:
    """The Kafka key of an ingest record: the 14/WAKU2-MESSAGE message hash (the store's
    de-duplication key; an old peer's seconds timestamp counts as nanoseconds, as the store
    decodes it)."""
    return hash_of(pubsub_topic, msg)


def ingest_value(pubsub_topic: str, data: bytes, received_time: float, bridge_id: str,
                 source: pr.Source = pr.RELAY) -> bytes:
    """The IngestRecord bytes, embedding the WakuMessage exactly as received (`data`) rather
    than re-encoding it: protobuf fields may come in any order, and this keeps every byte."""
    head = pr.IngestRecord(pubsub_topic=pubsub_topic, received_time=received_time,
                           source=source, bridge_id=bridge_id).SerializeToString()
    return head + _MESSAGE_FIELD_TAG + _uvarint(len(data)) + data


def subscription_event(peer: str, bridge_id: str, op: pr.SubscriptionOp, event_time: float, pubsub_topic: str = "",
                       content_topics: Sequence[str] = (), request_id: str = "",
                       protocol: str = "") -> tuple[bytes, bytes]:
    """(key, value) of one SubscriptionEvent: keyed by peer id, so one peer's events keep their
    order in one partition."""
    ev = pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge_id, op=op, pubsub_topic=pubsub_topic or "",
                              content_topics=list(content_topics), event_time=event_time,
                              request_id=request_id, protocol=protocol)
    return peer.encode(), ev.SerializeToString()


def push_targets(rec: pr.PushRecord) -> list[tuple[str, str, str]]:
    """(peer_id, protocol, request_id) of each subscriber a PushRecord is for: a fan-out's
    targets, or the one subscriber of a per-subscriber record."""
    if rec.targets:
        return [(t.peer_id, t.protocol, t.request_id) for t in rec.targets]
    return [(rec.peer_id, rec.protocol, rec.request_id)]


def decode_push(value: bytes) -> pr.PushRecord | None:
    """A PushRecord, or None when the bytes are not one."""
    from google.protobuf.message import DecodeError

    try:
        return pr.PushRecord.FromString(value)
    except DecodeError:
        return None
