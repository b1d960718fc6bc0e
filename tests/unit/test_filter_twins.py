"""The filter subscription state machine's three forms on one seeded sequence (issue 69,
tests/filter_twins.py): after every step, the criteria the bridge's view holds
(ingest/filter/state.py through protocol.handle) equal those live in the subscriptions table
after the subscriptions job's fold (pipeline/filter/subscriptions.apply_records -> batch_effect,
over an in-memory table), and a committed batch folded again changes nothing. The resident index
(CriteriaIndex.java) is checked against the same sequence by CriteriaIndexTwinsTest (jvm/test.sh)
from jvm/test/subscription_vectors.json, which must be what the generator gives."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from pipeline.filter.batch_effect import decode
from tests.filter_twins import SEED, STEPS, Twins, line, vectors_json

VECTORS = Path(__file__).resolve().parents[2] / "jvm" / "test" / "subscription_vectors.json"
# The committed vectors' seed, a few more, and WAKU_TWINS_SEED (a seed to try) when set.
SEEDS = [SEED, 1, 2, 3, 20261202, *([int(os.environ["WAKU_TWINS_SEED"])] if os.environ.get("WAKU_TWINS_SEED") else [])]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_bridge_and_the_table_hold_the_same_criteria_after_every_step(seed):
    print(f"seed {seed}")
    held = compared = 0
    for s in Twins(seed, STEPS).run():
        assert s.replayed_changes in (None, 0), f"seed {seed} step {s.index}: a replayed batch changed rows"
        if s.held:  # a partition read late: the table lags the bridge until it is read
            continue
        compared += 1
        diff = sorted(("bridge only: " if c in s.bridge else "table only: ") + line(c) for c in s.bridge ^ s.table)
        assert not diff, f"seed {seed} step {s.index} ({s.what}) at {s.now}:\n" + "\n".join(diff)
        held += bool(s.bridge)
    assert held > STEPS // 2 and compared > STEPS * 3 // 4  # holds something, compared, most of the time


def test_the_sequence_reaches_the_edge_cases():
    twins = Twins(SEED, STEPS)
    steps = list(twins.run())
    ops = Counter()
    for value, _, _ in twins.log:
        e = decode([(value, 0, 0)])[0]
        ops[e.op, e.request_id if e.op == "EXPIRE" else e.protocol if e.op == "REFRESH" else ""] += 1
    # a PING's REFRESH names no protocol, the sweep's for v00 subscribers "v00"
    for op in [("SUBSCRIBE", ""), ("UNSUBSCRIBE", ""), ("UNSUBSCRIBE_ALL", ""), ("REFRESH", ""),
               ("REFRESH", "v00"), ("EXPIRE", "ttl"), ("EXPIRE", "unreachable"), ("BRIDGE_RESTART", "")]:
        assert ops[op] > 0, (op, ops)
    # answers: 400 (no topic, no or empty content topic, over 3 a request), 404, 503 (over 3 peers a
    # bridge or 5 criteria a peer), and a 503 of a change Kafka acknowledged late
    answers = Counter(s.what.split(" -> ", 1)[1].split(";")[0] for s in steps if " -> " in s.what)
    assert {"200", "400", "404", "503"} <= answers.keys(), answers
    assert sum(n for a, n in answers.items() if a.startswith("503 unrecorded, acknowledged late")) > 0, answers
    assert sum(s.rebuild is not None for s in steps) > 0 and sum(s.replayed_changes is not None for s in steps) > 0
    # a peer subscribed again after its subscriptions expired
    expired, again = set(), 0
    for value, _, _ in twins.log:
        e = decode([(value, 0, 0)])[0]
        if e.op == "EXPIRE":
            expired.add((e.peer_id, e.bridge_id))
        elif e.op == "SUBSCRIBE" and (e.peer_id, e.bridge_id) in expired:
            again += 1
    assert again > 0
    # a peer subscribed again at a bridge whose EXPIRE of it was lost (the table and the index must
    # find its old criteria expired, not revive them)
    lost = {(peer, b.bridge_id): t for b in twins.bridges.values() for peer, t in b.lost}
    revived = 0
    for value, _, _ in twins.log:
        e = decode([(value, 0, 0)])[0]
        if e.op == "SUBSCRIBE" and (e.peer_id, e.bridge_id) in lost and e.event_time >= lost[e.peer_id, e.bridge_id]:
            revived += 1
            del lost[e.peer_id, e.bridge_id]
    assert revived > 0
    # a bridge restart whose record was read late: a batch with a SUBSCRIBE of the new run, of a
    # peer the earlier run held, committed before it (the new run's refresh of the old criteria
    # must not keep them)
    assert twins.read_ahead > 0 and sum(s.held for s in steps) > 0


def test_the_committed_vectors_are_the_generators():
    assert VECTORS.read_text() == vectors_json(), "run python jvm/test/make_subscription_vectors.py"
