"""The foundation's end-to-end path on real components: kafka-python produces ingest records to
the embedded broker, Spark's Kafka source reads them, the JVM protobuf decoder decodes them, the
store writer commits them to Delta, and we read the table back. Also: Spark's hash/digest
columns agree with the Python ones on random messages, and ./spark-submit.sh runs the job."""
from __future__ import annotations

import random
import subprocess
import uuid

import pytest
from kafka import KafkaProducer
from pyspark.sql import functions as F

from core.config import REPO_ROOT, load_config
from core.kafka import ensure_topics
from core.message import message_hash, store_digest
from pipeline.spark.columns import message_hash_col, store_digest_col
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings
from schemas import pipeline_records_pb2 as pr
from schemas import waku_message_pb2 as wm

pytestmark = pytest.mark.integration


def random_message(rng: random.Random, i: int) -> tuple[str, wm.WakuMessage]:
    msg = wm.WakuMessage(
        payload=rng.randbytes(rng.choice([0, 1, 31, 1024])),
        content_topic=f"/app/1/topic-{rng.randrange(5)}/proto",
    )
    if rng.random() < 0.7:
        msg.timestamp = rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-(2**62), 2**62)])
    if rng.random() < 0.5:
        msg.meta = rng.randbytes(rng.randrange(0, 65))
    if rng.random() < 0.3:
        msg.version = rng.randrange(0, 2)
    return f"/waku/2/rs/0/{i % 3}", msg


def test_spark_hash_and_digest_agree_with_python(spark):
    rng = random.Random(7)
    rows = []
    for i in range(300):
        pubsub, m = random_message(rng, i)
        rows.append((pubsub, m.payload, m.content_topic,
                     m.meta if m.HasField("meta") else None,
                     m.timestamp if m.HasField("timestamp") else None))
    df = spark.createDataFrame(rows, "pt string, payload binary, ct string, meta binary, ts bigint")
    got = df.select(
        message_hash_col(F.col("pt"), F.col("payload"), F.col("ct"), F.col("meta"), F.col("ts")).alias("h"),
        store_digest_col(F.col("ct"), F.col("payload")).alias("d"),
    ).collect()
    for (pt, payload, ct, meta, ts), row in zip(rows, got, strict=True):
        assert bytes(row.h) == message_hash(pt, payload, ct, meta, ts)
        assert bytes(row.d) == store_digest(ct, payload)


def test_spark_decoding_hashes_the_jvm_vectors_as_python_and_filter_keys_do(spark):
    """The message hash's third form on the records jvm/test/vectors.json gives FilterKeys (whose
    hashes are core.message.hash_of's, nwaku's own vectors among them): the store's decoding
    (decode_ingest_records -> message_hash_col) must give the same topics and hash, and take as a
    message with a content topic exactly the records FilterKeys reads."""
    import datetime
    import json

    from pipeline.spark.records import decode_ingest_records

    vectors = json.loads((REPO_ROOT / "jvm" / "test" / "vectors.json").read_text())["filter_keys"]
    when = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
    rows = [(bytes.fromhex(v["hex"]), "waku.messages", 0, i, when) for i, v in enumerate(vectors)]
    kafka = spark.createDataFrame(rows, "value binary, topic string, partition int, offset long, timestamp timestamp")
    got = {r.kafka_offset: r for r in decode_ingest_records(kafka).select(
        "kafka_offset", "decoded", "has_message", "pubsub_topic", "content_topic", "message_hash").collect()}
    assert len(got) == len(vectors)
    for i, v in enumerate(vectors):
        r = got[i]
        read = bool(r.decoded and r.has_message and r.content_topic)
        assert read == (v["keys"] is not None), v["name"]
        if read:
            assert [r.pubsub_topic, r.content_topic, bytes(r.message_hash).hex()] == v["keys"], v["name"]


def ingest_record(pubsub: str, msg: wm.WakuMessage, received: float) -> bytes:
    return pr.IngestRecord(pubsub_topic=pubsub, message=msg, received_time=received,
                           source=pr.RELAY, bridge_id="bridge-test").SerializeToString()


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        producer.send(topic, value=value)
    producer.flush()
    producer.close()


def test_kafka_source_decode_delta_read_back(spark, kafka, config, tmp_path):
    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})

    rng = random.Random(11)
    expected = {}
    values = []
    for i in range(40):
        pubsub, msg = random_message(rng, i)
        received = 1_700_000_000 + i + rng.random()
        if msg.HasField("timestamp"):  # a sane sender clock: the store refuses skewed ones
            msg.timestamp = int(received * 1e9) - rng.randrange(0, 10**9)
        values.append(ingest_record(pubsub, msg, received))
        h = message_hash(pubsub, msg.payload, msg.content_topic,
                         msg.meta if msg.HasField("meta") else None,
                         msg.timestamp if msg.HasField("timestamp") else None)
        expected[h] = (pubsub, msg, received)
    ephemeral = wm.WakuMessage(payload=b"e", content_topic="/app/1/eph/proto", ephemeral=True)
    values.append(ingest_record("/waku/2/rs/0/0", ephemeral, 1_700_000_100.5))
    values.append(b"\xff\x00 not a protobuf")
    produce(kafka, topic, values)

    cfg = load_config([f"{k}={v}" for k, v in {
        "kafka.bootstrap_servers": kafka,
        "warehouse.root": str(tmp_path / "wh"),
        "warehouse.checkpoints": str(tmp_path / "cp"),
        "topics.messages": topic,
    }.items()])
    query = start_store_query(spark, StoreJobSettings.from_config(cfg), available_now=True)
    query.awaitTermination(300)
    assert query.exception() is None

    stored = spark.read.format("delta").load(cfg.table_path("messages")).collect()
    assert len(stored) == len(expected)
    for row in stored:
        pubsub, msg, received = expected[bytes(row.message_hash)]
        assert row.pubsub_topic == pubsub
        assert row.content_topic == msg.content_topic
        assert bytes(row.payload) == msg.payload
        assert row.received_time == received  # the exact double
        assert bytes(row.digest) == store_digest(msg.content_topic, msg.payload)
        assert row.timestamp == (msg.timestamp if msg.HasField("timestamp") else None)
        assert (bytes(row.meta) if row.meta is not None else None) == (msg.meta if msg.HasField("meta") else None)
        assert row.version == msg.version
        assert row.source == "RELAY" and row.bridge_id == "bridge-test"
        assert row.kafka_topic == topic
    quarantined = spark.read.format("delta").load(cfg.table_path("quarantine")).collect()
    assert [(q.reason, bytes(q.raw_value)) for q in quarantined] == [("undecodable", b"\xff\x00 not a protobuf")]
    assert quarantined[0].kafka_offset is not None

    # Re-running the query on the same checkpoint adds nothing (offsets are committed).
    again = start_store_query(spark, StoreJobSettings.from_config(cfg), available_now=True)
    again.awaitTermination(300)
    assert spark.read.format("delta").load(cfg.table_path("messages")).count() == len(expected)


def test_spark_submit_runs_the_store_job(kafka, config, tmp_path):
    """./spark-submit.sh store --available-now on the cached jars, no download."""
    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 1})
    msgs = [wm.WakuMessage(payload=bytes([i]), content_topic="/app/1/x/proto") for i in range(5)]
    produce(kafka, topic, [ingest_record("/waku/2/rs/0/0", m, 1_700_000_000.25 + i) for i, m in enumerate(msgs)])
    sets = {
        "kafka.bootstrap_servers": kafka, "topics.messages": topic,
        "warehouse.root": str(tmp_path / "wh"), "warehouse.checkpoints": str(tmp_path / "cp"),
        "spark.master": "local[1]",
        "job_metrics.store_port": "0",  # any free port: other jobs may run on this machine
    }
    args = ["./spark-submit.sh", "store", "--available-now", "--conf", "spark.ui.enabled=false"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from deltalake import DeltaTable

    table = DeltaTable(str(tmp_path / "wh" / "messages")).to_pyarrow_table()
    assert sorted(table.column("received_time").to_pylist()) == [1_700_000_000.25 + i for i in range(5)]
    # The job's metrics listener recorded its batches.
    metrics = DeltaTable(str(tmp_path / "wh" / "job_metrics")).to_pyarrow_table().to_pylist()
    assert sum(r["input_rows"] for r in metrics if r["job"] == "store") == 5
