"""Lightpush decisions as pure functions: from a decoded v3 or v2 request and the node's
context to either the message to accept (its pubsub topic and bytes) or the refusal (status
code and reason), with the reference nodes' codes. The service (ingest/lightpush/service.py)
then produces the message to Kafka, publishes it on relay and answers."""
from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from core.message import MAX_MESSAGE_BYTES
from core.topics import autoshard, shard_topic
from ingest.lightpush.codec import BAD_REQUEST, INVALID_MESSAGE, PAYLOAD_TOO_LARGE, UNSUPPORTED_PUBSUB_TOPIC
from schemas import lightpush_pb2 as lp
from schemas.waku_message_pb2 import WakuMessage

# nwaku's text when a request's message has a meta over 64 bytes: its protobuf decoding fails
# (decodeRpcFailure & ": " & the ProtobufError).
META_TOO_LONG = 'decode_rpc_failure: (kind: InvalidLengthField, field: "meta")'


@dataclass(frozen=True)
class PushContext:
    """What a decision needs of the node: the topics it relays (a live view: those it joined
    later, e.g. through REST, are served, those it left are not), its cluster for autosharding,
    and the message rules (core/message.check_message with the configured limits)."""
    pubsub_topics: Collection[str]
    cluster_id: int
    num_shards_in_cluster: int
    check: Callable[[bytes], tuple[WakuMessage | None, str | None]]
    max_message_bytes: int = MAX_MESSAGE_BYTES  # the check's limit, for the refusal's text


@dataclass(frozen=True)
class Accepted:
    request_id: str
    pubsub_topic: str
    data: bytes          # the WakuMessage bytes, relayed and stored as they are
    message: WakuMessage  # decoded, for the Kafka key (message hash)


@dataclass(frozen=True)
class Refused:
    request_id: str
    code: int
    detail: str


def decide(request_id: str, pubsub_topic: str | None, message: WakuMessage | None,
           ctx: PushContext) -> Accepted | Refused:
    """The v3 rules (v2 requests come here with their pubsub topic): a message is required; an
    absent pubsub topic is derived by autosharding from the content topic; the topic must be
    one this node relays (421); the message must pass the relay rules (413 oversized, 400 a
    meta too long, as nwaku's request decoding, 420 otherwise)."""
    if message is None:
        return Refused(request_id, BAD_REQUEST, "no message")
    data = message.SerializeToString()
    if not pubsub_topic:
        shard = autoshard(message.content_topic, ctx.num_shards_in_cluster) if ctx.cluster_id else None
        if shard is None:
            return Refused(request_id, BAD_REQUEST, "no pubsub topic, and none can be derived from the content topic")
        pubsub_topic = shard_topic(ctx.cluster_id, shard)
    if pubsub_topic not in ctx.pubsub_topics:
        return Refused(request_id, UNSUPPORTED_PUBSUB_TOPIC, f"this node does not relay {pubsub_topic}")
    msg, reason = ctx.check(data)
    if reason == "oversized":  # nwaku's relay validateMessage text
        return Refused(request_id, PAYLOAD_TOO_LARGE, f"Message size exceeded maximum of {ctx.max_message_bytes} bytes")
    if reason == "meta_too_long":  # nwaku: the request's WakuMessage does not decode
        return Refused(request_id, BAD_REQUEST, META_TOO_LONG)
    if reason is not None:
        return Refused(request_id, INVALID_MESSAGE, reason.replace("_", " "))
    assert msg is not None  # the check names a reason or returns the message
    return Accepted(request_id, pubsub_topic, data, msg)


def from_v3(req: lp.LightpushRequest, ctx: PushContext) -> Accepted | Refused:
    topic = req.pubsub_topic if req.HasField("pubsub_topic") else None
    return decide(req.request_id, topic, req.message if req.HasField("message") else None, ctx)


def from_v2(rpc: lp.PushRPC, ctx: PushContext) -> Accepted | Refused:
    if not rpc.HasField("request"):
        return Refused(rpc.request_id, BAD_REQUEST, "no request")
    r = rpc.request
    return decide(rpc.request_id, r.pubsub_topic or None, r.message if r.HasField("message") else None, ctx)
