"""What one micro-batch of SubscriptionEvents does to the `subscriptions` rows it can touch,
computed in the driver: a pure function from (the batch's events, those rows) to (keys to
delete, rows to write), which the subscriptions job writes with one MERGE on the full key.

The rules, in this order:

1. a BRIDGE_RESTART at time R removes the bridge's rows last *subscribed* before R
   (`subscribed_time` < R; a null one is older than any R), and the batch's events of that bridge
   older than R. Not their `last_refresh`: the restarted bridge holds nothing until a client
   subscribes, so every row of its new run was named by a SUBSCRIBE at >= R and every row of its
   earlier run was last named before R; but a SUBSCRIBE, PING or UNSUBSCRIBE of the new run
   refreshes all the peer's rows, old ones included, and may be read in an earlier batch than
   the restart record (another partition, read ahead under maxOffsetsPerTrigger);
2. per (peer, bridge): the last UNSUBSCRIBE_ALL / EXPIRE removes every row, and so does a
   SUBSCRIBE at t of a peer last refreshed before t - TTL (its subscriptions expired: the bridge
   expired it, and its EXPIRE, produced best-effort, was lost; `expiries`); a REFRESH, a
   SUBSCRIBE or an UNSUBSCRIBE after it raises the `last_refresh` of every row of the peer (never
   lowers it): the TTL is the peer's, as the bridge and nwaku keep it (a peer that subscribes to
   one more content topic, or unsubscribes from one, keeps the others);
3. per criterion: the last SUBSCRIBE / UNSUBSCRIBE after the peer's last reset upserts
   (`last_refresh` = the later of the event and the peer's refresh; `subscribed_time` = the
   SUBSCRIBE's time, never lowered: the latest SUBSCRIBE naming the row) or deletes the row.

Idempotent: a replayed batch, folded over rows that already hold its effect, writes the same
rows.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from schemas import pipeline_records_pb2 as pr

RESET_OPS = ("UNSUBSCRIBE_ALL", "EXPIRE")
# A SUBSCRIBE and an UNSUBSCRIBE refresh the peer as a PING does: the bridge
# (ingest/filter/state.py) and nwaku (waku_filter_v2/subscriptions.nim addSubscription and
# removeSubscription: lastSeen) keep one refresh time per peer.
REFRESH_OPS = ("REFRESH", "SUBSCRIBE", "UNSUBSCRIBE")
RESTART_PEER = "*"  # BRIDGE_RESTART records name no peer

Key = tuple[str, str, str, str]  # (peer_id, bridge_id, pubsub_topic, content_topic)


@dataclass(frozen=True)
class Event:
    peer_id: str
    bridge_id: str
    op: str
    pubsub_topic: str
    content_topics: tuple[str, ...]
    event_time: float
    request_id: str
    protocol: str
    seq: int  # Kafka order: partition << 40 | offset (one peer's events share a partition)


@dataclass(frozen=True)
class Row:
    """One row of `subscriptions` (SUBSCRIPTIONS_SCHEMA's fields, in its order)."""
    peer_id: str
    pubsub_topic: str
    content_topic: str
    bridge_id: str
    protocol: str | None
    request_id: str | None
    subscribed_time: float | None
    last_refresh: float

    @property
    def key(self) -> Key:
        return (self.peer_id, self.bridge_id, self.pubsub_topic, self.content_topic)


@dataclass(frozen=True)
class Effect:
    deleted: list[Key]
    written: list[Row]
    events: int                        # valid events in the batch
    first_subscribe: float | None      # the earliest SUBSCRIBE time in it

    @property
    def changes(self) -> int:
        return len(self.deleted) + len(self.written)


def decode(records: Iterable[tuple[bytes, int, int]]) -> list[Event]:
    """Kafka (value, partition, offset) -> the valid events, as `subscriptions.decode_events`
    keeps them: parsed, naming a peer and a bridge (a restart names the peer "*")."""
    out = []
    for value, partition, offset in records:
        try:
            e = pr.SubscriptionEvent.FromString(value or b"")
        except DecodeError:
            continue
        op = pr.SubscriptionOp.Name(e.op) if e.op in pr.SubscriptionOp.values() else str(e.op)
        if not e.peer_id or not e.bridge_id or (op == "BRIDGE_RESTART" and e.peer_id != RESTART_PEER):
            continue
        out.append(Event(e.peer_id, e.bridge_id, op, e.pubsub_topic, tuple(e.content_topics), e.event_time,
                         e.request_id, e.protocol, (partition << 40) + offset))
    return out


def touched(events: list[Event]) -> tuple[set[tuple[str, str]], dict[str, float]]:
    """Which rows the batch can change: those of its (peer, bridge) pairs, and of each bridge
    that restarted (mapped to its restart time) last subscribed before the restart."""
    restarts = _restarts(events)
    pairs = {(e.peer_id, e.bridge_id) for e in events if e.op != "BRIDGE_RESTART"}
    return pairs, restarts


def _restarts(events: list[Event]) -> dict[str, float]:
    restarts: dict[str, float] = {}
    for e in events:
        if e.op == "BRIDGE_RESTART":
            restarts[e.bridge_id] = max(e.event_time, restarts.get(e.bridge_id, e.event_time))
    return restarts


def _subscribed_since(row: Row, restart: float) -> bool:
    """Whether a SUBSCRIBE at or after `restart` named the row (a null `subscribed_time`: none)."""
    return row.subscribed_time is not None and row.subscribed_time >= restart


def expiries(live: list[Event], rows: Mapping[Key, Row], ttl_s: float) -> dict[tuple[str, str], int]:
    """Per (peer, bridge): the seq after which its earlier rows and events no longer count,
    because it was reset there: the last UNSUBSCRIBE_ALL / EXPIRE (its seq), or a SUBSCRIBE at
    t that found the peer last refreshed before t - ttl_s (the seq before it: the SUBSCRIBE
    applies to a peer whose subscriptions expired). A SUBSCRIBE is the only event a bridge sends
    for a peer it expired (a PING, an UNSUBSCRIBE of it is answered 404 without one), so a lost
    EXPIRE is caught there; a REFRESH or an UNSUBSCRIBE of a peer the table has let expire (its
    REFRESHes lost) still raises every row, the bridge holding them.

    The peer's refresh before an event is the latest SUBSCRIBE / REFRESH / UNSUBSCRIBE time of
    the batch before it (since its last reset), or, before the first, its rows' latest
    `last_refresh`: a replayed batch, whose rows already carry its later events' refreshes,
    finds the same resets within it (the fold stays idempotent)."""
    stored: dict[tuple[str, str], float] = {}
    for r in rows.values():
        pb = (r.peer_id, r.bridge_id)
        stored[pb] = max(r.last_refresh, stored.get(pb, r.last_refresh))
    held: dict[tuple[str, str], float | None] = {}  # the batch's own refresh since a reset (None: none)
    resets: dict[tuple[str, str], int] = {}
    for e in sorted(live, key=lambda e: e.seq):
        pb = (e.peer_id, e.bridge_id)
        if e.op in RESET_OPS:
            resets[pb] = e.seq
            held[pb] = None
            continue
        if e.op not in REFRESH_OPS:
            continue
        last = held[pb] if pb in held else stored.get(pb)
        if e.op == "SUBSCRIBE" and last is not None and last < e.event_time - ttl_s:
            resets[pb] = e.seq - 1
            held[pb] = last = None
        if e.op != "SUBSCRIBE" and last is None:
            continue  # nothing held: a REFRESH / UNSUBSCRIBE refreshes nothing
        prior = held.get(pb)  # the batch's own (None before its first, or after a reset)
        held[pb] = e.event_time if prior is None else max(prior, e.event_time)
    return resets


def effect(events: list[Event], current: Mapping[Key, Row], ttl_s: float) -> Effect:
    """The batch folded over `current` (at least every row `touched` names); `ttl_s`: the
    subscription TTL (filter.subscription_ttl_s)."""
    rows = dict(current)
    subscribes = [e.event_time for e in events if e.op == "SUBSCRIBE"]
    first_subscribe = min(subscribes) if subscribes else None
    restarts = _restarts(events)
    for k, r in list(rows.items()):
        if r.bridge_id in restarts and not _subscribed_since(r, restarts[r.bridge_id]):
            del rows[k]
    live = [e for e in events if e.op != "BRIDGE_RESTART" and e.event_time >= restarts.get(e.bridge_id, e.event_time)]

    reset_seq = expiries(live, rows, ttl_s)
    after = [e for e in live if e.seq > reset_seq.get((e.peer_id, e.bridge_id), -1)]
    refresh: dict[tuple[str, str], float] = {}
    for e in after:
        if e.op in REFRESH_OPS:
            pb = (e.peer_id, e.bridge_id)
            refresh[pb] = max(e.event_time, refresh.get(pb, e.event_time))
    for k, r in list(rows.items()):
        pb = (r.peer_id, r.bridge_id)
        if pb in reset_seq:
            del rows[k]
        elif pb in refresh and refresh[pb] > r.last_refresh:
            rows[k] = dataclasses.replace(r, last_refresh=refresh[pb])

    last: dict[Key, Event] = {}
    for e in after:
        if e.op in ("SUBSCRIBE", "UNSUBSCRIBE"):
            for content in e.content_topics:
                key = (e.peer_id, e.bridge_id, e.pubsub_topic, content)
                if key not in last or e.seq > last[key].seq:
                    last[key] = e
    for key, e in last.items():
        if e.op == "UNSUBSCRIBE":
            rows.pop(key, None)
            continue
        stamp = max(e.event_time, refresh.get((e.peer_id, e.bridge_id), e.event_time))
        old = rows.get(key)
        if old is None:
            rows[key] = Row(e.peer_id, key[2], key[3], e.bridge_id, e.protocol, e.request_id, e.event_time, stamp)
        else:
            subscribed = e.event_time if old.subscribed_time is None else max(old.subscribed_time, e.event_time)
            rows[key] = dataclasses.replace(old, protocol=e.protocol, request_id=e.request_id,
                                            subscribed_time=subscribed, last_refresh=max(old.last_refresh, stamp))
    return Effect(deleted=[k for k in current if k not in rows],
                  written=[r for k, r in rows.items() if current.get(k) != r],
                  events=len(events), first_subscribe=first_subscribe)
