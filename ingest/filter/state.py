"""The bridge's view of its own peers' subscriptions: answers PING / UNSUBSCRIBE with the real
state, enforces the limits, and tells the pusher whether a push is still wanted.

Pure Python and clock-injected (``now`` arguments, seconds): unit tested without hosts.
Each mutating call returns ``(status, detail)``; 200 means the change was applied.
"""
from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field

from ingest.filter.codec import BAD_REQUEST, NOT_FOUND, OK, SERVICE_UNAVAILABLE
from schemas import pipeline_records_pb2 as pr


@dataclass(frozen=True)
class FilterLimits:
    max_content_topics_per_request: int = 100
    max_criteria_per_peer: int = 1000
    max_peers: int = 1000
    max_requests_per_peer_per_minute: int = 30
    ttl_s: float = 300.0


@dataclass(frozen=True)
class Change:
    """One subscription change of a peer: a SubscriptionEvent (core/records.py) produced to
    waku.subscriptions and applied to the view (SubscriptionView.apply) once recorded."""
    op: pr.SubscriptionOp
    pubsub_topic: str | None = ""
    content_topics: tuple[str, ...] = ()
    request_id: str = ""
    protocol: str = ""


@dataclass
class Criterion:
    protocol: str      # "v2" or "v00"
    request_id: str    # the subscribing request (v00 pushes carry it)


@dataclass
class PeerState:
    criteria: dict[tuple[str, str], Criterion] = field(default_factory=dict)
    refreshed: float = 0.0                 # last SUBSCRIBE / PING / UNSUBSCRIBE
    unreachable_since: float | None = None  # set by the pusher while pushes fail / no connection


def undo_late_change(change: Change, state: PeerState | None) -> list[Change]:
    """The changes that bring the recorded subscriptions of a peer back to `state` (what the
    bridge holds now) after `change`, which the bridge answered 503 (Kafka did not acknowledge
    it in time) and undid in its view, was acknowledged after all: the subscriptions job then
    applies `change`, and these, produced after it under the same key, cancel it. Empty when
    nothing is to undo (a refresh, or a later request already did it)."""
    criteria = state.criteria if state is not None else {}
    if change.op == pr.SUBSCRIBE:
        topic = change.pubsub_topic or ""
        extra = tuple(ct for ct in change.content_topics if (topic, ct) not in criteria)
        undo = [Change(pr.UNSUBSCRIBE, topic, extra, change.request_id, change.protocol)] if extra else []
        # A criterion held already took the late SUBSCRIBE's protocol and request id (v00 pushes
        # carry it): subscribed again as held (tests/filter_twins.py found this one).
        again: dict[tuple[str, str], list[str]] = {}
        for ct in change.content_topics:
            c = criteria.get((topic, ct))
            if c is not None and (c.protocol, c.request_id) != (change.protocol, change.request_id):
                again.setdefault((c.protocol, c.request_id), []).append(ct)
        return undo + [Change(pr.SUBSCRIBE, topic, tuple(cts), request_id, protocol)
                       for (protocol, request_id), cts in again.items()]
    if change.op == pr.UNSUBSCRIBE:
        topic = change.pubsub_topic or ""
        gone = [(topic, ct) for ct in change.content_topics if (topic, ct) in criteria]
    elif change.op in (pr.UNSUBSCRIBE_ALL, pr.EXPIRE):
        gone = list(criteria)
    else:
        return []
    # Subscribe again what the bridge still holds, grouped as it was subscribed.
    groups: dict[tuple[str, str, str], list[str]] = {}
    for key in gone:
        c = criteria[key]
        groups.setdefault((key[0], c.protocol, c.request_id), []).append(key[1])
    return [Change(pr.SUBSCRIBE, topic, tuple(cts), request_id, protocol)
            for (topic, protocol, request_id), cts in groups.items()]


class SubscriptionView:
    """peer id (base58) -> its criteria (pubsub topic, content topic) -> Criterion."""

    def __init__(self, limits: FilterLimits) -> None:
        self.limits = limits
        self.peers: dict[str, PeerState] = {}
        self._requests: dict[str, collections.deque[float]] = {}

    # -- checks -----------------------------------------------------------------------------

    def rate_limited(self, peer: str, now: float) -> bool:
        """Count one request of `peer`; True when it is over the per-minute limit."""
        limit = self.limits.max_requests_per_peer_per_minute
        if limit <= 0:
            return False
        q = self._requests.setdefault(peer, collections.deque())
        while q and q[0] <= now - 60.0:
            q.popleft()
        if len(q) >= limit:
            return True
        q.append(now)
        return False

    def check_criteria(self, pubsub_topic: str | None, content_topics: Iterable[str]) -> tuple[int, str]:
        cts = list(content_topics)
        if not pubsub_topic:
            return BAD_REQUEST, "pubsub topic missing"
        if not cts:
            return BAD_REQUEST, "content topics missing"
        if any(not ct for ct in cts):
            return BAD_REQUEST, "empty content topic"
        if len(cts) > self.limits.max_content_topics_per_request:
            # nwaku's text (waku_filter_v2/protocol.nim subscribe and unsubscribe)
            return BAD_REQUEST, f"exceeds maximum content topics: {self.limits.max_content_topics_per_request}"
        return OK, ""

    # -- requests -----------------------------------------------------------------------------

    def has(self, peer: str) -> bool:
        state = self.peers.get(peer)
        return bool(state and state.criteria)

    def can_subscribe(self, peer: str, pubsub_topic: str, content_topics: Iterable[str]) -> tuple[int, str]:
        """Whether subscribe() would succeed (checked before the event is produced)."""
        status = self.check_criteria(pubsub_topic, content_topics)
        if status[0] != OK:
            return status
        state = self.peers.get(peer)
        if state is None and len(self.peers) >= self.limits.max_peers:
            return SERVICE_UNAVAILABLE, f"peer limit reached ({self.limits.max_peers})"
        have = state.criteria if state else {}
        new = {(pubsub_topic, ct) for ct in content_topics} - have.keys()
        if len(have) + len(new) > self.limits.max_criteria_per_peer:
            return SERVICE_UNAVAILABLE, f"criteria limit reached ({self.limits.max_criteria_per_peer} per peer)"
        return OK, ""

    def subscribe(self, peer: str, pubsub_topic: str, content_topics: Iterable[str], now: float,
                  protocol: str = "v2", request_id: str = "") -> None:
        state = self.peers.setdefault(peer, PeerState())
        for ct in content_topics:
            state.criteria[(pubsub_topic, ct)] = Criterion(protocol, request_id)
        state.refreshed = now

    def can_unsubscribe(self, peer: str, pubsub_topic: str, content_topics: Iterable[str]) -> tuple[int, str]:
        status = self.check_criteria(pubsub_topic, content_topics)
        if status[0] != OK:
            return status
        state = self.peers.get(peer)
        if not state or not any((pubsub_topic, ct) in state.criteria for ct in content_topics):
            return NOT_FOUND, "peer has no subscriptions"
        return OK, ""

    def unsubscribe(self, peer: str, pubsub_topic: str, content_topics: Iterable[str], now: float) -> None:
        """Removes the criteria and refreshes the peer's others, as nwaku's removeSubscription
        (waku_filter_v2/subscriptions.nim: `lastSeen`) does; a peer left without criteria is gone."""
        state = self.peers.get(peer)
        if state is None:
            return
        for ct in content_topics:
            state.criteria.pop((pubsub_topic, ct), None)
        if not state.criteria:
            del self.peers[peer]
        else:
            state.refreshed = now

    def remove_peer(self, peer: str) -> bool:
        """UNSUBSCRIBE_ALL / expiry: True when the peer had subscriptions."""
        state = self.peers.pop(peer, None)
        return bool(state and state.criteria)

    def refresh(self, peer: str, now: float) -> bool:
        """PING: True (and refreshed) when the peer has subscriptions."""
        state = self.peers.get(peer)
        if not state or not state.criteria:
            return False
        state.refreshed = now
        return True

    def recorded_late(self, peer: str, at: float) -> None:
        """A change of `peer` made at `at`, answered 503 and undone here, reached Kafka after
        all: the subscriptions job and the index refreshed the peer then (its undo, stamped `at`
        too, cannot lower that), so the view takes that refresh as well: one refresh time in the
        three (tests/filter_twins.py found the table keeping a peer the bridge had expired)."""
        state = self.peers.get(peer)
        if state is not None and state.criteria:
            state.refreshed = max(state.refreshed, at)

    def snapshot(self, peer: str) -> PeerState | None:
        """A copy of the peer's state (to restore when a change cannot be recorded)."""
        state = self.peers.get(peer)
        if state is None:
            return None
        return PeerState(dict(state.criteria), state.refreshed, state.unreachable_since)

    def restore(self, peer: str, state: PeerState | None) -> None:
        if state is None or not state.criteria:
            self.peers.pop(peer, None)
        else:
            self.peers[peer] = state

    def apply(self, peer: str, change: Change, now: float) -> None:
        """Apply a recorded change (what the subscriptions job applies to Delta, here for this
        bridge's own peers)."""
        op = change.op
        if op == pr.SUBSCRIBE:
            self.subscribe(peer, change.pubsub_topic or "", change.content_topics, now, change.protocol,
                           change.request_id)
        elif op == pr.UNSUBSCRIBE:
            self.unsubscribe(peer, change.pubsub_topic or "", change.content_topics, now)
        elif op in (pr.UNSUBSCRIBE_ALL, pr.EXPIRE):
            self.remove_peer(peer)
        elif op == pr.REFRESH:
            self.refresh(peer, now)

    # -- pusher and sweeps --------------------------------------------------------------------

    def wanted(self, peer: str, pubsub_topic: str, content_topic: str) -> Criterion | None:
        """The criterion a push for (peer, topic, content topic) serves, or None (unsubscribed
        since the Spark job matched it: the push is dropped)."""
        state = self.peers.get(peer)
        return state.criteria.get((pubsub_topic, content_topic)) if state else None

    def expired(self, now: float) -> list[str]:
        """Peers whose criteria were not refreshed within the TTL (not removed here)."""
        cutoff = now - self.limits.ttl_s
        return [p for p, s in self.peers.items() if s.refreshed < cutoff]

    def stale(self, peer: str, now: float) -> bool:
        """Whether `peer` is one of `expired(now)`: a request that comes before the sweep expired
        it finds it expired (the subscriptions job and the index find it so at that time)."""
        state = self.peers.get(peer)
        return state is not None and state.refreshed < now - self.limits.ttl_s

    def unreachable(self, now: float, timeout_s: float) -> list[str]:
        """Peers that could not be pushed to for `timeout_s` and did not ping or subscribe in
        that time either (a peer that keeps pinging is alive, whatever its pushes do)."""
        return [p for p, s in self.peers.items()
                if s.unreachable_since is not None and now - s.unreachable_since >= timeout_s
                and now - s.refreshed >= timeout_s]

    def mark_reachable(self, peer: str, reachable: bool, now: float) -> None:
        state = self.peers.get(peer)
        if state is None:
            return
        if reachable:
            state.unreachable_since = None
        elif state.unreachable_since is None:
            state.unreachable_since = now

    def criteria_count(self) -> int:
        return sum(len(s.criteria) for s in self.peers.values())

    def forget_requests(self, now: float) -> None:
        """Drop rate-limit windows that are empty (bounded memory)."""
        for peer in [p for p, q in self._requests.items() if not q or q[-1] <= now - 60.0]:
            del self._requests[peer]
