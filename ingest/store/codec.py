"""The store wire format: HistoryRPC messages (framed by ingest/framing.py), and their mapping
to core/store_page.py's StoreQuery and Page.

- pagingInfo absent: page size 0 (the default), no cursor, direction BACKWARD (proto3's
  default value: the last page).
- A cursor whose Index is all defaults (empty digest, receivedTime 0) means "no cursor" (old
  clients encode an empty Index on their first query). Any other cursor is a position, whatever
  its digest's length and even at +-inf; only a NaN receivedTime makes the query unservable
  (empty response in the query's direction).
- Messages go out as stored (payload, content_topic, version, timestamp, meta,
  rate_limit_proof); the response cursor is the page's (core/store_page.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from core.message import store_digest
from core.store_page import Index, Page, StoredMessage, StoreQuery
from schemas import store_beta2_pb2 as pb
from schemas.waku_message_pb2 import WakuMessage

STORE_CODEC = "/vac/waku/store/2.0.0-beta2"


def decode_rpc(data: bytes) -> pb.HistoryRPC:
    """Raises DecodeError when the bytes are not a HistoryRPC."""
    rpc = pb.HistoryRPC()
    rpc.ParseFromString(data)
    return rpc


def query_from_proto(q: pb.HistoryQuery) -> StoreQuery:
    pi = q.pagingInfo
    cursor = None
    if q.HasField("pagingInfo") and pi.HasField("cursor"):
        c = pi.cursor
        if c.digest or c.receivedTime != 0 or math.isnan(c.receivedTime):
            cursor = Index(float(c.receivedTime), bytes(c.digest))
    return StoreQuery(
        pubsub_topic=q.pubsubtopic,
        content_topics=tuple(f.contentTopic for f in q.contentFilters),
        cursor=cursor,
        forward=pi.direction == pb.PagingInfo.FORWARD,
        page_size=pi.pageSize,
    )


def query_to_proto(query: StoreQuery) -> pb.HistoryQuery:
    q = pb.HistoryQuery(pubsubtopic=query.pubsub_topic,
                        contentFilters=[pb.ContentFilter(contentTopic=t) for t in query.content_topics])
    q.pagingInfo.pageSize = max(0, int(query.page_size))
    q.pagingInfo.direction = pb.PagingInfo.FORWARD if query.forward else pb.PagingInfo.BACKWARD
    if query.cursor is not None:
        q.pagingInfo.cursor.digest = query.cursor.digest
        q.pagingInfo.cursor.receivedTime = query.cursor.received_time
    return q


def waku_message_of(m: StoredMessage) -> WakuMessage:
    w = WakuMessage(payload=m.payload, content_topic=m.content_topic)
    if m.version is not None:
        w.version = m.version
    if m.timestamp is not None:
        w.timestamp = m.timestamp
    if m.meta is not None:
        w.meta = m.meta
    if m.rate_limit_proof is not None:
        w.rate_limit_proof = m.rate_limit_proof
    return w


def response_rpc(request_id: str, page: Page | None, forward: bool = False) -> pb.HistoryRPC:
    """The HistoryRPC answering `request_id` (an empty response in the query's direction
    `forward` when page is None)."""
    rpc = pb.HistoryRPC(request_id=request_id)
    r = rpc.response
    if page is None:
        r.pagingInfo.pageSize = 0
        r.pagingInfo.direction = pb.PagingInfo.FORWARD if forward else pb.PagingInfo.BACKWARD
        return rpc
    r.messages.extend(waku_message_of(m) for m in page.messages)
    r.pagingInfo.pageSize = len(page.messages)
    r.pagingInfo.direction = pb.PagingInfo.FORWARD if page.forward else pb.PagingInfo.BACKWARD
    if page.cursor is not None:
        r.pagingInfo.cursor.digest = page.cursor.digest
        r.pagingInfo.cursor.receivedTime = page.cursor.received_time
    return rpc


@dataclass
class RemotePage:
    """A page as received over the wire: the messages carry no receive time or pubsub topic
    (beta2 sends bare WakuMessages), so `received_time` of each StoredMessage is NaN."""
    request_id: str
    messages: list[StoredMessage] = field(default_factory=list)
    cursor: Index | None = None
    forward: bool = True
    waku_messages: list[WakuMessage] = field(default_factory=list)


def page_from_response(rpc: pb.HistoryRPC, pubsub_topic: str = "") -> RemotePage:
    r = rpc.response
    msgs = []
    for w in r.messages:
        msgs.append(StoredMessage(
            math.nan, store_digest(w.content_topic, w.payload), pubsub_topic, w.content_topic, w.payload,
            w.version if w.HasField("version") else None,
            w.timestamp if w.HasField("timestamp") else None,
            w.meta if w.HasField("meta") else None,
            w.rate_limit_proof if w.HasField("rate_limit_proof") else None))
    cursor = None
    if r.HasField("pagingInfo") and r.pagingInfo.HasField("cursor"):
        cursor = Index(r.pagingInfo.cursor.receivedTime, bytes(r.pagingInfo.cursor.digest))
    forward = r.pagingInfo.direction == pb.PagingInfo.FORWARD
    return RemotePage(rpc.request_id, msgs, cursor, forward, list(r.messages))


__all__ = ["STORE_CODEC", "DecodeError", "RemotePage", "decode_rpc", "page_from_response", "query_from_proto",
           "query_to_proto", "response_rpc", "waku_message_of"]
