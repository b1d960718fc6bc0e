"""The REST API's request parsing and response encoding as pure functions, with nwaku's field
names, encodings and error texts (`waku/rest_api/endpoint/*/types.nim`, `serdes.nim`): base64
payloads, `0x` hex message hashes and cursors. Each parser returns the typed request or raises
`BadRequest` with the text the route answers (HTTP 400 unless said otherwise)."""
from __future__ import annotations

import base64
import binascii
import json
import time
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, unquote_plus

from schemas import store_v3_pb2 as pb3
from schemas.waku_message_pb2 import WakuMessage

JSON_TYPES = ("application/json", "text/plain")
DEFAULT_PAGE_SIZE = 20  # nwaku's REST store defaults and cap
MAX_PAGE_SIZE = 100
_TRUE = {"y", "yes", "true", "1", "on"}  # Nim's parseBool
_FALSE = {"n", "no", "false", "0", "off"}


class BadRequest(ValueError):
    """The request cannot be served; str() is the text of the answer."""

    def __init__(self, text: str, status: int = 400) -> None:
        super().__init__(text)
        self.status = status


def reason_phrase(status: int) -> bytes:
    """The standard reason phrase of a status ("Bad Request"), as nwaku's HTTP server (chronos)
    writes it in its status lines; b"" for a code without one (lightpush's 420)."""
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def http_status(code: int) -> int:
    """A protocol status as the HTTP status nwaku answers with (chronos's toHttpCode, else 500):
    lightpush's 420 INVALID_MESSAGE is 500."""
    return code if reason_phrase(code) else 500


# --- bodies ------------------------------------------------------------------------------------

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"Multiple `{key}` fields found")
        out[key] = value
    return out


def decode_body(content_type: str | None, body: bytes) -> Any:
    """nwaku's decodeRequestBody: a JSON (or text/plain) body, any JSON value; a repeated key
    in an object is an error."""
    if not body:
        raise BadRequest("Missing content body")
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in JSON_TYPES:
        raise BadRequest("Wrong Content-Type, expected application/json or text/plain")
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequest(f"Invalid content body, could not decode: Unable to deserialize data: {exc}") from None


def _undecodable(why: str) -> BadRequest:
    return BadRequest(f"Invalid content body, could not decode: Unable to deserialize data: {why}")


def topic_list(value: Any) -> list[str]:
    """A JSON array of topics (relay subscriptions)."""
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise _undecodable("expected an array of strings")
    return value


@dataclass(frozen=True)
class RelayMessage:
    """nwaku's RelayWakuMessage as received: base64 text fields not yet decoded."""
    payload: str
    content_topic: str
    version: int | None = None
    timestamp: int | None = None
    meta: str | None = None
    ephemeral: bool | None = None
    proof: str | None = None


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _undecodable(f"`{name}`: expected an integer {low}..{high}")
    return value


def _str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _undecodable(f"`{name}`: expected a string")
    return value


RELAY_MESSAGE_FIELDS = frozenset({"payload", "contentTopic", "version", "timestamp", "meta", "ephemeral", "proof"})
PUSH_REQUEST_FIELDS = frozenset({"pubsubTopic", "message"})
FILTER_REQUEST_FIELDS = frozenset({"requestId", "pubsubTopic", "contentFilters"})
FILTER_ALL_REQUEST_FIELDS = frozenset({"requestId"})
# nwaku's readValue leaves an unknown field's value unread and its JSON reader then fails on it,
# as on a null where it reads a number, string or bool: a token error, whose message is empty.
UNREADABLE = ""


def _known_fields(value: dict[str, Any], fields: frozenset[str]) -> None:
    """nwaku refuses a field it does not know and a null for one it does."""
    if any(k not in fields or value[k] is None for k in value):
        raise _undecodable(UNREADABLE)


def relay_message(value: Any) -> RelayMessage:
    """A RelayWakuMessage object: payload and contentTopic present and not blank (nwaku's
    readValue); an unknown field or a null value is refused."""
    if not isinstance(value, dict):
        raise _undecodable("expected an object")
    _known_fields(value, RELAY_MESSAGE_FIELDS)
    payload = value.get("payload")
    if payload is None or not isinstance(payload, str) or not payload.strip():
        raise _undecodable("Field `payload` is missing or empty")
    ct = value.get("contentTopic")
    if ct is None or not isinstance(ct, str) or not ct.strip():
        raise _undecodable("Field `contentTopic` is missing or empty")
    version = value.get("version")
    timestamp = value.get("timestamp")
    ephemeral = value.get("ephemeral")
    if ephemeral is not None and not isinstance(ephemeral, bool):
        raise _undecodable("`ephemeral`: expected true or false")
    meta, proof = value.get("meta"), value.get("proof")
    return RelayMessage(
        payload, ct,
        _int(version, "version", 0, 2**32 - 1) if version is not None else None,
        _int(timestamp, "timestamp", -(2**63), 2**63 - 1) if timestamp is not None else None,
        _str(meta, "meta") if meta is not None else None,
        ephemeral,
        _str(proof, "proof") if proof is not None else None,
    )


def b64decode(text: str) -> bytes:
    """Standard base64 with padding (nwaku's Base64Pad); "" is no bytes."""
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise BadRequest("Incorrect base64 string") from None


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def to_waku_message(m: RelayMessage, now_ns: int | None = None) -> WakuMessage:
    """nwaku's toWakuMessage: base64 fields decoded; version 0, ephemeral false when absent; a
    timestamp absent or 0 is now."""
    msg = WakuMessage(payload=b64decode(m.payload), content_topic=m.content_topic, version=m.version or 0,
                      timestamp=m.timestamp or (now_ns if now_ns is not None else time.time_ns()),
                      ephemeral=bool(m.ephemeral))
    meta = b64decode(m.meta or "")
    proof = b64decode(m.proof or "")
    if meta:
        msg.meta = meta
    if proof:
        msg.rate_limit_proof = proof
    return msg


@dataclass(frozen=True)
class PushRequest:
    """The lightpush routes' body: an optional pubsub topic ("" is none) and a message."""
    pubsub_topic: str | None
    message: RelayMessage


def push_request(value: Any) -> PushRequest:
    if not isinstance(value, dict):
        raise _undecodable("expected an object")
    _known_fields(value, PUSH_REQUEST_FIELDS)
    if "message" not in value:
        raise _undecodable("Field `message` is missing")
    topic = value.get("pubsubTopic")
    if topic is not None and not isinstance(topic, str):
        raise _undecodable("`pubsubTopic`: expected a string")
    return PushRequest(topic or None, relay_message(value["message"]))


def relay_message_json(msg: WakuMessage) -> dict[str, Any]:
    """A received message for GET /relay/v1/messages (nwaku's toRelayWakuMessage: proof always,
    meta when not empty)."""
    out: dict[str, Any] = {"payload": b64encode(msg.payload), "contentTopic": msg.content_topic,
                           "version": msg.version, "timestamp": msg.timestamp}
    if msg.meta:
        out["meta"] = b64encode(msg.meta)
    out["ephemeral"] = msg.ephemeral
    out["proof"] = b64encode(msg.rate_limit_proof)
    return out


# --- store v3 ----------------------------------------------------------------------------------

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def hex_to_bytes(text: str) -> bytes:
    """nim-stew's hexToSeqByte, with its ValueError texts: an even length (counting a `0x`
    prefix), then each character a hex digit, read in order."""
    if len(text) % 2:
        raise ValueError("hex string must have even length")
    digits = text[2:] if text[:2] in ("0x", "0X") else text
    for c in digits:
        if c not in _HEX_DIGITS:
            raise ValueError(f"{c} is not a hexadecimal character")
    return bytes.fromhex(digits)


def _hash(text: str) -> bytes:
    try:
        data = hex_to_bytes(unquote(text))
    except ValueError as exc:
        raise BadRequest(f"Exception converting hex string to bytes: {exc}") from None
    if len(data) != 32:
        raise BadRequest(f"waku message hash parsing error: invalid hash length: {len(data)}")
    return data


def _time(text: str) -> int | None:
    """nwaku's parseTime: an integer; only a positive one bounds the query."""
    try:
        t = int(text)
    except ValueError:
        raise BadRequest(f"time parsing error: invalid integer: {text}") from None
    if t > 2**63 - 1:
        raise BadRequest(f"time parsing error: value out of range: {text}")
    return t if t > 0 else None


# nim-libp2p's MultiAddress protocols by name (multiaddress.nim, the version nwaku v0.38.1 vendors)
# and their kinds: a value follows (FIXED, LENGTH), the rest is a path (PATH), none (MARKER).
_FIXED, _LENGTH, _PATH, _MARKER = "fixed", "length", "path", "marker"
_NIM_PROTOCOLS = {
    **dict.fromkeys(("ip4", "tcp", "udp", "ip6", "dccp", "sctp", "onion", "onion3"), _FIXED),
    **dict.fromkeys(("ip6zone", "ipfs", "p2p", "dns", "dns4", "dns6", "dnsaddr"), _LENGTH),
    **dict.fromkeys(("unix", "memory"), _PATH),
    **dict.fromkeys(("udt", "utp", "http", "https", "quic", "quic-v1", "ws", "wss", "tls", "p2p-circuit",
                     "p2p-websocket-star", "p2p-webrtc-star", "p2p-webrtc-direct"), _MARKER),
}


def multiaddr_error(text: str) -> str | None:
    """nim-libp2p's `MultiAddress.init(string)` refusal of `text` (nwaku's store REST answers
    `Failed parsing remote peer info: MultiAddress.init [<it>]`), or None when it parses: the
    same checks in the same order. A value's encoding is checked with py-multiaddr where it
    knows the protocol."""
    if text in ("", "/"):
        return "multiaddress: Address must not be empty!"
    if not text.startswith("/"):
        return "multiaddress: Invalid MultiAddress, must start with `/`"
    parts = text.rstrip("/").split("/")
    offset = 1
    while offset < len(parts):
        part = parts[offset]
        kind = _NIM_PROTOCOLS.get(part)
        if kind is None:
            return f"multiaddress: Unsupported protocol '{part}'"
        if kind == _MARKER:
            offset += 1
            continue
        if offset + 1 >= len(parts):
            return f"multiaddress: Missing protocol '{part}' argument"
        value = "/" + "/".join(parts[offset + 1:]) if kind == _PATH else parts[offset + 1]
        if not _encodes(part, value):
            return f"multiaddress: Error encoding `{part}/{value}`"
        if kind == _PATH:
            break
        offset += 2
    return None


def _encodes(protocol: str, value: str) -> bool:
    import multiaddr  # the REST app's dependency (ingest/rest/app.py), not the codec's callers'
    from multiaddr.exceptions import ProtocolLookupError
    name = "p2p" if protocol == "ipfs" else protocol
    try:
        multiaddr.Multiaddr(f"/{name}{value}" if value.startswith("/") else f"/{name}/{value}")
    except ProtocolLookupError:
        return True  # a protocol py-multiaddr does not know: not refused here
    except Exception:  # noqa: BLE001 - py-multiaddr raises several types for a bad value
        return False
    return True


def store_request(params: Mapping[str, str], request_id: str | None = None) -> pb3.StoreQueryRequest:
    """GET /store/v3/messages's query parameters -> a StoreQueryRequest, as nwaku's
    createStoreQuery: includeData false unless true; the direction forward unless `ascending` is
    other than "true"; pageSize 20 when absent, at most 100 (a negative one, read as unsigned by
    nwaku, is 100); comma-separated content topics and hashes; empty values are absent."""
    p = {k: v for k, v in params.items() if v != ""}
    req = pb3.StoreQueryRequest(request_id=request_id or uuid.uuid4().hex)
    if "includeData" in p:
        flag = p["includeData"].lower()
        if flag not in _TRUE | _FALSE:
            raise BadRequest(f"include data parsing error: cannot interpret as a bool: {p['includeData']}")
        req.include_data = flag in _TRUE
    if "pubsubTopic" in p and unquote_plus(p["pubsubTopic"]):
        req.pubsub_topic = unquote_plus(p["pubsubTopic"])
    if "contentTopics" in p and unquote_plus(p["contentTopics"]):
        req.content_topics.extend(unquote_plus(p["contentTopics"]).split(","))
    for name, field in (("startTime", "time_start"), ("endTime", "time_end")):
        if name in p:
            t = _time(p[name])
            if t is not None:
                setattr(req, field, t)
    if "hashes" in p:
        req.message_hashes.extend(_hash(h) for h in unquote(p["hashes"]).split(",") if h)
    if "cursor" in p:
        req.pagination_cursor = _hash(p["cursor"])
    req.pagination_forward = p.get("ascending", "true") == "true"
    size = DEFAULT_PAGE_SIZE
    if "pageSize" in p:
        try:
            size = int(p["pageSize"])
        except ValueError:
            raise BadRequest(f"page size parsing error: invalid integer: {p['pageSize']}") from None
    req.pagination_limit = MAX_PAGE_SIZE if size < 0 or size > MAX_PAGE_SIZE else size
    return req


def hex0x(data: bytes) -> str:
    return "0x" + data.hex()


def store_message_json(msg: WakuMessage) -> dict[str, Any]:
    """A stored message (nwaku's store writeValue: meta and proof only when not empty)."""
    out: dict[str, Any] = {"payload": b64encode(msg.payload), "contentTopic": msg.content_topic}
    if msg.meta:
        out["meta"] = b64encode(msg.meta)
    out.update(version=msg.version, timestamp=msg.timestamp, ephemeral=msg.ephemeral)
    if msg.rate_limit_proof:
        out["proof"] = b64encode(msg.rate_limit_proof)
    return out


def store_response_json(resp: pb3.StoreQueryResponse) -> dict[str, Any]:
    """nwaku's StoreQueryResponseHex: hashes and the cursor as 0x hex; a message's data and
    pubsub topic when the query asked for data."""
    messages = []
    for kv in resp.messages:
        m: dict[str, Any] = {"messageHash": hex0x(kv.message_hash)}
        if kv.HasField("message"):
            m["message"] = store_message_json(kv.message)
            if kv.HasField("pubsub_topic"):
                m["pubsubTopic"] = kv.pubsub_topic
        messages.append(m)
    out: dict[str, Any] = {"requestId": resp.request_id, "statusCode": resp.status_code,
                           "statusDesc": resp.status_desc, "messages": messages}
    if resp.HasField("pagination_cursor"):
        out["paginationCursor"] = hex0x(resp.pagination_cursor)
    return out


# --- health and info ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ProtocolHealth:
    protocol: str  # nwaku's WakuProtocol names: "Relay", "Store", "Lightpush", ...
    health: str    # READY, NOT_READY, NOT_MOUNTED, ...
    desc: str | None = None


def health_report(relay_peers: int, relay_d_low: int, mounted: Mapping[str, bool],
                  problems: Sequence[str], starting: Collection[str] = ()) -> dict[str, Any]:
    """nwaku's HealthReport: nodeHealth READY, or NOT_READY while the bridge has problems (a
    background thread down or failing: Bridge.health_problems, listed under "Bridge");
    connectionStatus from the relay peers (Connected at gossipsub's D_low, PartiallyConnected
    with fewer, else Disconnected); protocolsHealth one entry per protocol (`starting`: mounted,
    not serving yet: NOT_READY)."""
    protocols: list[ProtocolHealth] = []
    for name, on in mounted.items():
        if not on:
            protocols.append(ProtocolHealth(name, "NOT_MOUNTED"))
        elif name in starting:
            protocols.append(ProtocolHealth(name, "NOT_READY", "Starting"))
        elif name == "Relay" and relay_peers == 0:
            protocols.append(ProtocolHealth(name, "NOT_READY", "No connected peers"))
        else:
            protocols.append(ProtocolHealth(name, "READY"))
    if problems:
        protocols.append(ProtocolHealth("Bridge", "NOT_READY", "; ".join(problems)))
    status = ("Connected" if relay_peers >= max(1, relay_d_low) else
              "PartiallyConnected" if relay_peers > 0 else "Disconnected")
    return {"nodeHealth": "NOT_READY" if problems else "READY", "connectionStatus": status,
            "protocolsHealth": [{p.protocol: p.health, **({"desc": p.desc} if p.desc else {})}
                                for p in protocols]}


def info_json(listen_addresses: Iterable[str], enr_uri: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"listenAddresses": list(listen_addresses)}
    if enr_uri:
        out["enrUri"] = enr_uri
    return out


# --- filter (client of a service node) ---------------------------------------------------------

@dataclass(frozen=True)
class FilterRequest:
    """nwaku's FilterSubscribeRequest / FilterUnsubscribeRequest / FilterUnsubscribeAllRequest."""
    request_id: str
    pubsub_topic: str | None = None
    content_topics: tuple[str, ...] = ()


def filter_request(value: Any, *, topics: bool = True) -> FilterRequest:
    """`requestId` required; with `topics`, `contentFilters` (an array of content topics) and an
    optional `pubsubTopic`; an unknown field or a null value is refused, as on the relay routes
    (nwaku's readValue of FilterSubscribeRequest, FilterUnsubscribeRequest and
    FilterUnsubscribeAllRequest)."""
    if not isinstance(value, dict):
        raise BadRequest("Failed to decode request: expected an object")
    _known_fields(value, FILTER_REQUEST_FIELDS if topics else FILTER_ALL_REQUEST_FIELDS)
    rid = value.get("requestId")
    if not isinstance(rid, str):
        raise BadRequest("Failed to decode request: Field `requestId` is missing")
    if not topics:
        return FilterRequest(rid)
    cts = value.get("contentFilters")
    if not isinstance(cts, list) or not all(isinstance(c, str) for c in cts):
        raise BadRequest("Failed to decode request: Field `contentFilters` is missing")
    topic = value.get("pubsubTopic")
    if topic is not None and not isinstance(topic, str):
        raise BadRequest("Failed to decode request: `pubsubTopic`: expected a string")
    return FilterRequest(rid, topic or None, tuple(cts))


def filter_message_json(msg: WakuMessage) -> dict[str, Any]:
    """nwaku's FilterWakuMessage (no proof; meta when not empty)."""
    out: dict[str, Any] = {"payload": b64encode(msg.payload), "contentTopic": msg.content_topic,
                           "version": msg.version, "timestamp": msg.timestamp}
    if msg.meta:
        out["meta"] = b64encode(msg.meta)
    out["ephemeral"] = msg.ephemeral
    return out
