"""The bridge's subscription view, the pure request core and the filter codec: limits, status
codes, TTL, dedup."""
from __future__ import annotations

import pytest

from core.config import ConfigError, load_config
from ingest.filter import protocol
from ingest.filter.codec import status_desc
from ingest.filter.pusher import Dedup
from ingest.filter.settings import FilterSettings
from ingest.filter.state import Change, FilterLimits, SubscriptionView
from ingest.framing import frame
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage

PT = "/waku/2/default-waku/proto"


def view(**kw) -> SubscriptionView:
    return SubscriptionView(FilterLimits(**kw))


def test_criteria_checks():
    v = view(max_content_topics_per_request=3)
    assert v.check_criteria(None, ["a"])[0] == 400
    assert v.check_criteria("", ["a"])[0] == 400
    assert v.check_criteria(PT, [])[0] == 400
    assert v.check_criteria(PT, ["a", ""])[0] == 400
    assert v.check_criteria(PT, ["a", "b", "c"])[0] == 200
    code, detail = v.check_criteria(PT, ["a", "b", "c", "d"])
    assert (code, detail) == (400, "exceeds maximum content topics: 3")  # nwaku's text, this view's limit


def test_subscribe_unsubscribe_ping_state():
    v = view()
    assert not v.refresh("p", 1.0)
    assert v.can_unsubscribe("p", PT, ["a"])[0] == 404
    v.subscribe("p", PT, ["a", "b"], 1.0, "v2", "r1")
    assert v.has("p") and v.criteria_count() == 2
    assert v.refresh("p", 2.0)
    assert v.wanted("p", PT, "a").request_id == "r1"
    assert v.wanted("p", PT, "c") is None and v.wanted("q", PT, "a") is None
    assert v.can_unsubscribe("p", PT, ["zzz"])[0] == 404
    v.unsubscribe("p", PT, ["a"], 2.5)
    assert v.wanted("p", PT, "a") is None and v.has("p")
    v.unsubscribe("p", PT, ["b"], 2.6)
    assert not v.has("p") and "p" not in v.peers
    v.subscribe("p", PT, ["a"], 3.0)
    assert v.remove_peer("p") and not v.remove_peer("p")


def test_an_unsubscribe_refreshes_the_peers_other_criteria():
    """nwaku's removeSubscription sets lastSeen (waku_filter_v2/subscriptions.nim): a peer that
    only unsubscribes, and never pings, does not expire a TTL after its SUBSCRIBE."""
    v = view(ttl_s=10)
    v.subscribe("p", PT, ["a", "b", "c"], 0.0)
    v.apply("p", Change(pr.UNSUBSCRIBE, PT, ("a",)), 8.0)
    assert v.peers["p"].refreshed == 8.0 and v.expired(15.0) == [] and v.expired(18.5) == ["p"]
    v.apply("p", Change(pr.UNSUBSCRIBE, PT, ("b", "c")), 9.0)  # the last ones: the peer is gone
    assert "p" not in v.peers and v.expired(30.0) == []


def test_an_unsubscribe_refreshes_as_nwaku_does_whatever_it_answers():
    """The request core: an UNSUBSCRIBE answered 200 records the UNSUBSCRIBE (which refreshes); one
    of criteria the peer does not hold is answered 404 and, the peer being subscribed, records a
    REFRESH (nwaku sets lastSeen before it finds the criterion missing); without subscriptions,
    or malformed (400, checked before nwaku's removeSubscription), nothing."""
    Req = fv2.FilterSubscribeRequest
    v = view(ttl_s=10)
    nothing = protocol.Response(404, "peer has no subscriptions")
    assert protocol.handle("p", _v2(Req.UNSUBSCRIBE, cts=("a",)), v) == nothing
    v.subscribe("p", PT, ["a", "b"], 0.0)
    r = protocol.handle("p", _v2(Req.UNSUBSCRIBE, cts=("zzz",)), v)
    assert (r.code, r.events) == (404, (Change(pr.REFRESH),))
    v.apply("p", r.events[0], 6.0)
    assert v.peers["p"].refreshed == 6.0
    assert protocol.handle("p", _v2(Req.UNSUBSCRIBE, topic=None), v).events == ()
    assert protocol.handle("p", _v2(Req.UNSUBSCRIBE, cts=()), v).events == ()
    r = protocol.handle("p", _v2(Req.UNSUBSCRIBE, cts=("a",)), v)
    assert (r.code, r.events) == (200, (Change(pr.UNSUBSCRIBE, PT, ("a",), "r", "v2"),))
    v.apply("p", r.events[0], 7.0)
    assert v.peers["p"].refreshed == 7.0 and v.expired(16.0) == []


def test_a_peer_past_the_ttl_is_stale_before_the_sweep_expires_it():
    """FilterService.serve expires a stale peer before it handles its request: what the
    subscriptions job and the index find at that time (a SUBSCRIBE of a peer last refreshed before
    t - TTL starts it afresh there), the boundary as `expired`'s."""
    v = view(ttl_s=10)
    v.subscribe("p", PT, ["a"], 0.0)
    assert not v.stale("p", 10.0) and v.stale("p", 10.5) and v.expired(10.5) == ["p"]
    assert not v.stale("q", 100.0)
    v.recorded_late("p", 5.0)  # a change made at 5, answered 503, reached Kafka after all
    assert v.peers["p"].refreshed == 5.0 and not v.stale("p", 15.0)
    v.recorded_late("p", 1.0)  # never lowers it
    v.recorded_late("q", 1.0)  # nothing held: nothing
    assert v.peers["p"].refreshed == 5.0 and "q" not in v.peers


def test_limits_peers_and_criteria():
    v = view(max_peers=2, max_criteria_per_peer=3)
    v.subscribe("p1", PT, ["a", "b"], 0.0)
    v.subscribe("p2", PT, ["a"], 0.0)
    code, detail = v.can_subscribe("p3", PT, ["a"])
    assert code == 503 and "peer limit" in detail
    assert v.can_subscribe("p1", PT, ["b", "c"])[0] == 200     # b is a refresh, c is the 3rd
    code, detail = v.can_subscribe("p1", PT, ["c", "d"])
    assert code == 503 and "criteria limit" in detail


def test_rate_limit_sliding_minute():
    v = view(max_requests_per_peer_per_minute=3)
    assert [v.rate_limited("p", t) for t in (0, 1, 2, 3)] == [False, False, False, True]
    assert not v.rate_limited("q", 3)
    assert not v.rate_limited("p", 60.5)   # the request at 0 left the window
    assert view(max_requests_per_peer_per_minute=0).rate_limited("p", 0) is False


def test_ttl_and_unreachable():
    v = view(ttl_s=10)
    v.subscribe("p", PT, ["a"], 0.0)
    v.subscribe("q", PT, ["a"], 5.0)
    assert v.expired(9.0) == [] and v.expired(12.0) == ["p"]
    v.mark_reachable("q", False, 20.0)
    v.mark_reachable("q", False, 25.0)   # keeps the first time
    assert v.unreachable(79.0, 60.0) == [] and v.unreachable(80.0, 60.0) == ["q"]
    v.mark_reachable("q", True, 81.0)
    assert v.unreachable(200.0, 60.0) == []


def test_dedup_per_peer_bounded():
    d = Dedup(2)
    assert d.admit("p", b"1") is None and d.admit("p", b"1") == "duplicate" and d.admit("q", b"1") is None
    assert d.admit("p", b"2") is None and d.admit("p", b"3") is None
    assert d.admit("p", b"1") is None  # evicted (bound 2)
    d.forget("p")
    assert d.admit("p", b"3") is None


def test_codec_helpers():
    assert status_desc(200) == "OK"
    assert status_desc(404, "peer has no subscriptions") == "NOT_FOUND: peer has no subscriptions"
    assert frame(b"abc") == b"\x03abc"


def test_settings_from_config():
    s = FilterSettings.from_config(load_config(["filter.max_peers=7", "topics.push_prefix=p."], environ={}))
    assert s.limits.max_peers == 7 and s.limits.max_content_topics_per_request == 100
    assert s.limits.ttl_s == 300.0 and s.push_topic("B") == "p.B"
    with pytest.raises(ConfigError, match="filter.max_peers"):
        FilterSettings.from_config(load_config(["filter.max_peers=0"], environ={}))
    with pytest.raises(ConfigError, match="filter.subscription_ttl_s"):
        FilterSettings.from_config(load_config(["filter.subscription_ttl_s=0"], environ={}))


def _v2(kind, topic=PT, cts=("a",), rid="r"):
    req = fv2.FilterSubscribeRequest(request_id=rid, filter_subscribe_type=kind, content_topics=list(cts))
    if topic is not None:
        req.pubsub_topic = topic
    return protocol.from_v2(req)


def test_handle_is_pure_and_events_drive_the_view():
    Req = fv2.FilterSubscribeRequest
    v = view(max_content_topics_per_request=2)
    ping = _v2(Req.SUBSCRIBER_PING, None, ())
    assert protocol.handle("p", ping, v) == protocol.Response(404, "peer has no subscriptions")
    sub = _v2(Req.SUBSCRIBE, cts=("a", "b"))
    r = protocol.handle("p", sub, v)
    assert (r.code, r.events) == (200, (Change(pr.SUBSCRIBE, PT, ("a", "b"), "r", "v2"),))
    assert not v.has("p")  # handle() changed nothing
    for change in r.events:
        v.apply("p", change, 5.0)
    assert v.wanted("p", PT, "b").request_id == "r" and v.peers["p"].refreshed == 5.0
    assert protocol.handle("p", ping, v).events == (Change(pr.REFRESH),)
    assert protocol.handle("p", _v2(Req.SUBSCRIBE, cts=("a", "b", "c")), v).code == 400
    assert protocol.handle("p", _v2(Req.SUBSCRIBE, topic=None), v).code == 400
    assert protocol.handle("p", _v2(Req.UNSUBSCRIBE, cts=("zzz",)), v).code == 404
    unsub = protocol.handle("p", _v2(Req.UNSUBSCRIBE, cts=("a",)), v)
    assert unsub.events == (Change(pr.UNSUBSCRIBE, PT, ("a",), "r", "v2"),)
    v.apply("p", unsub.events[0], 6.0)
    everything = protocol.handle("p", _v2(Req.UNSUBSCRIBE_ALL, None, ()), v)
    assert everything.events[0].op == pr.UNSUBSCRIBE_ALL
    v.apply("p", everything.events[0], 7.0)
    assert not v.has("p")
    assert protocol.handle("p", _v2(Req.UNSUBSCRIBE_ALL, None, ()), v).code == 404
    unknown = protocol.handle("p", _v2(99), v)
    assert unknown.code == 400 and "99" in unknown.detail and unknown.events == ()


def test_v00_and_v2_share_one_core():
    v = view()
    shapes = [
        [f00.FilterRequest.ContentFilter(contentTopics=["a"]),
         f00.FilterRequest.ContentFilter(contentTopics=["b", "a"])],
        [f00.FilterRequest.ContentFilter(contentTopics=["a", "b"])],
    ]
    for filters in shapes:
        rpc = f00.FilterRPC(requestId="x", request=f00.FilterRequest(subscribe=True, topic="", contentFilters=filters))
        req = protocol.from_v00(rpc, PT)
        assert req == protocol.FilterRequest(protocol.SUBSCRIBE, PT, ("a", "b"), "x", "v00")
        assert req.label == "v00_subscribe"
        r = protocol.handle("p", req, v)
        assert r.events == (Change(pr.SUBSCRIBE, PT, ("a", "b"), "x", "v00"),)
    unsub = f00.FilterRPC(requestId="y", request=f00.FilterRequest(
        subscribe=False, topic="/t", contentFilters=shapes[1]))
    assert protocol.handle("p", protocol.from_v00(unsub, PT), v).code == 404


def test_a_peer_that_keeps_pinging_is_not_expired_as_unreachable():
    v = view(ttl_s=300)
    v.subscribe("p", PT, ["a"], 0.0)
    v.mark_reachable("p", False, 10.0)        # pushes fail from t=10 on (e.g. go-waku resets them)
    for t in range(30, 300, 30):              # ... but it pings every 30 s
        assert v.refresh("p", float(t))
        assert v.unreachable(t + 1.0, 60.0) == []
    assert v.unreachable(270.0 + 61.0, 60.0) == ["p"]  # silent for a minute after its last ping


def test_token_bucket_paces_and_refuses():
    from ingest.ratelimit import TokenBucket

    now = [0.0]
    b = TokenBucket(15.0, 20, clock=lambda: now[0])
    assert sum(b.try_take() for _ in range(25)) == 20       # the burst
    assert b.wait_s() == pytest.approx(1 / 15)
    now[0] += 1.0
    assert sum(b.try_take() for _ in range(25)) == 15       # then the rate
    now[0] += 100.0
    assert sum(b.try_take() for _ in range(25)) == 20       # never above the burst


def test_peer_buckets_are_per_peer_and_bounded():
    from ingest.ratelimit import PeerBuckets

    now = [0.0]
    pb = PeerBuckets(1.0, 2.0, clock=lambda: now[0], max_peers=3)
    assert [pb.allow("a") for _ in range(3)] == [True, True, False]
    assert pb.allow("b") and pb.allow("c")
    now[0] += 5.0                                   # every bucket is full again: forgettable
    assert pb.allow("d") and len(pb._buckets) <= 3
    assert PeerBuckets(0.0, 0.0).allow("x")         # 0: no limit


def test_a_restarted_bridge_does_not_push_what_was_received_before_it_started():
    """A restarted filter job replays its last epoch; the bridge's previous run may have pushed
    those messages, and this run's de-duplication memory is new: pushes of messages received
    before this run started (received_time in the PushRecord, copied by the job) are dropped.
    A record without received_time (0: unknown, an older job) is pushed."""
    import time

    from ingest.filter.service import START_MARGIN_S, FilterService

    svc = FilterService(None, "B", FilterSettings(), bootstrap_servers="127.0.0.1:1")
    svc.view.apply("peerA", Change(pr.SUBSCRIBE, PT, ("/a/1/x/proto",)), time.time())

    def rec(h: bytes, received_time: float) -> bytes:
        return pr.PushRecord(peer_id="peerA", pubsub_topic=PT, message_hash=h, received_time=received_time,
                             message=WakuMessage(payload=h, content_topic="/a/1/x/proto")).SerializeToString()

    replayed = rec(b"r" * 32, svc.started_at - 5.0)
    within_margin = rec(b"m" * 32, svc.started_at + START_MARGIN_S / 2)
    fresh = rec(b"f" * 32, time.time())
    unknown = rec(b"u" * 32, 0.0)
    svc._deliver([replayed, within_margin, fresh, unknown])
    assert svc.push_stats.outcomes["before_start"] == 1
    svc._deliver([within_margin, fresh, unknown])       # the three went on to the peer's pusher
    assert svc.push_stats.outcomes["duplicate"] == 3


def test_the_service_expires_a_stale_peer_before_it_serves_it():
    """A request of a peer past the TTL that comes before the sweep finds it expired (an EXPIRE
    recorded first): a PING is 404, as nwaku's isSubscribed answers; a SUBSCRIBE starts it afresh
    (the subscriptions job and the index find its old criteria expired at that time too). Each
    event is stamped with the time the view applied it at."""
    from types import SimpleNamespace

    import trio

    from ingest.filter.service import FilterService

    service = FilterService(SimpleNamespace(), "b", FilterSettings(), bootstrap_servers="unused:1")  # type: ignore[arg-type]
    sent: list[tuple[int, float | None]] = []

    async def emit(peer, change, acked=False, on_late_ack=None, now=None):
        sent.append((change.op, now))
        return True

    service.emit = emit  # type: ignore[method-assign]  # Kafka: acknowledged at once
    Req = fv2.FilterSubscribeRequest
    assert trio.run(service.serve, "p", _v2(Req.SUBSCRIBE, cts=("a", "b")))[0] == 200
    at = service.view.peers["p"].refreshed
    assert sent == [(pr.SUBSCRIBE, at)]
    assert trio.run(service.serve, "p", _v2(Req.SUBSCRIBER_PING, None, ()))[0] == 200
    service.view.peers["p"].refreshed -= service.view.limits.ttl_s + 1  # the sweep has not run yet
    assert trio.run(service.serve, "p", _v2(Req.SUBSCRIBER_PING, None, ()))[0] == 404
    assert [op for op, _ in sent] == [pr.SUBSCRIBE, pr.REFRESH, pr.EXPIRE] and "p" not in service.view.peers
    service.view.subscribe("p", PT, ["a", "b"], 0.0)  # past the TTL again
    assert trio.run(service.serve, "p", _v2(Req.SUBSCRIBE, cts=("c",)))[0] == 200
    assert [op for op, _ in sent[3:]] == [pr.EXPIRE, pr.SUBSCRIBE] and sent[3][1] == sent[4][1]
    assert set(service.view.peers["p"].criteria) == {(PT, "c")}
