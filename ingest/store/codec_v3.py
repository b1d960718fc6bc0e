"""Store v3 wire format (/vac/waku/store-query/3.0.0): StoreQueryRequest/StoreQueryResponse
(framed by ingest/framing.py) and their mapping to core/store_page.py's StoreQuery.

- The cursor is a message hash; the server resolves it to the message's store position.
- Pages are oldest first (as beta2 and nwaku); the response cursor is the hash of the last
  (forward) or first (backward) message of a page that more messages follow, absent at the end
  (after an exactly full last page too, as nwaku).
- A cursor naming no stored message: 300 `BAD_RESPONSE: archive error: DRIVER_ERROR: cursor not
  found`, nwaku's answer (its archive driver's error); an all-zero one: 300 `BAD_RESPONSE:
  archive error: INVALID_QUERY: all zeroes cursor hash`.
- Each message goes out with its hash and pubsub topic, and the WakuMessage when include_data.
"""
from __future__ import annotations

from collections.abc import Iterable

from core.message import message_hash
from core.store_page import StoredMessage
from ingest.status import status_desc
from ingest.store.codec import waku_message_of
from schemas import store_v3_pb2 as pb3

STORE_V3_CODEC = "/vac/waku/store-query/3.0.0"

OK = 200
BAD_RESPONSE = 300  # nwaku's answer when its archive fails the query (e.g. an unknown cursor)
BAD_REQUEST = 400
TOO_MANY_REQUESTS = 429
INTERNAL_ERROR = 500
SERVICE_UNAVAILABLE = 503
STATUS_NAMES = {OK: "OK", BAD_RESPONSE: "BAD_RESPONSE", BAD_REQUEST: "BAD_REQUEST",
                TOO_MANY_REQUESTS: "TOO_MANY_REQUESTS", INTERNAL_ERROR: "INTERNAL_SERVER_ERROR",
                SERVICE_UNAVAILABLE: "SERVICE_UNAVAILABLE"}


CURSOR_NOT_FOUND = "archive error: DRIVER_ERROR: cursor not found"
ZERO_CURSOR = "archive error: INVALID_QUERY: all zeroes cursor hash"  # nwaku's archive checks it first


def rejected() -> bytes:
    """nwaku's answer to a query its limiter rejects, unread: request_id "N/A", 429."""
    return pb3.StoreQueryResponse(request_id="N/A", status_code=TOO_MANY_REQUESTS,
                                  status_desc="TOO_MANY_REQUESTS").SerializeToString()


def decode_request(data: bytes) -> pb3.StoreQueryRequest:
    """Raises DecodeError when the bytes are not a StoreQueryRequest."""
    return pb3.StoreQueryRequest.FromString(data)


def hash_of(m: StoredMessage) -> bytes:
    if m.message_hash:
        return m.message_hash
    return message_hash(m.pubsub_topic, m.payload, m.content_topic, m.meta, m.timestamp)


def response(request_id: str, code: int, detail: str = "", messages: Iterable[StoredMessage] = (),
             include_data: bool = True, cursor: bytes | None = None) -> bytes:
    r = pb3.StoreQueryResponse(request_id=request_id, status_code=code,
                               status_desc=status_desc(STATUS_NAMES, code, detail))
    for m in messages:
        kv = r.messages.add(message_hash=hash_of(m), pubsub_topic=m.pubsub_topic)
        if include_data:
            kv.message.CopyFrom(waku_message_of(m))
    if cursor is not None:
        r.pagination_cursor = cursor
    return r.SerializeToString()


def request(request_id: str, *, pubsub_topic: str | None = None, content_topics: Iterable[str] = (),
            cursor: bytes | None = None, forward: bool = False, limit: int | None = None,
            include_data: bool = True, hashes: Iterable[bytes] = (), time_start: int | None = None,
            time_end: int | None = None) -> bytes:
    """A StoreQueryRequest (our client side and tests)."""
    q = pb3.StoreQueryRequest(request_id=request_id, include_data=include_data,
                              content_topics=list(content_topics), message_hashes=list(hashes),
                              pagination_forward=forward)
    for name, value in (("pubsub_topic", pubsub_topic), ("pagination_cursor", cursor), ("pagination_limit", limit),
                        ("time_start", time_start), ("time_end", time_end)):
        if value is not None:
            setattr(q, name, value)
    return q.SerializeToString()


def decode_response(data: bytes) -> pb3.StoreQueryResponse:
    return pb3.StoreQueryResponse.FromString(data)
