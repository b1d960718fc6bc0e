"""Freshness in the store service, on real Kafka, real Spark and real libp2p (issue 12):

- the validation rules declared once (core/validation.py) give the same verdict in the Spark
  store job (pipeline/store/validation.py, in the JVM) and in the store service's tail (plain
  Python) on every kind of invalid record the load generator makes, and on valid and ephemeral
  ones (same message hash and digest);
- a message produced to Kafka is answered by the store service (v3 hash lookup and queries over
  libp2p) before the store job commits it; walks (beta2 cursors and v3 hash cursors) that go
  on while the store job commits the tail to Delta get every stored message exactly once, in
  store order, duplicates of already stored messages included in the input."""
from __future__ import annotations

import math
import statistics
import time
import uuid

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from core.config import load_config
from core.kafka import ensure_topics
from core.message import store_digest
from core.store_page import Index, StoreQuery
from core.validation import Limits, decode_ingest, rejection_reason
from ingest.host import build_host, listen_addrs
from ingest.store import codec_v3
from ingest.store.client import StoreClient
from ingest.store.server import StoreServer, StoreServiceSettings
from ingest.store.tail import kafka_seconds
from schemas import pipeline_records_pb2 as pr
from schemas import waku_message_pb2 as wm
from tests.seeds import seeded
from tests.waiting import until
from tools.loadgen import INVALID_KINDS, LoadGenerator, LoadProfile, produce, producer

pytestmark = pytest.mark.integration


def new_topic(bootstrap: str, partitions: int = 2) -> str:
    topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, {topic: partitions})
    return topic


def job_config(kafka: str, topic: str, tmp_path, **extra):
    sets = {"kafka.bootstrap_servers": kafka, "topics.messages": topic,
            "warehouse.root": str(tmp_path / "wh"), "warehouse.checkpoints": str(tmp_path / "cp"),
            "store_service.refresh_interval_s": "0.1", "store_service.preload_mb": "0",
            "store_service.max_queries_per_peer_per_s": "0"}
    sets.update({k: str(v) for k, v in extra.items()})
    return load_config([f"{k}={v}" for k, v in sets.items()])


def run_store_job(spark, cfg) -> None:
    """One available-now run of the real store job over what Kafka holds."""
    from pipeline.store.job import start_store_query
    from pipeline.store.settings import StoreJobSettings

    began = time.monotonic()
    q = start_store_query(spark, StoreJobSettings.from_config(cfg), available_now=True)
    q.awaitTermination(600)
    assert q.exception() is None, q.exception()
    print(f"store job run: {time.monotonic() - began:.1f} s")


def test_rules_agree_in_spark_and_in_python(spark):
    """Every record of the load generator (all INVALID_KINDS, with each bad receive time it
    picks, plus valid, duplicate and ephemeral ones, plus a few edge cases) gets the same
    verdict from the store job's Spark rules and from core.validation."""
    from pyspark.sql import types as T

    from pipeline.spark.records import decode_ingest_records
    from pipeline.store.validation import with_rejection_reason

    seed, rnd = seeded()
    now = time.time()
    gen = LoadGenerator(LoadProfile(content_topics=20, invalid_share=0.5, ephemeral_share=0.1,
                                    duplicate_share=0.1, seed=seed))
    values = [r.value for r in gen.batch(800, now)]

    def rec(**kw) -> bytes:
        msg = wm.WakuMessage(payload=b"edge", content_topic="/app/1/edge/proto")
        for k, v in kw.pop("msg", {}).items():
            setattr(msg, k, v)
        return pr.IngestRecord(pubsub_topic=kw.get("pubsub", "/waku/2/rs/1/0"), message=msg,
                               received_time=kw.get("rt", now)).SerializeToString()

    values += [
        rec(msg={"timestamp": 0}), rec(msg={"meta": b"m" * 64}), rec(msg={"meta": b"m" * 65}),
        rec(msg={"legacy_timestamp": now}), rec(msg={"legacy_timestamp": now - 3600}),
        rec(msg={"timestamp": int((now - 19.5) * 1e9)}), rec(msg={"payload": b"x" * (153_600 - 17)}),
        rec(msg={"payload": b"x" * (153_600 - 16)}), rec(msg={"ephemeral": True}), rec(msg={"ephemeral": False}),
        rec(rt=-math.inf), rec(rt=1_577_836_799.0), rec(msg={"version": 7, "rate_limit_proof": b"p" * 10}),
        b"", b"\x0a\x00", b"\x12\x00", b"\x1a\x00",
    ]
    kinds_made = {k for k, _ in gen.truth.quarantined}
    assert kinds_made == set(INVALID_KINDS), f"seed {seed}: the generator made {kinds_made}"
    bad_times = {pr.IngestRecord.FromString(v).received_time for k, v in gen.truth.quarantined
                 if k == "bad_received_time"}
    assert any(math.isnan(t) for t in bad_times) and math.inf in bad_times and 0.0 in bad_times

    # The rules' `now` is each record's Kafka timestamp (milliseconds, as the broker keeps it):
    # the receive time may be at most max_future_received_s later; none at all breaks the rule.
    kafka_ms = [round(now * 1000)] * len(values)
    future = Limits().max_future_received_s
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    for rt, ms in ((kafka_ms[0] / 1000 + future, kafka_ms[0]), (kafka_ms[0] / 1000 + future + 0.001, kafka_ms[0]),
                   (now, round(now * 1000) - round(future * 1000) - 1), (now, None)):
        values.append(rec(rt=rt))
        kafka_ms.append(ms)
    schema = T.StructType([T.StructField("value", T.BinaryType()), T.StructField("topic", T.StringType()),
                           T.StructField("partition", T.IntegerType()), T.StructField("offset", T.LongType()),
                           T.StructField("timestamp", T.TimestampType())])
    df = spark.createDataFrame([(v, "t", 0, i, _utc(ms))
                                for i, (v, ms) in enumerate(zip(values, kafka_ms, strict=True))], schema)
    rows = (with_rejection_reason(decode_ingest_records(df), Limits())
            .select("kafka_offset", "reason", "ephemeral", "message_hash", "digest").collect())
    spark_verdict = {r.kafka_offset: r for r in rows}
    assert [spark_verdict[len(values) - k].reason for k in (4, 3, 2, 1)] == [
        None, "bad_received_time", "bad_received_time", "bad_received_time"]
    checked = 0
    for i, v in enumerate(values):
        f = decode_ingest(v)
        ours = rejection_reason(f, Limits(), kafka_seconds((TIMESTAMP_LOG_APPEND_TIME, kafka_ms[i]))
                                if kafka_ms[i] is not None else None)
        theirs = spark_verdict[i]
        assert ours == theirs.reason, (i, ours, theirs.reason, v[:40])
        if ours is None:
            assert f.ephemeral == theirs.ephemeral
            assert f.message_hash == bytes(theirs.message_hash) and f.digest == bytes(theirs.digest)
            checked += 1
    assert checked > 300


def test_unrepresentable_legacy_timestamps_agree(spark):
    from pyspark.sql import types as T

    from pipeline.spark.records import decode_ingest_records
    from pipeline.store.validation import with_rejection_reason

    now = time.time()
    values = [pr.IngestRecord(pubsub_topic="/waku/2/rs/1/0", received_time=now, message=wm.WakuMessage(
        payload=b"x", content_topic="/app/1/x/proto", legacy_timestamp=t)).SerializeToString()
        for t in (math.nan, math.inf, -math.inf, 1e30)]
    ms = round(now * 1000)
    ours = [(rejection_reason(f, Limits(), ms / 1000), f.timestamp) for f in map(decode_ingest, values)]
    assert ours == [(None, None)] * 4  # the tail takes them, without a timestamp
    schema = T.StructType([T.StructField("value", T.BinaryType()), T.StructField("topic", T.StringType()),
                           T.StructField("partition", T.IntegerType()), T.StructField("offset", T.LongType()),
                           T.StructField("timestamp", T.TimestampType())])
    df = spark.createDataFrame([(v, "t", 0, i, _utc(ms)) for i, v in enumerate(values)], schema)
    rows = with_rejection_reason(decode_ingest_records(df), Limits()).select("reason", "timestamp").collect()
    assert [(r.reason, r.timestamp) for r in rows] == ours


def _utc(ms: int | None):
    """A Kafka timestamp in milliseconds as the datetime Spark's Kafka source would give."""
    import datetime as dt

    if ms is None:
        return None
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)


def test_fresh_messages_are_answered_before_the_commit_and_pages_are_exact_across_it(spark, kafka, tmp_path):
    seed, rnd = seeded()
    topic = new_topic(kafka)
    cfg = job_config(kafka, topic, tmp_path)
    gen = LoadGenerator(LoadProfile(content_topics=4, pubsub_topics=2, duplicate_share=0.1, ephemeral_share=0.05,
                                    invalid_share=0.05, payload_bytes=64, seed=seed))
    # Batch 1: committed to Delta by the real store job before the service starts.
    produce(kafka, topic, gen.batch(300))
    run_store_job(spark, cfg)
    # Where the tail starts: the end of the job's last committed batch, from its checkpoint.
    from kafka import KafkaConsumer, TopicPartition

    from ingest.store.tail import committed_offsets

    consumer = KafkaConsumer(bootstrap_servers=kafka)
    tps = [TopicPartition(topic, p) for p in range(2)]
    ends = consumer.end_offsets(tps)
    consumer.close()
    assert committed_offsets(cfg.checkpoint_path("store"), topic) == {tp.partition: ends[tp] for tp in tps}
    settings = StoreServiceSettings.from_config(cfg)
    assert settings.tail is not None and settings.tail.topic == topic

    def position(value: bytes) -> tuple[float, bytes]:
        r = pr.IngestRecord.FromString(value)
        return (r.received_time, store_digest(r.message.content_topic, r.message.payload))

    async def main():
        host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
        server = StoreServer.start(host, settings)
        reader, tail = server.reader, server.reader.tail
        try:
            async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=20) as client:
                assert await trio.to_thread.run_sync(server.follower.ready.wait, 60)
                peer = await client.connect(f"{host.get_addrs()[0]}")
                version = reader.snapshot.version
                assert len(tail) == 0  # the tail started after the job's last committed batch

                # Freshness: single messages, produced and acknowledged, then looked up by hash.
                p = producer(kafka)
                latencies = []
                for _ in range(15):
                    while True:  # a new message to store (not a duplicate, invalid or ephemeral)
                        before = len(gen.truth.stored)
                        g = gen.next()
                        if len(gen.truth.stored) > before:
                            break
                    p.send(topic, key=g.key, value=g.value).get(timeout=30)
                    acked = time.perf_counter()

                    async def visible(h=g.key):
                        resp = await client.query_v3(peer, codec_v3.request("f", hashes=[h]))
                        return resp.status_code == 200 and len(resp.messages) == 1

                    await until(visible, "visible", 10, 0.005)
                    latencies.append((time.perf_counter() - acked) * 1000)
                # Batch 2: more of everything, duplicates of batch 1 messages among it.
                for g in gen.batch(250):
                    p.send(topic, key=g.key, value=g.value)
                p.flush()
                p.close()
                truth = {h: position(v) for h, v in gen.truth.stored.items()}
                pending = len(truth) - len(reader.durable_among(list(truth)))

                async def all_fresh_in_tail():
                    return len(tail) == pending
                await until(all_fresh_in_tail, "all fresh in tail", 30, 0.02)
                assert reader.snapshot.version == version  # nothing committed: all from the tail
                print(f"queryable after the Kafka acknowledgement (v3 lookup over libp2p, 15 messages): "
                      f"p50 {statistics.median(latencies):.1f} ms, max {max(latencies):.1f} ms; tail {len(tail)}")

                want = sorted(truth, key=truth.get)  # hashes in store order
                order = {h: i for i, h in enumerate(want)}
                # Three walks, interrupted by the commit of the tail: v3 backward from the newest
                # (js-waku's way: the next cursor is the edge message's hash), v3 forward, and
                # beta2 forward (Index cursors) from the middle of batch 1.
                start = truth[want[len(want) // 3]]
                walks = {"v3 backward": {"forward": False, "cursor": None, "got": [], "done": False},
                         "v3 forward": {"forward": True, "cursor": None, "got": [], "done": False},
                         "beta2 forward": {"forward": True, "cursor": Index(*start), "got": [], "done": False}}

                async def step(name):
                    w = walks[name]
                    if w["done"]:
                        return
                    size = rnd.choice((1, 5, 20))
                    if name.startswith("v3"):
                        resp = await client.query_v3(peer, codec_v3.request(
                            "w", cursor=w["cursor"], forward=w["forward"], limit=size))
                        assert resp.status_code == 200, resp.status_desc
                        hashes = [bytes(m.message_hash) for m in resp.messages]
                        if not hashes:
                            w["done"] = True
                            return
                        assert hashes == sorted(hashes, key=order.__getitem__)
                        w["got"] = w["got"] + hashes if w["forward"] else hashes + w["got"]
                        w["cursor"] = hashes[-1] if w["forward"] else hashes[0]
                    else:
                        page = await client.query(peer, StoreQuery(cursor=w["cursor"], forward=True, page_size=size))
                        w["got"].extend(m.digest for m in page.messages)
                        w["cursor"] = page.cursor
                        w["done"] = page.cursor is None

                for _ in range(6):
                    for name in walks:
                        await step(name)
                # The store job commits the tail (a real Spark micro-batch); the service swaps the
                # new snapshot in and drops what it holds from the tail.
                await trio.to_thread.run_sync(run_store_job, spark, cfg)

                async def committed():
                    return reader.snapshot.version > version and len(tail) == 0
                began = time.monotonic()
                await until(committed, "committed", 30, 0.02)
                print(f"commit visible to the service after the job returned: {time.monotonic() - began:.2f} s")
                for _ in range(2000):
                    if all(w["done"] for w in walks.values()):
                        break
                    for name in walks:
                        await step(name)
                assert tail.swept == 0 and tail.evicted == 0  # the job refused nothing the tail took
                return walks, want, truth, tail.dropped
        finally:
            server.close()

    walks, want, truth, dropped = trio.run(main)
    assert dropped > 0
    assert walks["v3 backward"]["got"] == want, f"seed {seed}"
    assert walks["v3 forward"]["got"] == want, f"seed {seed}"
    start = truth[want[len(want) // 3]]
    assert walks["beta2 forward"]["got"] == [truth[h][1] for h in want if truth[h] > start], f"seed {seed}"


def test_bridge_answers_lightpushed_messages_from_kafka_with_no_store_job(kafka, tmp_path):
    """The production wiring: a real bridge (BridgeSettings from the configuration, as
    `waku-bridge run` builds them) with no store job and no table at all. Each message
    lightpushed to it (answered 200 once Kafka acknowledged it) is answered by its store service
    over libp2p within milliseconds, from the fresh tail."""
    import os

    import multiaddr
    from libp2p.custom_types import TProtocol
    from libp2p.peer.peerinfo import info_from_p2p_addr

    from core.records import ingest_key
    from core.topics import autoshard
    from ingest.framing import FrameReader, frame
    from ingest.lightpush import codec as lp_codec
    from ingest.metrics import BridgeMetrics
    from ingest.node import Bridge
    from ingest.settings import BridgeSettings
    from schemas import lightpush_pb2 as lp

    topic = new_topic(kafka)
    ct = "/fresh-test/1/chat/proto"
    shard = f"/waku/2/rs/1/{autoshard(ct, 8)}"
    cfg = load_config([f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
                       f"bridge.key_file={tmp_path / 'key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
                       "bridge.ws_port=-1", "bridge.metrics_port=-1", "bridge.cluster_id=1", "rln.enabled=false",
                       "bridge.pubsub_topics=", "bridge.all_shards=true", "filter.enabled=false",
                       f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
                       "store_service.max_queries_per_peer_per_s=0"], environ={})
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open(os.devnull, "w"))
    sent = [wm.WakuMessage(payload=b"fresh-%d" % i, content_topic=ct, timestamp=time.time_ns()) for i in range(20)]

    async def main():
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            try:
                addr = str(bridge.addrs[0])
                bridge_id = info_from_p2p_addr(multiaddr.Multiaddr(addr)).peer_id
                assert await trio.to_thread.run_sync(bridge.store.follower.ready.wait, 60)
                async with StoreClient.running(timeout=20) as client:
                    await client.connect(addr)
                    latencies = []
                    for i, msg in enumerate(sent):
                        stream = await client.host.new_stream(bridge_id, [TProtocol(lp_codec.LIGHTPUSH_V3_CODEC)])
                        await stream.write(frame(lp_codec.v3_request(f"p{i}", msg, shard)))
                        answer = lp.LightpushResponse.FromString(await FrameReader(stream, 1 << 20).read_frame())
                        await stream.close()
                        assert answer.status_code == 200, answer
                        acked = time.perf_counter()  # 200 comes once Kafka acknowledged the record
                        h = ingest_key(shard, msg)

                        async def visible(h=h):
                            resp = await client.query_v3(bridge_id, codec_v3.request("f", hashes=[h]))
                            return len(resp.messages) == 1
                        await until(visible, "visible", 10, 0.002)
                        latencies.append((time.perf_counter() - acked) * 1000)
                    resp = await client.query_v3(bridge_id, codec_v3.request(
                        "all", content_topics=[ct], pubsub_topic=shard, forward=True, limit=100))
                    page = await client.query(bridge_id, StoreQuery(shard, (ct,), None, False, 5))
                    return latencies, resp, page
            finally:
                bridge.stop()

    latencies, resp, page = trio.run(main)
    latencies.sort()
    print(f"lightpush 200 -> answered by the bridge's store service (v3 lookup over libp2p), 20 messages: "
          f"p50 {statistics.median(latencies):.1f} ms, p90 {latencies[17]:.1f} ms, max {latencies[-1]:.1f} ms")
    assert [m.message.payload for m in resp.messages] == [m.payload for m in sent]
    assert [m.payload for m in page.waku_messages] == [m.payload for m in sent[-5:]]
    assert metrics.value("waku_store_tail_messages") == 20


def test_a_restarted_service_does_not_take_back_what_it_answered(kafka, tmp_path):
    """A store service that (re)starts with messages in Kafka that no Delta commit holds
    answers nothing from Delta alone: a query waits until the tail holds what Kafka held at
    start (store_service.tail_ready_wait_s), so a client that saw those messages before the
    restart sees them again. Found by tests/benchmarks/faults.py: a walk right after the store
    service's restart was shorter than the walk before it."""
    seed, rnd = seeded()
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=4, pubsub_topics=1, duplicate_share=0.0, ephemeral_share=0.0,
                                    invalid_share=0.0, payload_bytes=32, seed=seed))
    records = gen.batch(40_000)
    produce(kafka, topic, records)
    last = records[-1].key
    cfg = job_config(kafka, topic, tmp_path, **{"store_service.tail_ready_wait_s": 30})
    settings = StoreServiceSettings.from_config(cfg)

    async def main():
        host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
        server = StoreServer.start(host, settings)
        try:
            async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=40) as client:
                peer = await client.connect(f"{host.get_addrs()[0]}")
                t0 = time.perf_counter()
                first = await client.query_v3(peer, codec_v3.request("first", hashes=[last]))
                return first, time.perf_counter() - t0, server.follower.ready.is_set(), len(server.reader.tail)
        finally:
            server.close()

    first, waited, ready, held = trio.run(main)
    print(f"first answer after {waited * 1000:.0f} ms: {first.status_code}, {len(first.messages)} message(s); "
          f"tail holds {held}")
    assert ready and first.status_code == 200 and len(first.messages) == 1
    assert held == len(gen.truth.stored)


def test_an_idle_tail_reads_kafka_in_batches_and_the_next_query_sees_every_acknowledged_message(kafka, tmp_path):
    """With no query for store_service.tail_idle_after_s, the tail reads Kafka once every
    tail_idle_fetch_s (a record by record consumer costs the broker one fetch and the bridge one
    take a message). A query then wakes it and waits until it holds what Kafka held: a message
    acknowledged just before is in the very first answer, every time."""
    seed, rnd = seeded()
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=2, pubsub_topics=1, duplicate_share=0.0, ephemeral_share=0.0,
                                    invalid_share=0.0, payload_bytes=32, seed=seed))
    cfg = job_config(kafka, topic, tmp_path, **{"store_service.tail_idle_after_s": 0.5,
                                                "store_service.tail_idle_fetch_s": 1.0})
    settings = StoreServiceSettings.from_config(cfg)

    async def main():
        host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
        server = StoreServer.start(host, settings)
        follower, tail = server.follower, server.reader.tail
        takes = []
        follower.on_taken = takes.append
        p = producer(kafka)
        try:
            async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=20) as client:
                assert await trio.to_thread.run_sync(follower.ready.wait, 60)
                peer = await client.connect(f"{host.get_addrs()[0]}")

                async def idle():
                    return follower.idle
                firsts = []
                for round_ in range(5):
                    await until(idle, "idle", 30, 0.02)
                    # Idle: 40 records over ~0.4 s, taken in by a few reads, not one take each.
                    takes.clear()
                    held = len(tail)
                    for g in gen.batch(40):
                        p.send(topic, key=g.key, value=g.value)
                        await trio.sleep(0.01)
                    p.flush()

                    async def all_taken(want=held + 40):
                        return len(tail) == want
                    await until(all_taken, "all taken", 30, 0.02)
                    assert follower.idle and len(takes) <= 10, takes
                    # Acknowledged, then asked for at once: the first answer has it.
                    g = gen.next()
                    p.send(topic, key=g.key, value=g.value).get(timeout=30)
                    t0 = time.perf_counter()
                    resp = await client.query_v3(peer, codec_v3.request(f"r{round_}", hashes=[g.key]))
                    firsts.append((time.perf_counter() - t0) * 1000)
                    assert resp.status_code == 200 and len(resp.messages) == 1, (
                        round_, resp.status_desc, follower.refused, follower.sessions, len(tail))
                    assert not follower.idle
                return firsts, dict(follower.sessions)
        finally:
            p.close()
            server.close()

    firsts, sessions = trio.run(main)
    print(f"first query after an idle spell (v3 lookup over libp2p, the tail catching up): "
          f"{', '.join(f'{f:.1f}' for f in firsts)} ms; sessions {sessions}")
    assert sessions["idle"] >= 5 and sessions["following"] >= 6
