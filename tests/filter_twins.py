"""The filter subscription state machine's three forms driven through one seeded sequence (issue
69): the bridge's view (ingest/filter/state.py, through the request core ingest/filter/protocol.py
as ingest/filter/service.py calls it), the subscriptions job's fold of a batch of events over the
`subscriptions` rows (pipeline/filter/subscriptions.apply_records -> batch_effect, over an
in-memory table), and the filter job's resident index (jvm/src/waku/pipeline/CriteriaIndex.java,
replayed from jvm/test/subscription_vectors.json by CriteriaIndexTwinsTest).

A step is one thing that happens: a request of a peer at a bridge (subscribe, unsubscribe,
unsubscribe-all, ping; v2, or v00's subscribe), time passing (the bridge's sweep expires peers
past the TTL and unreachable ones, refreshes connected v00 subscribers), a peer dis- or
reconnecting, a bridge restart (its view forgotten, a BRIDGE_RESTART event), a change the bridge
answered 503 that Kafka acknowledged late (the change and then its undo, `undo_late_change`), a
filter job restart (the index rebuilt from a snapshot of the committed table plus the events from
the committed offsets: the JVM side). Every step produces the SubscriptionEvents the bridge
would (core.records.subscription_event), appended to one log. After each step the criteria the
bridge holds must equal those live in the table after the events not yet committed (folded as one
batch over the committed table; committed at random steps, so batches of several events) and
those live in the index.

Modelled on purpose, where the forms differ by design:
* the sweep runs at each step's time (the service's runs every second): a long step is a sweep
  that came late, which the three must agree on as well;
* the table's own TTL delete (`SubscriptionsJob.expire_now`) runs with its grace, at random steps,
  once the job has written every event older than the grace (the grace is its longest wait for a
  batch: a delete that ran before a refresh older than that was written would drop a row the bridge
  holds); it must never remove a criterion the bridge holds; liveness is read as the filter job
  reads it (`last_refresh` within the TTL: criteria.write_snapshot, CriteriaIndex.match);
* a restarted bridge starts a second after its last event (a process start takes longer than
  that): its BRIDGE_RESTART time is after every event of its earlier run, as it is in production;
* the jobs read Kafka's partitions unevenly (the subscriptions job under maxOffsetsPerTrigger, the
  index's consumer as fetches come): at a bridge restart the partition of its BRIDGE_RESTART record
  is read late at times (`STALL`): that record and what follows it on its partition are read a few
  steps later, after the new run's first events on the other partitions (committed in earlier
  batches, and applied earlier by the index), so the restart must still drop what the earlier run
  left, though those events refreshed the peer's old criteria. While a partition is held back the
  table and the index lag the bridge: the step is not compared (`held`), and the TTL's delete and
  the index's purge wait (the delete's grace would not cover the wait);
* an EXPIRE of the TTL sweep is lost at times (produced best-effort): the peer's next event at
  that bridge is a SUBSCRIBE, which must find its old criteria expired in the table and the index
  (batch_effect.expiries), not revive them; every other event is recorded (an EXPIRE of an
  unreachable peer, within its TTL, or a REFRESH lost are known gaps, docs/filter-service.md), and
  the rate limit (checked by the service before the request core) is off.

What it found (fixed): a SUBSCRIBE did not refresh the peer's other criteria in the table and the
index (the bridge and nwaku keep one refresh time per peer), the undo of a late SUBSCRIBE left
held criteria with the refused request's protocol and request id, an UNSUBSCRIBE refreshed
the peer in none of the three (nwaku's removeSubscription does), and a BRIDGE_RESTART read after
the new run's SUBSCRIBE of a peer kept that peer's old criteria in the table and the index (the
SUBSCRIBE had refreshed them: the restart now goes by each criterion's latest SUBSCRIBE).

    python -m tests.filter_twins [--seed N] [--steps N]   # print the steps, and any difference
"""
from __future__ import annotations

import argparse
import json
import random
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.records import subscription_event
from ingest.filter.protocol import PING, SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_ALL, FilterRequest, handle
from ingest.filter.state import Change, FilterLimits, SubscriptionView, undo_late_change
from pipeline.filter.batch_effect import Effect, Key, Row
from schemas import pipeline_records_pb2 as pr

SEED = 6920261202
STEPS = 400
T0 = 1_800_000_000.0
TTL_S = 300.0
UNREACHABLE_S = 60.0
LOST_EXPIRE = 0.3  # of the TTL sweep's EXPIREs
STALL = 0.7  # of the bridge restarts: the restart record's partition is read 2-8 steps late
EXPIRY_GRACE_S = 5.0  # the job's trigger seconds: rows are deleted that much after their TTL
PARTITIONS = 3
BRIDGES = ("b1", "b2")
PEERS = ("p1", "p2", "p3", "p4")
PUBSUB = ("/waku/2/rs/1/0", "/waku/2/rs/1/1")
CONTENT = ("/a/x", "/a/y", "/a/z", "/a/w")
# Small, so the sequence reaches them: 3 topics a request, 5 criteria a peer, 3 peers a bridge.
LIMITS = FilterLimits(max_content_topics_per_request=3, max_criteria_per_peer=5, max_peers=3,
                      max_requests_per_peer_per_minute=0, ttl_s=TTL_S)
RESTART_PEER = "*"

Criterion = tuple[str, str, str, str, str, str]  # peer, bridge, pubsub, content, protocol, request id


def line(c: Criterion) -> str:
    return "\t".join(c)


# -- the bridge ------------------------------------------------------------------------------------

class Bridge:
    """One bridge's filter service as ingest/filter/service.py runs it, without hosts or Kafka:
    `serve` is FilterService.serve (rate limit off), `sweep` FilterService._sweep (no push
    failures), `refused_late` a change answered 503 then acknowledged (serve, then _undo_late).
    `lose_expire`: whether a TTL EXPIRE is lost (recorded in `lost`: peer, time)."""

    def __init__(self, bridge_id: str, lose_expire: Callable[[], bool] = lambda: False) -> None:
        self.bridge_id = bridge_id
        self.view = SubscriptionView(LIMITS)
        self.disconnected: set[str] = set()
        self.lose_expire = lose_expire
        self.lost: list[tuple[str, float]] = []

    def event(self, peer: str, change: Change, now: float) -> tuple[bytes, bytes]:
        return subscription_event(peer, self.bridge_id, change.op, now, change.pubsub_topic or "",
                                  change.content_topics, change.request_id, change.protocol)

    def serve(self, peer: str, request: FilterRequest, now: float) -> tuple[int, list[tuple[bytes, bytes]]]:
        out = self.expire(peer, "ttl", now) if self.view.stale(peer, now) else []
        response = handle(peer, request, self.view)
        for change in response.events:
            out.append(self.event(peer, change, now))
            self.view.apply(peer, change, now)
            if change.op == pr.REFRESH:
                self.view.mark_reachable(peer, True, now)
        return response.code, out

    def refused_late(self, peer: str, request: FilterRequest, then: FilterRequest | None,
                     now: float) -> tuple[int, list[tuple[bytes, bytes]]]:
        """`request` answered 503 (Kafka did not acknowledge in time: the view restored) but
        recorded; `then` (if any) served meanwhile; then Kafka's late acknowledgement and the
        changes that undo it against what the view holds by then."""
        out = self.expire(peer, "ttl", now) if self.view.stale(peer, now) else []
        response = handle(peer, request, self.view)
        late = [c for c in response.events if c.op != pr.REFRESH]
        for change in response.events:
            if change.op == pr.REFRESH:  # best effort, never answered 503 (a 404 UNSUBSCRIBE's)
                out.append(self.event(peer, change, now))
                self.view.apply(peer, change, now)
                self.view.mark_reachable(peer, True, now)
                continue
            before = self.view.snapshot(peer)
            self.view.apply(peer, change, now)
            out.append(self.event(peer, change, now))  # Kafka has it, the bridge does not know
            self.view.restore(peer, before)
        if then is not None:
            out += self.serve(peer, then, now)[1]
        for change in late:  # FilterService._undo_late
            self.view.recorded_late(peer, now)
            out += [self.event(peer, c, now) for c in undo_late_change(change, self.view.snapshot(peer))]
        return (503 if late else response.code), out

    def expire(self, peer: str, reason: str, now: float) -> list[tuple[bytes, bytes]]:
        if not self.view.remove_peer(peer):
            return []
        if reason == "ttl" and self.lose_expire():
            self.lost.append((peer, now))
            return []
        return [self.event(peer, Change(pr.EXPIRE, request_id=reason), now)]

    def sweep(self, now: float) -> list[tuple[bytes, bytes]]:
        out = []
        for peer in self.view.expired(now):
            out += self.expire(peer, "ttl", now)
        for peer, state in list(self.view.peers.items()):
            if peer in self.disconnected:
                self.view.mark_reachable(peer, False, now)
            else:
                self.view.mark_reachable(peer, True, now)
                v00 = any(c.protocol == "v00" for c in state.criteria.values())
                if now - state.refreshed > LIMITS.ttl_s / 2 and v00:
                    state.refreshed = now
                    out.append(self.event(peer, Change(pr.REFRESH, protocol="v00"), now))
        for peer in self.view.unreachable(now, UNREACHABLE_S):
            out += self.expire(peer, "unreachable", now)
        return out

    def restart(self, now: float) -> list[tuple[bytes, bytes]]:
        self.view = SubscriptionView(LIMITS)
        self.disconnected = set()
        return [subscription_event(RESTART_PEER, self.bridge_id, pr.BRIDGE_RESTART, now)]

    def criteria(self) -> set[Criterion]:
        return {(peer, self.bridge_id, topic, content, c.protocol, c.request_id)
                for peer, state in self.view.peers.items() for (topic, content), c in state.criteria.items()}


# -- the subscriptions table -----------------------------------------------------------------------

class MemoryTable:
    """pipeline.filter.subscriptions_table.SubscriptionsTable over a dict: what a MERGE of an
    Effect and the TTL's DELETE do to the rows (the same predicates as the Delta writers')."""

    def __init__(self, rows: dict[Key, Row] | None = None) -> None:
        self.rows: dict[Key, Row] = dict(rows or {})

    def touched_rows(self, peers: Sequence[str], bridges: Sequence[str]) -> Iterable[Row]:
        return [r for r in self.rows.values() if r.peer_id in peers or r.bridge_id in bridges]

    def write(self, effect: Effect) -> None:
        for k in effect.deleted:
            self.rows.pop(k, None)
        for r in effect.written:
            self.rows[r.key] = r

    def expire(self, cutoff: float) -> None:
        self.rows = {k: r for k, r in self.rows.items() if not r.last_refresh < cutoff}

    def earliest_refresh(self) -> float:
        return min((r.last_refresh for r in self.rows.values()), default=float("inf"))

    def live(self, now: float) -> list[Row]:
        """The rows the filter job reads as live (criteria.write_snapshot's filter)."""
        return [r for r in self.rows.values() if r.last_refresh >= now - TTL_S]

    def criteria(self, now: float) -> set[Criterion]:
        return {(r.peer_id, r.bridge_id, r.pubsub_topic, r.content_topic, r.protocol or "", r.request_id or "")
                for r in self.live(now)}


# -- the sequence ----------------------------------------------------------------------------------

@dataclass
class Step:
    index: int
    what: str
    now: float
    events: list[bytes]                     # SubscriptionEvent values the jobs read in the step, in read order
    bridge: set[Criterion]                  # what the bridges hold after the step
    table: set[Criterion]                   # live in the table after the pending events
    replayed_changes: int | None = None     # a committed batch folded again over its result
    rebuild: dict[str, Any] | None = None   # the filter job restarted: snapshot and offset
    purge: bool = False                     # the index purges its expired criteria (JVM side)
    held: bool = False                      # a partition is held back: the table and index lag the bridge


@dataclass
class Twins:
    seed: int
    steps: int = STEPS
    rng: random.Random = field(init=False)
    bridges: dict[str, Bridge] = field(init=False)
    # (value, partition, offset) in the order the jobs read them: each partition's in its order
    log: list[tuple[bytes, int, int]] = field(init=False, default_factory=list)
    table: MemoryTable = field(init=False, default_factory=MemoryTable)
    committed: int = 0
    now: float = T0
    request_no: int = 0
    # A partition read late (STALL): its records from a bridge restart's on, readable at a step.
    stalled: int | None = None
    stalled_until: int = 0
    stalled_records: list[tuple[bytes, int, int]] = field(init=False, default_factory=list)
    # The restarts held back: (bridge, restart time, the peers its earlier run held).
    stalled_restarts: list[tuple[str, float, set[str]]] = field(init=False, default_factory=list)
    # Batches committed with a SUBSCRIBE of a restarted bridge's new run, of a peer its earlier run
    # held, while the restart record was held back (the case the stall is for).
    read_ahead: int = 0
    # Peers a restarted bridge's earlier run held: their clients subscribe there again (a PING
    # answered 404 says the bridge forgot them), mostly within the next steps.
    resubscribe: list[tuple[str, str]] = field(init=False, default_factory=list)  # (bridge, peer)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.bridges = {b: Bridge(b, lambda: self.rng.random() < LOST_EXPIRE) for b in BRIDGES}
        self._offsets = [0] * PARTITIONS

    def record(self, events: list[tuple[bytes, bytes]]) -> None:
        for key, value in events:
            partition = zlib.crc32(key) % PARTITIONS  # keyed by peer id: one peer's events in order
            rec = (value, partition, self._offsets[partition])
            self._offsets[partition] += 1
            (self.stalled_records if partition == self.stalled else self.log).append(rec)

    def stall(self, index: int, key: bytes, bridge: Bridge, holders: set[str]) -> None:
        """The partition of a restart record (its Kafka key) read late from it on (unless one is already)."""
        if self.stalled is None:
            self.stalled = zlib.crc32(key) % PARTITIONS
            self.stalled_until = index + self.rng.randint(2, 8)
        if zlib.crc32(key) % PARTITIONS == self.stalled:
            self.stalled_restarts.append((bridge.bridge_id, self.now, holders))

    def release(self, index: int) -> None:
        """The held-back partition read: its records follow what was read (its own order kept)."""
        if self.stalled is not None and index >= self.stalled_until:
            self.log += self.stalled_records
            self.stalled, self.stalled_records, self.stalled_restarts = None, [], []

    # requests: mostly well-formed, some over the limits, some naming what is not held
    def contents(self, peer: str, bridge: Bridge, topic: str) -> tuple[str, ...]:
        rng = self.rng
        r = rng.random()
        if r < 0.04:
            return ()
        if r < 0.07:
            return ("/a/x", "")
        held = [c for (t, c) in (bridge.view.peers[peer].criteria if peer in bridge.view.peers else {}) if t == topic]
        if held and rng.random() < 0.6:
            return tuple(rng.sample(held, rng.randint(1, min(3, len(held)))))
        return tuple(rng.sample(CONTENT, rng.choice((1, 1, 2, 2, 3, 1, 2, 3, 4))))

    def request(self, peer: str, bridge: Bridge, kind: str) -> FilterRequest:
        rng = self.rng
        self.request_no += 1
        rid = f"r{self.request_no}"
        if kind in (PING, UNSUBSCRIBE_ALL):
            return FilterRequest(kind, request_id=rid)
        topic = None if rng.random() < 0.03 else rng.choice(
            [t for (t, _) in bridge.view.peers[peer].criteria] if peer in bridge.view.peers and kind == UNSUBSCRIBE
            and rng.random() < 0.7 else PUBSUB)
        protocol = "v00" if kind == SUBSCRIBE and rng.random() < 0.15 else "v2"
        return FilterRequest(kind, topic, self.contents(peer, bridge, topic or ""), rid, protocol)

    def describe(self, peer: str, bridge: Bridge, req: FilterRequest) -> str:
        topic = req.pubsub_topic or "-"
        return f"{req.protocol} {req.kind} {peer}@{bridge.bridge_id} {topic} {list(req.content_topics)}"

    def step(self, index: int) -> Step:
        rng = self.rng
        read = len(self.log)
        self.release(index)
        kind = rng.choices(("request", "advance", "connect", "restart", "refused_late", "rebuild"),
                           (62, 10, 6, 2, 6, 3))[0]
        self.now = round(self.now + (rng.uniform(20, 1.3 * TTL_S) if kind == "advance" else rng.uniform(0.2, 15)), 3)
        events = []
        for b in self.bridges.values():
            events += b.sweep(self.now)
        what = rng.choices((SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_ALL, PING), (6, 3, 1, 2))[0]
        if kind == "refused_late":
            what = rng.choice((SUBSCRIBE, SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_ALL))
        holders = [(b, p) for b in self.bridges.values() for p in b.view.peers]
        if kind == "request" and self.resubscribe and rng.random() < 0.6:
            b, peer = self.resubscribe.pop(rng.randrange(len(self.resubscribe)))
            bridge, what = self.bridges[b], SUBSCRIBE  # a client of a restarted bridge subscribes again
        elif what != SUBSCRIBE and holders and rng.random() < 0.7:
            bridge, peer = rng.choice(holders)  # mostly a peer that holds something
        else:
            bridge, peer = self.bridges[rng.choice(BRIDGES)], rng.choice(PEERS)
        rebuild = False
        if kind == "request":
            req = self.request(peer, bridge, what)
            code, out = bridge.serve(peer, req, self.now)
            events += out
            what = f"{self.describe(peer, bridge, req)} -> {code}"
        elif kind == "advance":
            what = "time passes: sweep"
        elif kind == "connect":
            if peer in bridge.disconnected:
                bridge.disconnected.discard(peer)
                what = f"{peer}@{bridge.bridge_id} reconnects"
            else:
                bridge.disconnected.add(peer)
                what = f"{peer}@{bridge.bridge_id} disconnects"
        elif kind == "restart":
            self.now = round(self.now + 1.0, 3)  # a process starts after its predecessor's last event
            self.record(events)
            events = []
            held_before = set(bridge.view.peers)
            self.resubscribe = [(b, p) for b, p in self.resubscribe if b != bridge.bridge_id]
            self.resubscribe += [(bridge.bridge_id, p) for p in sorted(held_before)]
            restart = bridge.restart(self.now)
            what = f"{bridge.bridge_id} restarts"
            if rng.random() < STALL:
                self.stall(index, restart[0][0], bridge, held_before)
                what += f" (its restart record's partition {self.stalled} read late until step {self.stalled_until})"
            events += restart
        elif kind == "refused_late":
            req = self.request(peer, bridge, what)
            then = None
            if rng.random() < 0.5:
                then = self.request(peer, bridge, rng.choice((SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_ALL, PING)))
            code, out = bridge.refused_late(peer, req, then, self.now)
            events += out
            after = f" {self.describe(peer, bridge, then)}" if then else " nothing"
            if code == 503:
                what = f"{self.describe(peer, bridge, req)} -> 503 unrecorded, acknowledged late after{after}"
            else:  # refused by the request core: nothing to record
                what = f"{self.describe(peer, bridge, req)} -> {code};{after}"
        else:
            rebuild = True
            what = "the filter job restarts: index rebuilt from the snapshot and the committed offsets"
        self.record(events)
        return self.settle(index, what, [v for v, _, _ in self.log[read:]], rebuild)

    def settle(self, index: int, what: str, values: list[bytes], rebuild: bool) -> Step:
        """The table's side of the step: maybe the TTL's delete (with its grace) first; then the
        events not committed yet folded as one batch over the committed table (what the table
        holds once the job's next batch is written); maybe committed (and replayed, as a job
        restarted from its checkpoint does: nothing may change)."""
        from pipeline.filter.subscriptions import apply_records

        rng = self.rng
        if rng.random() < 0.15 and self.stalled is None:
            # The grace is the job's longest wait for a batch: the events older than that are in.
            self.commit(lambda t: t < self.now - EXPIRY_GRACE_S)
            self.table.expire(self.now - TTL_S - EXPIRY_GRACE_S)
        trial = MemoryTable(self.table.rows)
        apply_records(self.log[self.committed:], trial, TTL_S)
        step = Step(index, what, self.now, values, set().union(*(b.criteria() for b in self.bridges.values())),
                    trial.criteria(self.now), purge=rng.random() < 0.2 and self.stalled is None,
                    held=self.stalled is not None)
        if rebuild:
            live = sorted(self.table.live(self.now), key=lambda r: r.key)
            step.rebuild = {"snapshot": [[r.peer_id, r.bridge_id, r.pubsub_topic, r.content_topic, r.protocol or "",
                                          r.request_id or "", r.last_refresh, r.subscribed_time] for r in live],
                            "from": self.committed}
        if rng.random() < 0.4:
            step.replayed_changes = self.commit(lambda t: True)
        return step

    def commit(self, due: Callable[[float], bool]) -> int | None:
        """The subscriptions job's batch of the pending events up to the last whose time is
        `due`, written; then folded again over its result, as a job restarted from its checkpoint
        replays a batch it wrote: the changes that made (0: idempotent). None: no batch."""
        from pipeline.filter.batch_effect import decode
        from pipeline.filter.subscriptions import apply_records

        end = self.committed
        for i in range(self.committed, len(self.log)):
            if due(decode([self.log[i]])[0].event_time):
                end = i + 1
        if end == self.committed:
            return None
        batch = self.log[self.committed:end]
        for e in decode(batch):
            if e.op == "SUBSCRIBE" and any(e.bridge_id == b and e.event_time >= t and e.peer_id in held
                                           for b, t, held in self.stalled_restarts):
                self.read_ahead += 1
                break
        apply_records(batch, self.table, TTL_S)
        self.committed = end
        return int(apply_records(batch, MemoryTable(self.table.rows), TTL_S).get("changes", 0))

    def run(self) -> Iterator[Step]:
        for i in range(self.steps):
            yield self.step(i)


def vectors(seed: int = SEED, steps: int = STEPS) -> dict[str, Any]:
    """jvm/test/subscription_vectors.json: the sequence's events (in the order the jobs read them)
    and, after each step, what the bridge holds (the criteria CriteriaIndex must hold live at the
    step's time, unless `held`: a partition is read late then)."""
    out = []
    for s in Twins(seed, steps).run():
        v: dict[str, Any] = {"what": s.what, "now": s.now, "events": [e.hex() for e in s.events],
                             "criteria": sorted(line(c) for c in s.bridge)}
        if s.purge:
            v["purge"] = True
        if s.rebuild is not None:
            v["rebuild"] = s.rebuild
        if s.held:
            v["held"] = True
        out.append(v)
    return {"seed": seed, "ttl_s": TTL_S, "steps": out}


def vectors_json(seed: int = SEED, steps: int = STEPS) -> str:
    """`vectors` as jvm/test/subscription_vectors.json holds it: one step a line."""
    v = vectors(seed, steps)
    lines = [json.dumps(step, separators=(",", ":"), ensure_ascii=True) for step in v["steps"]]
    return (f'{{"seed": {v["seed"]}, "ttl_s": {v["ttl_s"]!r}, "steps": [\n' + ",\n".join(lines) + "\n]}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description="print the filter twins' sequence")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    print(f"seed {args.seed}")
    for s in Twins(args.seed, args.steps).run():
        same = "   (a partition held back)" if s.held else "" if s.bridge == s.table else "   <-- table differs"
        print(f"{s.index:4d} t+{s.now - T0:9.3f} {s.what}{same}")
        for c in [] if s.held else sorted(s.bridge ^ s.table):
            print(f"       {'bridge' if c in s.bridge else 'table '} only: {line(c)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
