"""Each message hash once across the whole table, not only within store.dedup_window_s: an
identical message without a timestamp sent again much later is not stored again; a timestamped
copy that late is refused by the clock-skew rule, so it cannot be stored twice either."""
from __future__ import annotations

import json
import random
import shutil
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaProducer

from core.config import load_config
from core.kafka import ensure_topics
from core.message import hash_of
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings
from pipeline.store.tables import UNTIMED_INDEX
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage
from tests.conftest import BATCH_AT_EVERY_TRIGGER

pytestmark = pytest.mark.integration

PT = "/waku/2/rs/1/0"


def produce(bootstrap: str, topic: str, records: list[pr.IngestRecord]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for rec in records:
        producer.send(topic, key=hash_of(rec.pubsub_topic, rec.message), value=rec.SerializeToString())
    producer.flush()
    producer.close()


def run_once(spark, cfg) -> None:
    q = start_store_query(spark, StoreJobSettings.from_config(cfg), available_now=True)
    q.awaitTermination(600)
    assert q.exception() is None, q.exception()


@pytest.mark.parametrize("index", ["kept", "absent"])
def test_copies_far_apart_are_stored_once(spark, kafka, tmp_path, index):
    """index=absent: the untimed index is removed between the runs, as in a warehouse written
    before it existed; the job's next start builds it from `messages`."""
    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
                       "store.dedup_window_s=1"], environ={})
    now = time.time()
    untimed = WakuMessage(payload=b"no timestamp", content_topic="/dedup/1/a/proto")
    timed = WakuMessage(payload=b"timestamped", content_topic="/dedup/1/a/proto", timestamp=int((now - 3600) * 1e9))
    other = WakuMessage(payload=b"other", content_topic="/dedup/1/a/proto", timestamp=int(now * 1e9))
    produce(kafka, topic, [pr.IngestRecord(pubsub_topic=PT, received_time=now - 3600, message=untimed, bridge_id="A"),
                           pr.IngestRecord(pubsub_topic=PT, received_time=now - 3600, message=timed, bridge_id="A")])
    run_once(spark, cfg)
    index_path = Path(cfg.table_path(UNTIMED_INDEX))
    assert [bytes(r.message_hash) for r in spark.read.format("delta").load(str(index_path)).collect()] \
        == [hash_of(PT, untimed)]
    if index == "absent":
        shutil.rmtree(index_path)
    # An hour later, from another bridge: the same two messages again, and a new one.
    produce(kafka, topic, [pr.IngestRecord(pubsub_topic=PT, received_time=now, message=untimed, bridge_id="B"),
                           pr.IngestRecord(pubsub_topic=PT, received_time=now, message=timed, bridge_id="B"),
                           pr.IngestRecord(pubsub_topic=PT, received_time=now, message=other, bridge_id="B")])
    run_once(spark, cfg)
    rows = spark.read.format("delta").load(cfg.table_path("messages")).select(
        "message_hash", "bridge_id", "received_time").collect()
    by_hash = {}
    for r in rows:
        by_hash.setdefault(bytes(r.message_hash), []).append((r.bridge_id, r.received_time))
    assert len(rows) == 3, by_hash
    assert by_hash[hash_of(PT, untimed)] == [("A", now - 3600)]   # the first copy, kept
    assert by_hash[hash_of(PT, timed)] == [("A", now - 3600)]
    assert by_hash[hash_of(PT, other)] == [("B", now)]
    reasons = [r.reason for r in spark.read.format("delta").load(cfg.table_path("quarantine")).collect()]
    assert reasons == ["timestamp_skew"] or len(reasons) == 1, reasons  # the late timestamped copy
    indexed = spark.read.format("delta").load(str(index_path)).collect()
    assert [(bytes(r.message_hash), r.received_time) for r in indexed] == [(hash_of(PT, untimed), now - 3600)]


@pytest.mark.parametrize("recent_hashes_max", [1_000_000, 0])
def test_records_reproduced_later_in_one_query_are_stored_once(spark, kafka, tmp_path, recent_hashes_max):
    """One running query, several batches: copies of recent messages (checked in the query's
    memory of recent hashes) and copies of hour-old ones (below that memory: read from
    `messages`) are stored once; recent_hashes_max=0 reads `messages` for both."""
    from pipeline.store.job import start_store_query as start

    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
                       "store.trigger_seconds=0.2", *BATCH_AT_EVERY_TRIGGER,
                       f"store.recent_hashes_max={recent_hashes_max}"], environ={})
    now = time.time()

    def records(t0: float, tag: str) -> list[pr.IngestRecord]:
        return [pr.IngestRecord(pubsub_topic=PT, received_time=t0 + i, bridge_id="A", message=WakuMessage(
            payload=f"{tag}-{i}".encode(), content_topic="/dedup/1/b/proto", timestamp=int((t0 + i) * 1e9)))
            for i in range(20)]

    recent, old = records(now - 30, "recent"), records(now - 3600, "old")
    want = {hash_of(PT, r.message) for r in recent + old}
    path = cfg.table_path("messages")

    def stored() -> list[bytes]:
        try:
            rows = spark.read.format("delta").load(path).select("message_hash").collect()
            return [bytes(r.message_hash) for r in rows]
        except Exception:  # noqa: BLE001 - not created yet
            return []

    def processed() -> int:
        """Records the query has read: the sum of its last batch's end offsets."""
        progress = q.lastProgress
        end = progress["sources"][0]["endOffset"] if progress else None
        if not end:
            return 0
        end = json.loads(end) if isinstance(end, str) else end
        return sum(int(o) for parts in end.values() for o in parts.values())

    q = start(spark, StoreJobSettings.from_config(cfg))
    produced = 0
    try:
        for chunk in (recent + old, recent[:10] + old[:10], recent[5:] + old[5:]):
            produce(kafka, topic, chunk)  # each its own batch or batches
            produced += len(chunk)
            deadline = time.time() + 120
            while processed() < produced and time.time() < deadline:
                time.sleep(0.2)
            assert processed() == produced, (processed(), produced)
    finally:
        q.stop()
    got = stored()
    assert sorted(got) == sorted(want), f"{len(got)} rows for {len(want)} messages"


def test_rows_are_picked_by_their_kafka_coordinates_exactly(spark):
    """The store job picks the rows to write by (partition, offset), the set one binary literal
    (CoordinateSet.java): the same partition's other offsets, the same offset in another
    partition, offsets beyond 32 bits and null coordinates are told apart."""
    from pyspark.sql import functions as F

    from pipeline.store.writer import in_coordinates

    seed = 20261126
    print("seed", seed)
    rnd = random.Random(seed)
    rows = [(p, o) for p in range(3) for o in [0, 1, 2, 2**31, 2**40 + 7, *rnd.sample(range(10**6), 50)]]
    rows += [(None, 5), (1, None)]
    df = spark.createDataFrame(rows, "kafka_partition int, kafka_offset long")
    picked = set(rnd.sample([r for r in rows if None not in r], 40)) | {(9, 1)}  # a partition without rows
    chosen = in_coordinates(spark, F.col("kafka_partition"), F.col("kafka_offset"), picked)
    inside = {(r.kafka_partition, r.kafka_offset) for r in df.where(chosen).collect()}
    outside = {(r.kafka_partition, r.kafka_offset) for r in df.where(~chosen).collect()}
    assert inside == picked - {(9, 1)}
    assert outside == {r for r in rows if None not in r} - picked
    assert df.where(in_coordinates(spark, F.col("kafka_partition"), F.col("kafka_offset"), set())).count() == 0
