"""The Spark side of the filter service without Kafka: the subscriptions MERGE (per-peer order,
idempotent replay, TTL expiry) and the JVM PushRecord encoder."""
from __future__ import annotations

import pytest

from core.config import load_config
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage

pytestmark = pytest.mark.integration

PT = "/waku/2/default-waku/proto"
TTL_S = 300.0


def ev(peer: str, op: int, cts=(), t: float = 100.0, topic: str = PT, rid: str = "r", bridge: str = "B1") -> bytes:
    event = pr.SubscriptionEvent(peer_id=peer, bridge_id=bridge, op=op, pubsub_topic=topic if cts else "",
                                 content_topics=list(cts), event_time=t, request_id=rid, protocol="v2")
    return event.SerializeToString()


def kafka_rows(spark, values: list[bytes], partition: int = 0, first_offset: int = 0):
    rows = [(v, partition, first_offset + i) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "value binary, partition int, offset long")


def table(spark, path: str) -> dict:
    return {(r.peer_id, r.content_topic): (r.bridge_id, r.last_refresh, r.request_id)
            for r in spark.read.format("delta").load(path).collect()}


def test_subscriptions_merge_in_peer_order_idempotent_and_expiring(spark, tmp_path):
    from core.settings import WarehouseSettings
    from pipeline.filter.subscriptions import apply_batch, ensure_subscriptions_table
    from pipeline.filter.subscriptions_table import open_table

    cfg = load_config([f"warehouse.root={tmp_path}"], environ={})
    path = ensure_subscriptions_table(spark, WarehouseSettings.from_config(cfg))
    subs = open_table(path)
    S, U, ALL, EXP, REF = pr.SUBSCRIBE, pr.UNSUBSCRIBE, pr.UNSUBSCRIBE_ALL, pr.EXPIRE, pr.REFRESH
    batch1 = kafka_rows(spark, [
        ev("p1", S, ["a", "b", "c"], 100), ev("p1", U, ["b"], 101), ev("p1", S, ["b"], 102, rid="r2"),
        ev("p2", S, ["a"], 100), ev("p2", ALL, t=101), ev("p2", S, ["z"], 103),
        ev("p3", S, ["a"], 100), ev("p3", U, ["a"], 101),
        ev("p4", S, ["a"], 100), ev("p4", REF, t=150),
        b"\xff\xffnot an event",
    ])
    apply_batch(batch1, subs, TTL_S)
    # p1's SUBSCRIBE at 102 (and its UNSUBSCRIBE at 101) refreshed its other rows: one refresh per peer
    want = {("p1", "a"): ("B1", 102.0, "r"), ("p1", "b"): ("B1", 102.0, "r2"), ("p1", "c"): ("B1", 102.0, "r"),
            ("p2", "z"): ("B1", 103.0, "r"), ("p4", "a"): ("B1", 150.0, "r")}
    assert table(spark, path) == want
    apply_batch(batch1, subs, TTL_S)                     # a replayed batch changes nothing
    assert table(spark, path) == want

    batch2 = kafka_rows(spark, [
        ev("p1", REF, t=200), ev("p1", S, ["d"], 201, bridge="B2"),
        ev("p2", EXP, t=200),
        ev("p4", S, ["a"], 120),                    # an older refresh time never lowers last_refresh
    ], first_offset=100)
    apply_batch(batch2, subs, TTL_S)
    got = table(spark, path)
    assert got == {("p1", "a"): ("B1", 200.0, "r"), ("p1", "b"): ("B1", 200.0, "r2"), ("p1", "c"): ("B1", 200.0, "r"),
                   ("p1", "d"): ("B2", 201.0, "r"), ("p4", "a"): ("B1", 150.0, "r")}

    assert subs.earliest_refresh() == 150.0
    subs.expire(160.0)                              # p4 goes
    assert set(table(spark, path)) == {("p1", "a"), ("p1", "b"), ("p1", "c"), ("p1", "d")}
    assert subs.earliest_refresh() == 200.0


def test_push_encoder_copies_the_message_bytes(spark):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from pipeline.spark.session import register_java_function

    msg = WakuMessage(payload=b"\x00hello", content_topic="/t/1/x/proto", timestamp=123, ephemeral=True)
    rec = pr.IngestRecord(pubsub_topic=PT, message=msg, received_time=1.5, source=pr.RELAY, bridge_id="B")
    # PushEncode's encoder, which the filter job's PushFanoutEncode writes every record with.
    fn = register_java_function(spark, "waku_push_record", "waku.pipeline.PushEncode", T.BinaryType())
    df = spark.createDataFrame([(rec.SerializeToString(), "peerA", b"\x01" * 32, "v00", "rid", 3, 2**40),
                                (b"\xff\xff", "peerA", b"", "v2", "", 0, 0),
                                (rec.SerializeToString(), "peerA", b"\x01" * 32, "v00", "rid", None, None)],
                               "raw binary, peer string, h binary, proto string, rid string, p int, o long")
    out = df.select(F.call_function(fn, "raw", "peer", "h", "proto", "rid", "p", "o").alias("v")).collect()
    push = pr.PushRecord.FromString(out[0].v)
    assert (push.peer_id, push.pubsub_topic, push.message_hash, push.protocol, push.request_id) == (
        "peerA", PT, b"\x01" * 32, "v00", "rid")
    assert push.message == msg
    assert push.received_time == 1.5  # a restarted bridge drops pushes received before its start
    assert (push.source_partition, push.source_offset) == (3, 2**40)  # the pusher's replay mark
    assert out[1].v is None
    unknown = pr.PushRecord.FromString(out[2].v)  # no coordinates (an older job's record)
    assert not unknown.HasField("source_offset") and unknown.message == msg


def test_a_peer_that_moves_bridges_keeps_its_new_subscriptions(spark, tmp_path):
    """Subscriptions are a peer's at a bridge: bridge A expiring a peer that has since subscribed
    at bridge B removes A's rows only."""
    from core.settings import WarehouseSettings
    from pipeline.filter.subscriptions import apply_batch, ensure_subscriptions_table
    from pipeline.filter.subscriptions_table import open_table

    path = ensure_subscriptions_table(spark, WarehouseSettings.from_config(
        load_config([f"warehouse.root={tmp_path}"], environ={})))
    subs = open_table(path)
    apply_batch(kafka_rows(spark, [ev("p", pr.SUBSCRIBE, ["a"], 100, bridge="A")]), subs, TTL_S)
    apply_batch(kafka_rows(spark, [ev("p", pr.SUBSCRIBE, ["a", "b"], 110, bridge="B")]), subs, TTL_S)
    rows = spark.read.format("delta").load(path).collect()
    assert sorted((r.bridge_id, r.content_topic) for r in rows) == [("A", "a"), ("B", "a"), ("B", "b")]
    # A's sweep, a minute later
    apply_batch(kafka_rows(spark, [ev("p", pr.EXPIRE, t=170, bridge="A")]), subs, TTL_S)
    rows = spark.read.format("delta").load(path).collect()
    assert sorted((r.bridge_id, r.content_topic) for r in rows) == [("B", "a"), ("B", "b")]


def test_jobs_starting_together_create_their_tables_once(spark, tmp_path):
    """Subscriptions and filter jobs starting together on a fresh warehouse both create
    `subscriptions`: the loser's conflicting commit (DELTA_PROTOCOL_CHANGED) is retried, as is a
    creator that finds the table half-made (DELTA_TABLE_NOT_FOUND: 2 of 120 creators here)."""
    import threading

    from pipeline.filter.subscriptions import SUBSCRIPTIONS_SCHEMA
    from pipeline.spark.delta import ensure_table

    def create(path: str, errors: list[BaseException]) -> None:
        try:
            ensure_table(spark, path, SUBSCRIPTIONS_SCHEMA, properties={"delta.appendOnly": "false"})
        except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding, asserted below
            errors.append(exc)

    for round_ in range(3):
        path = str(tmp_path / f"subs{round_}")
        errors: list[BaseException] = []
        threads = [threading.Thread(target=create, args=(path, errors)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], errors
        assert spark.read.format("delta").load(path).count() == 0


def test_a_restarted_bridge_drops_what_its_earlier_run_left(spark, tmp_path):
    """A bridge restarts with no subscriptions (kill -9 included) and says so first
    (BRIDGE_RESTART): its rows refreshed before the restart go, those of other bridges and those
    its new run answered stay, whichever batch they land in."""
    from core.settings import WarehouseSettings
    from pipeline.filter.batch_effect import RESTART_PEER
    from pipeline.filter.subscriptions import apply_batch, ensure_subscriptions_table
    from pipeline.filter.subscriptions_table import open_table

    path = ensure_subscriptions_table(spark, WarehouseSettings.from_config(
        load_config([f"warehouse.root={tmp_path}"], environ={})))
    subs = open_table(path)
    apply_batch(kafka_rows(spark, [ev("p", pr.SUBSCRIBE, ["a", "gone"], 100, bridge="A"),
                                   ev("q", pr.SUBSCRIBE, ["a"], 100, bridge="B"),
                                   ev("p", pr.REFRESH, t=150, bridge="A")]), subs, TTL_S)
    # the restart (t=200) and the new run's subscribe (t=201) in one batch, other partitions
    apply_batch(kafka_rows(spark, [ev("p", pr.SUBSCRIBE, ["a"], 201, bridge="A")], partition=1), subs, TTL_S)
    apply_batch(kafka_rows(spark, [ev(RESTART_PEER, pr.BRIDGE_RESTART, t=200, bridge="A"),
                                   ev("r", pr.BRIDGE_RESTART, t=300, bridge="A")], partition=0, first_offset=3),
                subs, TTL_S)
    assert {k: v[0] for k, v in table(spark, path).items()} == {("p", "a"): "A", ("q", "a"): "B"}
