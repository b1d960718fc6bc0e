"""Filter requests as pure functions, nwaku's `waku_filter_v2` shape: one request core for
filter-subscribe v2 and legacy v00.

    request = from_v2(FilterSubscribeRequest)          # or from_v00(FilterRPC, default topic)
    response = handle(peer, request, view)             # reads the view, changes nothing
    # the service produces response.events to waku.subscriptions, applies each recorded one to
    # the view (SubscriptionView.apply: the same events Spark's subscriptions job applies), and
    # answers response.code / response.detail (v2) or logs a refusal (v00 has no answer).

No I/O, no clock, no locks: unit tested without hosts or Kafka (tests/unit/test_filter_state.py).
The per-peer request rate limit is the service's, checked before `handle`, as nwaku's protocol
handler does.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from ingest.filter.codec import BAD_REQUEST, NOT_FOUND, OK
from ingest.filter.state import Change, SubscriptionView
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2
from schemas import pipeline_records_pb2 as pr

Req = fv2.FilterSubscribeRequest

PING, SUBSCRIBE, UNSUBSCRIBE = "ping", "subscribe", "unsubscribe"
UNSUBSCRIBE_ALL, UNKNOWN = "unsubscribe_all", "unknown"
V2_KINDS = {Req.SUBSCRIBER_PING: PING, Req.SUBSCRIBE: SUBSCRIBE, Req.UNSUBSCRIBE: UNSUBSCRIBE,
            Req.UNSUBSCRIBE_ALL: UNSUBSCRIBE_ALL}


@dataclass(frozen=True)
class FilterRequest:
    """A subscription request, whichever protocol it came on."""
    kind: str                      # PING, SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_ALL or UNKNOWN
    pubsub_topic: str | None = None
    content_topics: tuple[str, ...] = ()
    request_id: str = ""
    protocol: str = "v2"           # "v2" or "v00"
    raw_type: int = 0              # the v2 filter_subscribe_type as sent (for UNKNOWN)

    @property
    def label(self) -> str:
        """The metric label of the request's type."""
        return self.kind if self.protocol == "v2" else f"v00_{self.kind}"


@dataclass(frozen=True)
class Response:
    code: int
    detail: str = ""
    # Changes to record (produce to waku.subscriptions) and then apply to the view, in order.
    events: tuple[Change, ...] = ()
    # The detail of the 503 answered when a required event cannot be recorded.
    unrecorded: str = "the change could not be recorded"


def from_v2(req: fv2.FilterSubscribeRequest) -> FilterRequest:
    kind = V2_KINDS.get(req.filter_subscribe_type, UNKNOWN)
    topic = req.pubsub_topic if req.HasField("pubsub_topic") else None
    return FilterRequest(kind, topic, tuple(req.content_topics), req.request_id, "v2", req.filter_subscribe_type)


def from_v00(rpc: f00.FilterRPC, default_pubsub_topic: str) -> FilterRequest:
    """A v00 FilterRPC's request (both published ContentFilter shapes; a request without topic
    uses the bridge's default pubsub topic, as the matching is an equi-join on it)."""
    req = rpc.request
    cts = tuple(dict.fromkeys(ct for cf in req.contentFilters for ct in cf.contentTopics))
    return FilterRequest(SUBSCRIBE if req.subscribe else UNSUBSCRIBE, req.topic or default_pubsub_topic, cts,
                         rpc.requestId, "v00")


def handle(peer: str, request: FilterRequest, view: SubscriptionView,
           relayed: Collection[str] | None = None) -> Response:
    """What to answer `peer` and which subscription changes to record. Reads `view` only.
    `relayed`: with filter.refuse_unrelayed_topics, the pubsub topics this node relays now,
    however it joined them (its settings', REST's `POST /relay/v1/subscriptions`); None (the
    default, nwaku's service, which checks no topic): any. A SUBSCRIBE to another topic is then
    refused with 400 BAD_REQUEST, the code nwaku's filter answers a request it cannot serve as
    asked (waku_filter_v2/common.nim FilterSubscribeErrorKind)."""
    kind, topic, cts = request.kind, request.pubsub_topic, request.content_topics
    if kind == PING:
        if not view.has(peer):
            return Response(NOT_FOUND, "peer has no subscriptions")
        return Response(OK, events=(Change(pr.REFRESH),))
    if kind == SUBSCRIBE:
        code, detail = view.check_criteria(topic, cts)
        if code != OK or topic is None:  # (a missing topic is refused by check_criteria)
            return Response(code, detail)
        if relayed is not None and topic not in relayed:
            return Response(BAD_REQUEST, f"this node does not relay {topic}")
        code, detail = view.can_subscribe(peer, topic, cts)
        if code != OK:
            return Response(code, detail)
        return Response(OK, events=(Change(pr.SUBSCRIBE, topic, cts, request.request_id, request.protocol),),
                        unrecorded="the subscription could not be recorded")
    if kind == UNSUBSCRIBE:
        code, detail = view.check_criteria(topic, cts)
        if code != OK or topic is None:  # (a missing topic is refused by check_criteria)
            return Response(code, detail)
        code, detail = view.can_unsubscribe(peer, topic, cts)
        if code != OK:
            # nwaku's removeSubscription refreshes a subscribed peer (`lastSeen`) before it finds
            # a criterion not held and answers NOT_FOUND: so does this one (a REFRESH).
            return Response(code, detail, events=(Change(pr.REFRESH),) if code == NOT_FOUND and view.has(peer) else ())
        # The UNSUBSCRIBE refreshes the peer's other criteria (SubscriptionView.unsubscribe).
        return Response(OK, events=(Change(pr.UNSUBSCRIBE, topic, cts, request.request_id, request.protocol),))
    if kind == UNSUBSCRIBE_ALL:
        if not view.has(peer):
            return Response(NOT_FOUND, "peer has no subscriptions")
        return Response(OK, events=(Change(pr.UNSUBSCRIBE_ALL, request_id=request.request_id,
                                           protocol=request.protocol),))
    return Response(BAD_REQUEST, f"unknown filter_subscribe_type {request.raw_type}")
