"""Filter wire facts: protocol ids, varint-length-prefixed framing, status codes.

Status codes and their meaning follow nwaku / go-waku (shared/specs/14-WAKU2-MESSAGE-facts.md):
200 OK, 400 BAD_REQUEST, 404 NOT_FOUND, 429 TOO_MANY_REQUESTS, 503 SERVICE_UNAVAILABLE.
"""
from __future__ import annotations

from typing import Any

from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

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

# A subscribe request carries at most 100 content topics of bounded length; 64 KiB is ample.
MAX_REQUEST_BYTES = 64 * 1024
# A push carries one WakuMessage (<= 150 KiB) plus the pubsub topic.
MAX_PUSH_BYTES = 160 * 1024


def status_desc(code: int, detail: str = "") -> str:
    """nwaku style: the status name, then the cause ("BAD_REQUEST: ...")."""
    name = STATUS_NAMES.get(code, str(code))
    return f"{name}: {detail}" if detail else name


def frame(data: bytes) -> bytes:
    return encode_varint_prefixed(data)


async def read_frame(stream: Any, max_bytes: int = MAX_REQUEST_BYTES) -> bytes:
    """One varint-length-prefixed message (raises on oversize, EOF or a bad prefix)."""
    return await read_varint_prefixed_bytes_limited(stream, max_bytes)
