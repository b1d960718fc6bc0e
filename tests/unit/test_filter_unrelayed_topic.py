"""A filter SUBSCRIBE on a pubsub topic the bridge does not relay: taken (200) by default, as
nwaku's service takes it (issue 68), refused with 400 BAD_REQUEST with
filter.refuse_unrelayed_topics = true (issue 36 item 9): the pure decision
(ingest/filter/protocol.handle, v2 and v00), the service asking the node at each request, and
the relayed topics the bridge's settings hand it. Through js-waku:
tests/interop/test_js_paging_and_transports.py."""
from __future__ import annotations

from core.config import load_config
from ingest.filter import protocol
from ingest.filter.state import FilterLimits, SubscriptionView
from ingest.settings import BridgeSettings
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2

RELAYED = frozenset({"/waku/2/rs/1/0", "/waku/2/rs/1/1"})
Req = fv2.FilterSubscribeRequest


def v2(kind, topic, cts=("/app/1/a/proto",)):
    req = Req(request_id="r", filter_subscribe_type=kind, content_topics=list(cts))
    if topic is not None:
        req.pubsub_topic = topic
    return protocol.from_v2(req)


def test_subscribe_to_an_unrelayed_topic_is_refused():
    v = SubscriptionView(FilterLimits())
    for topic in ("/waku/2/rs/1/9", "/waku/2/rs/2/0", "/waku/2/default-waku/proto", "/my/named/topic"):
        r = protocol.handle("p", v2(Req.SUBSCRIBE, topic), v, RELAYED)
        assert (r.code, r.detail, r.events) == (400, f"this node does not relay {topic}", ())
    ok = protocol.handle("p", v2(Req.SUBSCRIBE, "/waku/2/rs/1/1"), v, RELAYED)
    assert ok.code == 200 and len(ok.events) == 1
    # Without a relayed set (a service on its own) any topic is taken, as before.
    assert protocol.handle("p", v2(Req.SUBSCRIBE, "/waku/2/rs/1/9"), v).code == 200


def test_malformed_requests_keep_their_reason_and_limits_come_after():
    v = SubscriptionView(FilterLimits(max_peers=0))  # every new peer would be over the peer limit
    assert protocol.handle("p", v2(Req.SUBSCRIBE, None), v, RELAYED).detail == "pubsub topic missing"
    assert protocol.handle("p", v2(Req.SUBSCRIBE, "/waku/2/rs/1/9", ()), v, RELAYED).detail == "content topics missing"
    # A topic that can never be served is a 400, not the 503 of a limit that may clear.
    assert protocol.handle("p", v2(Req.SUBSCRIBE, "/waku/2/rs/1/9"), v, RELAYED).code == 400
    assert protocol.handle("p", v2(Req.SUBSCRIBE, "/waku/2/rs/1/0"), v, RELAYED).code == 503


def test_v00_subscribe_on_an_unrelayed_topic_is_refused():
    v = SubscriptionView(FilterLimits())
    rpc = f00.FilterRPC(requestId="x", request=f00.FilterRequest(
        subscribe=True, topic="/waku/2/rs/1/9",
        contentFilters=[f00.FilterRequest.ContentFilter(contentTopics=["/a/1/b/c"])]))
    assert protocol.handle("p", protocol.from_v00(rpc, "/waku/2/rs/1/0"), v, RELAYED).code == 400
    rpc.request.topic = ""  # no topic: the bridge's default, which it relays
    assert protocol.handle("p", protocol.from_v00(rpc, "/waku/2/rs/1/0"), v, RELAYED).code == 200


def test_bridge_settings_give_the_filter_its_relayed_topics():
    cfg = load_config(["bridge.cluster_id=1", "rln.enabled=false", "rln.enabled=false",
                       "bridge.num_shards_in_cluster=8", "bridge.pubsub_topics=",
                       "bridge.all_shards=true"], environ={})
    s = BridgeSettings.from_config(cfg)
    assert s.filter is not None
    assert s.filter.relayed_topics == frozenset(s.pubsub_topics) == frozenset(f"/waku/2/rs/1/{i}" for i in range(8))


def test_a_topic_joined_later_is_served_and_one_left_is_not():
    """The service asks the node which topics it relays at each request (issue 68 Q): a topic
    joined through REST's POST /relay/v1/subscriptions is served, one left is refused."""
    from types import SimpleNamespace

    import trio

    from ingest.filter.service import FilterService
    from ingest.filter.settings import FilterSettings

    relayed = {"/waku/2/rs/3/0"}

    def service_of(settings):
        service = FilterService(SimpleNamespace(), "b", settings, bootstrap_servers="unused:1",  # type: ignore[arg-type]
                                relayed=lambda: relayed)

        async def emit(peer, change, acked=False, on_late_ack=None, now=None):
            return True

        service.emit = emit  # type: ignore[method-assign]  # Kafka: acknowledged at once
        return service

    refusing = service_of(FilterSettings(relayed_topics=frozenset(relayed), refuse_unrelayed_topics=True))

    def subscribe(topic, service=refusing):
        return trio.run(service.serve, "p", v2(Req.SUBSCRIBE, topic))[0]

    assert subscribe("/waku/2/rs/3/1") == 400
    relayed.add("/waku/2/rs/3/1")  # joined through REST
    assert subscribe("/waku/2/rs/3/1") == 200
    relayed.discard("/waku/2/rs/3/0")  # left
    assert subscribe("/waku/2/rs/3/0") == 400
    # The default, nwaku's: any topic is taken (the suite's test_filter_update_subscription_add_a_new_pubsub_topic).
    taking = service_of(FilterSettings(relayed_topics=frozenset(relayed)))
    assert subscribe("/waku/2/rs/3/1000", taking) == 200


def test_the_default_takes_an_unrelayed_topic_as_nwaku_does():
    cfg = load_config(["bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=/waku/2/rs/1/0"],
                      environ={})
    s = BridgeSettings.from_config(cfg)
    assert s.filter is not None and s.filter.refuse_unrelayed_topics is False
    cfg = load_config(["bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=/waku/2/rs/1/0",
                       "filter.refuse_unrelayed_topics=true"], environ={})
    s = BridgeSettings.from_config(cfg)
    assert s.filter is not None and s.filter.refuse_unrelayed_topics is True
