"""Lightpush wire facts: protocol ids, the reference status codes, request/response encodings."""
from __future__ import annotations

from ingest.status import status_desc as status_text
from schemas import lightpush_pb2 as pb
from schemas.waku_message_pb2 import WakuMessage

LIGHTPUSH_V3_CODEC = "/vac/waku/lightpush/3.0.0"
LIGHTPUSH_V2_CODEC = "/vac/waku/lightpush/2.0.0-beta1"
MAX_REQUEST_BYTES = 256 * 1024  # one WakuMessage (<= 150 KiB) plus the envelope
# The largest request the service reads: nwaku's service reads a request of any size
# (DefaultMaxRpcSize = -1) and refuses an oversized message with its relay's text ("Message size
# exceeded maximum of 153600 bytes"); a stream closed unread instead left the client writing
# into a full window until it timed out. 16 MiB: the largest REST body (nwaku's and ours).
MAX_READ_BYTES = 16 * 1024 * 1024

# nwaku's LightPushStatusCode
SUCCESS = 200
BAD_REQUEST = 400
PAYLOAD_TOO_LARGE = 413
INVALID_MESSAGE = 420
UNSUPPORTED_PUBSUB_TOPIC = 421
TOO_MANY_REQUESTS = 429
INTERNAL_SERVER_ERROR = 500
SERVICE_NOT_AVAILABLE = 503
OUT_OF_RLN_PROOF = 504
NO_PEERS_TO_RELAY = 505
STATUS_NAMES = {SUCCESS: "SUCCESS", BAD_REQUEST: "BAD_REQUEST", PAYLOAD_TOO_LARGE: "PAYLOAD_TOO_LARGE",
                INVALID_MESSAGE: "INVALID_MESSAGE_ERROR", UNSUPPORTED_PUBSUB_TOPIC: "UNSUPPORTED_PUBSUB_TOPIC",
                TOO_MANY_REQUESTS: "TOO_MANY_REQUESTS", INTERNAL_SERVER_ERROR: "INTERNAL_SERVER_ERROR",
                SERVICE_NOT_AVAILABLE: "SERVICE_NOT_AVAILABLE", OUT_OF_RLN_PROOF: "OUT_OF_RLN_PROOF",
                NO_PEERS_TO_RELAY: "NO_PEERS_TO_RELAY"}


def status_desc(code: int, detail: str = "") -> str:
    """nwaku style: the status name, then the cause ("BAD_REQUEST: ...")."""
    return status_text(STATUS_NAMES, code, detail)


# nwaku's legacy lightpush (v2, REST v1) says this of every message it did not publish: a topic
# it does not relay, a message its relay has already seen (waku_lightpush_legacy/callbacks.nim).
NOT_PUBLISHED = "not_published_to_any_peer"


# nwaku's v3 text for a message its relay has already seen (mapPubishingErrorToPushResult).
ALREADY_SEEN = "Dropping already-seen message"


def legacy_info(code: int, detail: str = "") -> str:
    """The `info` of a refused legacy push, nwaku's text: the cause alone (no status name),
    not_published_to_any_peer for what its relay would not publish."""
    if code == UNSUPPORTED_PUBSUB_TOPIC or detail == ALREADY_SEEN:
        return NOT_PUBLISHED
    return detail or STATUS_NAMES.get(code, str(code))


# nwaku's TooManyRequestsMessage: the answer to a request its limiter rejects, unread.
TOO_MANY_REQUESTS_MESSAGE = "Request rejected due to too many requests"


def v3_rejected() -> bytes:
    return pb.LightpushResponse(request_id="N/A", status_code=TOO_MANY_REQUESTS,
                                status_desc=TOO_MANY_REQUESTS_MESSAGE).SerializeToString()


def v2_rejected() -> bytes:
    return pb.PushRPC(request_id="N/A", response=pb.PushResponse(
        is_success=False, info=TOO_MANY_REQUESTS_MESSAGE)).SerializeToString()


def v3_response(request_id: str, code: int, detail: str = "", relay_peers: int | None = None) -> bytes:
    r = pb.LightpushResponse(request_id=request_id, status_code=code)
    if code != SUCCESS or detail:
        r.status_desc = status_desc(code, detail)
    if relay_peers is not None:
        r.relay_peer_count = relay_peers
    return r.SerializeToString()


def v2_response(request_id: str, code: int, detail: str = "") -> bytes:
    resp = pb.PushResponse(is_success=code == SUCCESS)
    if code != SUCCESS:
        resp.info = legacy_info(code, detail)
    return pb.PushRPC(request_id=request_id, response=resp).SerializeToString()


def v3_request(request_id: str, message: WakuMessage, pubsub_topic: str | None = None) -> bytes:
    r = pb.LightpushRequest(request_id=request_id, message=message)
    if pubsub_topic is not None:
        r.pubsub_topic = pubsub_topic
    return r.SerializeToString()


def v2_request(request_id: str, message: WakuMessage, pubsub_topic: str) -> bytes:
    return pb.PushRPC(request_id=request_id, request=pb.PushRequest(pubsub_topic=pubsub_topic,
                                                                   message=message)).SerializeToString()
