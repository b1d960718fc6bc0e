"""The subscriptions job's fold of a batch over the rows it can touch
(pipeline/filter/batch_effect.py): pure, so every rule is checked here without Spark; the job's
MERGE of the result is tested in tests/integration/test_filter_spark.py."""
from __future__ import annotations

import dataclasses
import random

from pipeline.filter.batch_effect import RESTART_PEER, Row, decode, effect, touched
from schemas import pipeline_records_pb2 as pr

PT = "/waku/2/rs/1/0"
S, U, ALL, EXP, REF = pr.SUBSCRIBE, pr.UNSUBSCRIBE, pr.UNSUBSCRIBE_ALL, pr.EXPIRE, pr.REFRESH
RESTART = pr.BRIDGE_RESTART
TTL = 300.0


def ev(peer: str, op: int, cts=(), t: float = 100.0, bridge: str = "B", rid: str = "r") -> bytes:
    return pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge, op=op, pubsub_topic=PT if cts else "",
                                content_topics=list(cts), event_time=t, request_id=rid,
                                protocol="v2").SerializeToString()


def records(values: list[bytes], partition: int = 0, first: int = 0) -> list[tuple[bytes, int, int]]:
    return [(v, partition, first + i) for i, v in enumerate(values)]


def row(peer: str, ct: str, last: float, bridge: str = "B", since: float = 50.0, rid: str = "old") -> Row:
    return Row(peer, PT, ct, bridge, "v2", rid, since, last)


def fold(current: list[Row], *values: bytes, ttl: float = TTL) -> dict:
    events = decode(records(list(values)))
    out = effect(events, {r.key: r for r in current}, ttl)
    rows = {r.key: r for r in current if r.key not in out.deleted}
    rows.update({r.key: r for r in out.written})
    return {(k[0], k[1], k[3]): (r.last_refresh, r.subscribed_time, r.request_id) for k, r in rows.items()}


def test_invalid_records_are_skipped():
    events = decode([(b"\xff\xffnot an event", 0, 0), (ev("", S, ["a"]), 0, 1),
                     (ev("p", S, ["a"], bridge=""), 0, 2), (ev("p", RESTART), 0, 3),
                     (ev(RESTART_PEER, RESTART), 0, 4), (ev("p", S, ["a"]), 1, 5), (None, 0, 6)])
    assert [(e.peer_id, e.op, e.seq) for e in events] == [("*", "BRIDGE_RESTART", 4), ("p", "SUBSCRIBE", (1 << 40) + 5)]


def test_subscribe_then_unsubscribe_in_kafka_order():
    assert fold([], ev("p", S, ["a", "b"], 100), ev("p", U, ["b"], 101), ev("q", U, ["a"], 101)) == {
        ("p", "B", "a"): (101.0, 100.0, "r")}  # the UNSUBSCRIBE refreshed what p keeps


def test_a_resubscribe_moves_subscribed_time_to_it_and_never_lowers_last_refresh():
    """subscribed_time is the latest SUBSCRIBE naming the row (a bridge restart's rule reads it)."""
    got = fold([row("p", "a", 150.0)], ev("p", S, ["a"], 120, rid="r2"))
    assert got == {("p", "B", "a"): (150.0, 120.0, "r2")}
    # never lowered either (one peer's events are in order; a bridge's clock may step back)
    assert fold([row("p", "a", 150.0, since=130.0)], ev("p", S, ["a"], 120, rid="r2")) == {
        ("p", "B", "a"): (150.0, 130.0, "r2")}
    # a row written without one (null) takes the SUBSCRIBE's
    assert fold([dataclasses.replace(row("p", "a", 150.0), subscribed_time=None)], ev("p", S, ["a"], 120)) == {
        ("p", "B", "a"): (150.0, 120.0, "r")}


def test_reset_removes_the_peers_rows_at_that_bridge_only_before_it():
    current = [row("p", "a", 90.0), row("p", "b", 90.0), row("p", "a", 90.0, bridge="C"), row("q", "a", 90.0)]
    got = fold(current, ev("p", S, ["c"], 100), ev("p", ALL, t=101), ev("p", S, ["a"], 102), ev("q", EXP, t=103))
    assert got == {("p", "B", "a"): (102.0, 102.0, "r"), ("p", "C", "a"): (90.0, 50.0, "old")}


def test_refresh_after_the_reset_raises_every_row():
    got = fold([row("p", "a", 90.0), row("p", "b", 200.0)], ev("p", REF, t=150), ev("p", S, ["c"], 120))
    assert got == {("p", "B", "a"): (150.0, 50.0, "old"), ("p", "B", "b"): (200.0, 50.0, "old"),
                   ("p", "B", "c"): (150.0, 120.0, "r")}


def test_a_subscribe_refreshes_the_peers_other_rows_as_a_ping_does():
    """The TTL is the peer's (the bridge's view, nwaku's lastSeen): a peer that subscribes to one
    more content topic keeps the others (tests/filter_twins.py found the table letting them lapse)."""
    got = fold([row("p", "a", 90.0), row("p", "b", 200.0), row("q", "a", 90.0)], ev("p", S, ["c"], 150))
    assert got == {("p", "B", "a"): (150.0, 50.0, "old"), ("p", "B", "b"): (200.0, 50.0, "old"),
                   ("p", "B", "c"): (150.0, 150.0, "r"), ("q", "B", "a"): (90.0, 50.0, "old")}


def test_an_unsubscribe_refreshes_the_peers_remaining_rows():
    """nwaku's removeSubscription sets the peer's lastSeen (waku_filter_v2/subscriptions.nim), and
    so does the bridge's view: a peer that only unsubscribes keeps the rest of its subscription."""
    current = [row("p", "a", 90.0), row("p", "b", 90.0), row("p", "c", 200.0), row("q", "a", 90.0),
               row("p", "a", 90.0, bridge="C")]
    got = fold(current, ev("p", U, ["b"], 150))
    assert got == {("p", "B", "a"): (150.0, 50.0, "old"), ("p", "B", "c"): (200.0, 50.0, "old"),
                   ("q", "B", "a"): (90.0, 50.0, "old"), ("p", "C", "a"): (90.0, 50.0, "old")}
    # of a content topic the peer does not hold: the others are refreshed all the same
    assert fold([row("p", "a", 90.0)], ev("p", U, ["zzz"], 150)) == {("p", "B", "a"): (150.0, 50.0, "old")}
    # an UNSUBSCRIBE before the peer's reset refreshes nothing after it
    assert fold([row("p", "a", 90.0)], ev("p", U, ["b"], 150), ev("p", ALL, t=151), ev("p", S, ["c"], 152)) == {
        ("p", "B", "c"): (152.0, 152.0, "r")}


def test_a_subscribe_of_a_peer_not_refreshed_within_the_ttl_starts_it_afresh():
    """A lost EXPIRE (produced best-effort): the bridge expired p, so p's next event there is a
    SUBSCRIBE (a PING or UNSUBSCRIBE of a peer the bridge does not hold records nothing). Applied
    to rows last refreshed before its time - TTL, they are expired first: not revived by it."""
    current = [row("p", "a", 100.0), row("p", "b", 100.0), row("p", "a", 100.0, bridge="C"), row("q", "a", 100.0)]
    assert fold(current, ev("p", S, ["c"], 401)) == {("p", "B", "c"): (401.0, 401.0, "r"),
                                                      ("p", "C", "a"): (100.0, 50.0, "old"),
                                                      ("q", "B", "a"): (100.0, 50.0, "old")}
    # a SUBSCRIBE of a row it held starts it afresh as well (subscribed_time is the new one's)
    assert fold(current[:2], ev("p", S, ["a"], 401)) == {("p", "B", "a"): (401.0, 401.0, "r")}
    # within the TTL (the boundary included, as the bridge's sweep keeps it): refreshed, not expired
    assert fold(current[:2], ev("p", S, ["c"], 400)) == {("p", "B", "a"): (400.0, 50.0, "old"),
                                                          ("p", "B", "b"): (400.0, 50.0, "old"),
                                                          ("p", "B", "c"): (400.0, 400.0, "r")}
    # the gap inside one batch: a SUBSCRIBE more than a TTL after the peer's last refresh in it
    assert fold([], ev("p", S, ["a"], 100), ev("p", REF, t=150), ev("p", S, ["b"], 451), ev("p", U, ["zzz"], 460)) == {
        ("p", "B", "b"): (460.0, 451.0, "r")}
    assert fold([], ev("p", S, ["a"], 100), ev("p", REF, t=150), ev("p", S, ["b"], 450)) == {
        ("p", "B", "a"): (450.0, 100.0, "r"), ("p", "B", "b"): (450.0, 450.0, "r")}


def test_a_refresh_or_unsubscribe_of_a_peer_past_the_ttl_expires_nothing():
    """The bridge records a REFRESH / UNSUBSCRIBE only for a peer it holds: rows past the TTL
    then mean REFRESHes were lost (best-effort too), and the bridge holds them: raised, as ever."""
    current = [row("p", "a", 100.0), row("p", "b", 100.0)]
    assert fold(current, ev("p", REF, t=500)) == {("p", "B", "a"): (500.0, 50.0, "old"),
                                                  ("p", "B", "b"): (500.0, 50.0, "old")}
    assert fold(current, ev("p", U, ["b"], 500), ev("p", S, ["c"], 510)) == {
        ("p", "B", "a"): (510.0, 50.0, "old"), ("p", "B", "c"): (510.0, 510.0, "r")}


def test_a_replayed_batch_finds_the_same_expiry():
    """Folded again over its result, whose rows carry the batch's later refreshes, a batch with
    a TTL gap in it resets at the same SUBSCRIBE (the refresh before an event is the batch's own)."""
    values = [ev("p", S, ["a"], 100), ev("p", S, ["b"], 401), ev("p", REF, t=402)]
    events = decode(records(values))
    first = effect(events, {r.key: r for r in [row("p", "z", 90.0)]}, TTL)
    assert sorted(k[3] for k in first.deleted) == ["z"] and sorted(r.content_topic for r in first.written) == ["b"]
    again = effect(events, {r.key: r for r in first.written}, TTL)
    assert again.changes == 0


def test_a_bridge_restart_drops_what_its_earlier_run_left():
    current = [row("p", "a", 150.0), row("p", "gone", 150.0), row("q", "a", 150.0, bridge="C")]
    values = [ev(RESTART_PEER, RESTART, t=200), ev("p", S, ["a"], 201), ev("p", S, ["late"], 199)]
    events = decode(records(values))
    pairs, restarts = touched(events)
    assert pairs == {("p", "B")} and restarts == {"B": 200.0}
    assert fold(current, *values) == {("p", "B", "a"): (201.0, 201.0, "r"), ("q", "C", "a"): (150.0, 50.0, "old")}


def test_a_restart_read_after_the_new_runs_subscribe_drops_the_old_runs_rows():
    """The restart record (one partition) read in a later batch than the new run's first
    SUBSCRIBE (another): that SUBSCRIBE refreshed every row of the peer, its old run's too, so the
    restart goes by when a row was last subscribed, not refreshed (null: before any restart)."""
    current = [row("p", "a", 150.0, since=100.0), row("p", "gone", 150.0, since=100.0),
               dataclasses.replace(row("r", "a", 150.0), subscribed_time=None), row("q", "a", 150.0, bridge="C")]
    first = fold(current, ev("p", S, ["a"], 201, rid="new"), ev("p", REF, t=250))
    assert first == {("p", "B", "a"): (250.0, 201.0, "new"), ("p", "B", "gone"): (250.0, 100.0, "old"),
                     ("r", "B", "a"): (150.0, None, "old"), ("q", "C", "a"): (150.0, 50.0, "old")}
    after = [Row(p, PT, c, b, "v2", rid, since, last) for (p, b, c), (last, since, rid) in first.items()]
    assert fold(after, ev(RESTART_PEER, RESTART, t=200)) == {("p", "B", "a"): (250.0, 201.0, "new"),
                                                             ("q", "C", "a"): (150.0, 50.0, "old")}


def test_a_replayed_batch_writes_nothing_new():
    """Seeded: any batch folded again over its own result changes nothing."""
    seed = 20261128
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(400):
        values = []
        t = rng.uniform(0, 100)
        for _ in range(rng.randint(1, 30)):
            # in time order mostly, with gaps over the TTL (30) at times: a SUBSCRIBE after one resets
            peer, t = rng.choice("pqr"), t + rng.choice((rng.uniform(-5, 10), rng.uniform(0, 10), rng.uniform(20, 40)))
            op = rng.choice([S, S, U, ALL, EXP, REF, RESTART])
            cts = rng.sample("abcd", rng.randint(1, 2)) if op in (S, U) else ()
            values.append(ev(RESTART_PEER if op == RESTART else peer, op, cts, t, bridge=rng.choice("BC")))
        current = {r.key: r for r in (row(p, c, rng.uniform(0, 100), bridge=b)
                                      for p in "pq" for c in "ab" for b in "BC")}
        events = decode(records(values))
        first = effect(events, current, 30.0)
        after = {k: r for k, r in current.items() if k not in first.deleted} | {r.key: r for r in first.written}
        again = effect(events, after, 30.0)
        assert again.changes == 0, values
