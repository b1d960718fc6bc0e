"""Filter wire facts: protocol ids, status codes, size limits and the push encodings (frames
are ingest/framing.py's).

Status codes and their meaning follow nwaku / go-waku (shared/specs/14-WAKU2-MESSAGE-facts.md):
200 OK, 400 BAD_REQUEST, 404 NOT_FOUND, 429 TOO_MANY_REQUESTS, 503 SERVICE_UNAVAILABLE.
"""
from __future__ import annotations

from ingest.status import status_desc as status_text
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2
from schemas.waku_message_pb2 import WakuMessage

FILTER_SUBSCRIBE_CODEC = "/vac/waku/filter-subscribe/2.0.0-beta1"
FILTER_PUSH_CODEC = "/vac/waku/filter-push/2.0.0-beta1"
FILTER_V00_CODEC = "/vac/waku/filter/2.0.0-beta1"

OK = 200
BAD_REQUEST = 400
NOT_FOUND = 404
TOO_MANY_REQUESTS = 429
SERVICE_UNAVAILABLE = 503

STATUS_NAMES = {OK: "OK", BAD_REQUEST: "BAD_REQUEST", NOT_FOUND: "NOT_FOUND",
                TOO_MANY_REQUESTS: "TOO_MANY_REQUESTS", SERVICE_UNAVAILABLE: "SERVICE_UNAVAILABLE"}

# Largest request frame read: room for a request far over the 100-topic limit (10,000 topics
# are ~140 KB), so that it is answered 400 instead of cut off without a status.
MAX_REQUEST_BYTES = 1024 * 1024
# A push carries one WakuMessage (<= 150 KiB) plus the pubsub topic.
MAX_PUSH_BYTES = 160 * 1024


def status_desc(code: int, detail: str = "") -> str:
    """nwaku style: the status name, then the cause ("BAD_REQUEST: ...")."""
    return status_text(STATUS_NAMES, code, detail)


def push_v2(pubsub_topic: str, message: WakuMessage) -> bytes:
    """A filter-push v2 MessagePush{waku_message, pubsub_topic}."""
    return fv2.MessagePush(waku_message=message, pubsub_topic=pubsub_topic).SerializeToString()


def push_v00(request_id: str, message: WakuMessage) -> bytes:
    """A legacy push: FilterRPC{requestId of the subscribing request, push}."""
    return f00.FilterRPC(requestId=request_id, push=f00.MessagePush(messages=[message])).SerializeToString()


# nwaku's answer to a request its limiter rejects, unread (waku_filter_v2/protocol.nim).
REJECTED_DESC = "filter request rejected due rate limit exceeded"


def rejected_response() -> bytes:
    """The FilterSubscribeResponse of a request refused unread: request_id "N/A", 429."""
    return fv2.FilterSubscribeResponse(request_id="N/A", status_code=429,
                                       status_desc=REJECTED_DESC).SerializeToString()


def subscribe_response(request_id: str, code: int, detail: str = "") -> bytes:
    """A FilterSubscribeResponse echoing request_id, with nwaku's status description."""
    return fv2.FilterSubscribeResponse(request_id=request_id, status_code=code,
                                       status_desc=status_desc(code, detail)).SerializeToString()
