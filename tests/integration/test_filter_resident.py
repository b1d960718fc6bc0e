"""The filter job's resident criteria index (jvm/src/waku/pipeline/CriteriaIndex.java,
pipeline/filter/criteria.py) holds what the subscriptions job writes to Delta: the same seeded
event sequences, realistic for a bridge (it refreshes and unsubscribes only what it holds; a
restart empties it), applied to both, give the same rows — from events alone, and from the Delta
snapshot plus a replay of events the snapshot already holds."""
from __future__ import annotations

import json
import random
import time

import pytest

from core.config import load_config
from schemas import pipeline_records_pb2 as pr

pytestmark = pytest.mark.integration

SEED = 20261123
TTL_S = 86400.0
PTS = ("/waku/2/rs/1/0", "/waku/2/rs/1/1")


def generate(seed: int, n: int, t0: float) -> list[tuple[bytes, int]]:
    """(SubscriptionEvent bytes, partition) in Kafka order, as two bridges would produce them."""
    rng = random.Random(seed)
    held: dict[str, dict[str, set]] = {"A": {}, "B": {}}   # bridge -> peer -> {(pubsub, content)}
    out: list[tuple[bytes, int]] = []
    t = t0
    peers = [f"p{i}" for i in range(8)]
    for _ in range(n):
        t += rng.uniform(0.001, 0.05)
        bridge = rng.choice("AB")
        view = held[bridge]
        peer = rng.choice(peers)
        kind = rng.random()
        rid = f"r{rng.randrange(1000)}"
        part = int(peer[1:]) % 2
        if kind < 0.03:
            view.clear()
            out.append((pr.SubscriptionEvent(peer_id="*", bridge_id=bridge, op=pr.BRIDGE_RESTART,
                                             event_time=t).SerializeToString(), rng.randrange(2)))
            continue
        if kind < 0.05:
            out.append((b"\xff\x01not an event", part))
            continue
        crits = view.get(peer, set())
        if kind < 0.45 or not crits:
            pubsub = rng.choice(PTS)
            cts = rng.sample([f"/app/1/c{i}/proto" for i in range(6)], rng.randint(1, 3))
            view.setdefault(peer, set()).update((pubsub, c) for c in cts)
            ev = pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge, op=pr.SUBSCRIBE, pubsub_topic=pubsub,
                                      content_topics=cts, event_time=t, request_id=rid,
                                      protocol=rng.choice(["v2", "v00"]))
        elif kind < 0.65:
            pubsub, content = rng.choice(sorted(crits))
            crits.discard((pubsub, content))
            if not crits:
                view.pop(peer)
            ev = pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge, op=pr.UNSUBSCRIBE, pubsub_topic=pubsub,
                                      content_topics=[content], event_time=t, request_id=rid, protocol="v2")
        elif kind < 0.85:
            ev = pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge, op=pr.REFRESH, event_time=t, request_id=rid)
        else:
            view.pop(peer)
            ev = pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge,
                                      op=pr.UNSUBSCRIBE_ALL if kind < 0.95 else pr.EXPIRE, event_time=t,
                                      request_id=rid)
        out.append((ev.SerializeToString(), part))
    return out


def batches_of(events: list[tuple[bytes, int]], sizes: list[int], spark):
    """Split into micro-batches of Kafka rows (per-partition offsets)."""
    offsets = [0, 0]
    start = 0
    for size in sizes:
        rows = []
        for value, part in events[start:start + size]:
            rows.append((value, part, offsets[part]))
            offsets[part] += 1
        start += size
        yield spark.createDataFrame(rows, "value binary, partition int, offset long")


def delta_rows(spark, path: str) -> dict:
    """key -> (protocol, request_id, last_refresh, subscribed_time: -inf when null, as the index reads it)."""
    return {(r.peer_id, r.bridge_id, r.pubsub_topic, r.content_topic):
            (r.protocol, r.request_id, r.last_refresh,
             float("-inf") if r.subscribed_time is None else r.subscribed_time)
            for r in spark.read.format("delta").load(path).collect()}


def index_rows(index) -> dict:
    out = {}
    for line in index.rows():
        peer, bridge, pubsub, content, protocol, rid, live, subscribed = line.split("\t")
        out[(peer, bridge, pubsub, content)] = (protocol, rid, float(live), float(subscribed))
    return out


def offline_index(spark, snapshot: str = ""):
    jvm = spark.sparkContext._jvm
    return jvm.waku.pipeline.CriteriaIndex.offline(json.dumps({"snapshot": snapshot, "ttl_s": TTL_S}))


@pytest.fixture()
def table(spark, tmp_path):
    from core.settings import WarehouseSettings
    from pipeline.filter.subscriptions import ensure_subscriptions_table

    cfg = load_config([f"warehouse.root={tmp_path}/w", f"warehouse.checkpoints={tmp_path}/c",
                       f"filter.subscription_ttl_s={TTL_S}"], environ={})
    return cfg, ensure_subscriptions_table(spark, WarehouseSettings.from_config(cfg))


@pytest.mark.parametrize("seed", [SEED, SEED + 1])
def test_index_rules_agree_with_the_subscriptions_job(spark, table, seed):
    from pipeline.filter.subscriptions import apply_batch
    from pipeline.filter.subscriptions_table import open_table

    print(f"seed {seed}")
    _, path = table
    subs = open_table(path)
    events = generate(seed, 300, time.time() - 1000)
    for batch in batches_of(events, [40, 1, 120, 139], spark):
        apply_batch(batch, subs, TTL_S)
    index = offline_index(spark)
    for value, _ in events:
        index.applyEvent(bytearray(value))
    want = delta_rows(spark, path)
    assert len(want) > 10
    assert index_rows(index) == want


def test_snapshot_then_replay_of_events_it_holds(spark, table, tmp_path):
    """The index of a job started mid-stream: Delta's rows (the snapshot) then the events from
    the subscriptions job's committed offsets, which may overlap what the snapshot holds."""
    from pipeline.filter.criteria import write_snapshot
    from pipeline.filter.settings import FilterJobSettings
    from pipeline.filter.subscriptions import apply_batch
    from pipeline.filter.subscriptions_table import open_table

    print(f"seed {SEED + 2}")
    cfg, path = table
    subs = open_table(path)
    events = generate(SEED + 2, 300, time.time() - 1000)
    parts = list(batches_of(events, [100, 100, 100], spark))
    apply_batch(parts[0], subs, TTL_S)
    apply_batch(parts[1], subs, TTL_S)
    settings = FilterJobSettings.from_config(cfg)
    snap = str(tmp_path / "snapshot")
    write_snapshot(spark, settings, snap)
    assert index_rows(offline_index(spark, snap)) == delta_rows(spark, path)
    apply_batch(parts[2], subs, TTL_S)
    want = delta_rows(spark, path)
    for replay_from in (100, 150):  # the committed offsets, or behind them
        index = offline_index(spark, snap)
        for value, _ in events[replay_from:]:
            index.applyEvent(bytearray(value))
        assert index_rows(index) == want, f"replay from event {replay_from}"


def test_committed_offsets_of_a_checkpoint(spark, tmp_path):
    from pipeline.filter.criteria import committed_offsets

    cp = tmp_path / "cp"
    assert committed_offsets(spark, str(cp), "t") == {}
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    for batch, offs in ((0, {"0": 5, "1": 7}), (1, {"0": 9, "1": 12}), (2, {"0": 20, "1": 30})):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}
        (cp / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps({'t': offs})}\n")
    for batch in (0, 1):  # batch 2 planned, not committed
        (cp / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert committed_offsets(spark, str(cp), "t") == {0: 9, 1: 12}
    assert committed_offsets(spark, str(cp), "other") == {}
