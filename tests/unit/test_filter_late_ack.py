"""A filter change the bridge answered 503 (Kafka did not acknowledge it in time) and undid in
its view may still land in waku.subscriptions: `undo_late_change` gives the changes that bring
the recorded state back to what the bridge holds and answered."""
from __future__ import annotations

from ingest.filter.state import Change, FilterLimits, SubscriptionView, undo_late_change
from schemas import pipeline_records_pb2 as pr

T = "/waku/2/rs/1/0"


def replay(changes: list[Change]) -> dict[tuple[str, str], tuple[str, str]]:
    """What the subscriptions job would hold for one peer after these records, in order."""
    view = SubscriptionView(FilterLimits())
    for c in changes:
        view.apply("p", c, 0.0)
    state = view.peers.get("p")
    return {k: (c.protocol, c.request_id) for k, c in (state.criteria.items() if state else ())}


def held(view: SubscriptionView) -> dict[tuple[str, str], tuple[str, str]]:
    state = view.peers.get("p")
    return {k: (c.protocol, c.request_id) for k, c in (state.criteria.items() if state else ())}


def test_a_refused_subscribe_that_lands_is_unsubscribed_for_what_the_peer_did_not_hold():
    view = SubscriptionView(FilterLimits())
    first = Change(pr.SUBSCRIBE, T, ("/a/1/x/proto",), "r1", "v2")
    view.apply("p", first, 0.0)
    late = Change(pr.SUBSCRIBE, T, ("/a/1/x/proto", "/a/1/y/proto"), "r2", "v2")  # answered 503, undone
    undo = undo_late_change(late, view.snapshot("p"))
    # x was held under r1: the late SUBSCRIBE gave it r2, so it is subscribed again as held
    assert undo == [Change(pr.UNSUBSCRIBE, T, ("/a/1/y/proto",), "r2", "v2"),
                    Change(pr.SUBSCRIBE, T, ("/a/1/x/proto",), "r1", "v2")]
    assert replay([first, late, *undo]) == held(view)


def test_a_refused_subscribe_of_held_criteria_gives_them_back_their_protocol_and_request_id():
    view = SubscriptionView(FilterLimits())
    first = Change(pr.SUBSCRIBE, T, ("/a/1/x/proto", "/a/1/y/proto"), "r1", "v2")
    view.apply("p", first, 0.0)
    same = Change(pr.SUBSCRIBE, T, ("/a/1/x/proto",), "r1", "v2")
    assert undo_late_change(same, view.snapshot("p")) == []  # nothing it changed
    late = Change(pr.SUBSCRIBE, T, ("/a/1/x/proto", "/a/1/y/proto"), "r5", "v00")  # answered 503, undone
    undo = undo_late_change(late, view.snapshot("p"))
    assert undo == [Change(pr.SUBSCRIBE, T, ("/a/1/x/proto", "/a/1/y/proto"), "r1", "v2")]
    assert replay([first, late, *undo]) == held(view)


def test_a_refused_unsubscribe_that_lands_is_subscribed_again():
    view = SubscriptionView(FilterLimits())
    subs = [Change(pr.SUBSCRIBE, T, ("/a/1/x/proto", "/a/1/y/proto"), "r1", "v2"),
            Change(pr.SUBSCRIBE, T, ("/a/1/z/proto",), "r0", "v00")]
    for c in subs:
        view.apply("p", c, 0.0)
    for late in (Change(pr.UNSUBSCRIBE, T, ("/a/1/x/proto", "/a/1/z/proto", "/a/1/q/proto"), "r3", "v2"),
                 Change(pr.UNSUBSCRIBE_ALL, None, (), "r4", "v2")):
        undo = undo_late_change(late, view.snapshot("p"))
        assert replay([*subs, late, *undo]) == held(view)


def test_nothing_to_undo():
    view = SubscriptionView(FilterLimits())
    assert undo_late_change(Change(pr.SUBSCRIBE, T, ("/a/1/x/proto",)), None) == [
        Change(pr.UNSUBSCRIBE, T, ("/a/1/x/proto",))]
    assert undo_late_change(Change(pr.UNSUBSCRIBE_ALL, None, ()), view.snapshot("p")) == []
    assert undo_late_change(Change(pr.REFRESH, None, ()), None) == []
