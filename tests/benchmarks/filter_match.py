"""Filter matching benchmark: 1M criteria in Delta, messages offered into Kafka at a steady rate,
latency from a message's Kafka append to its push record's append.

    .venv/bin/python tests/benchmarks/filter_match.py [--quick] [--peers N] [--rate R] [--seconds S]
                                                      [--no-realtime] [--no-clients]

Starts its own embedded Kafka (free ports, temp dir) and its own SparkSession (local[2]):

1. the `subscriptions` table gets peers × 10 criteria (100,000 × 10 = 1M; --quick: 10,000 × 10),
   spread over 4 bridge ids, written straight to Delta (the subscriptions job's own path is
   tested elsewhere);
2. micro-batch run: the filter job (trigger filter.trigger_seconds) runs while a producer thread
   offers IngestRecords into `waku.messages` at --rate for --seconds; half of the messages
   match exactly one criterion. Topics use LogAppendTime, so both ends of the latency are
   broker times. Afterwards both topics are read back with Spark and joined on message hash:
   matches/s, latency p50/p99, missing and unexpected pushes, and the join Spark chose;
3. real-time run: the same with filter.trigger=realtime (a fresh topic pair);
4. clients run: an in-process bridge, N real libp2p filter clients subscribed over
   filter-subscribe (through the subscriptions job), messages offered into Kafka; latency from
   the Kafka append to the MessagePush received by the client.

The last line is JSON: criteria, messages_per_s, matches_per_s, latency_p50_ms, latency_p99_ms
(the micro-batch run over the full table), join, realtime_* and clients_* figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from core.config import load_config  # noqa: E402
from tools.embedded_kafka import EmbeddedKafka  # noqa: E402

PT = "/waku/2/default-waku/proto"
BRIDGES = 4
CRITERIA_PER_PEER = 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def create_topics(bootstrap: str, names: dict[str, int]) -> None:
    from core.kafka import ensure_topics

    ensure_topics(bootstrap, names, topic_configs={"message.timestamp.type": "LogAppendTime"})


def topic_name(i: int) -> str:
    return f"/bench/1/t{i}/proto"


def load_table(spark, path: str, peers: int) -> int:
    from pyspark.sql import functions as F

    now = time.time()
    n = peers * CRITERIA_PER_PEER
    df = spark.range(n).select(
        F.format_string("peer-%07d", (F.col("id") / CRITERIA_PER_PEER).cast("long")).alias("peer_id"),
        F.lit(PT).alias("pubsub_topic"),
        F.format_string("/bench/1/t%d/proto", F.col("id")).alias("content_topic"),
        F.format_string("bench-bridge-%d", ((F.col("id") / CRITERIA_PER_PEER).cast("long") % BRIDGES)).alias("bridge_id"),
        F.lit("v2").alias("protocol"), F.lit("").alias("request_id"),
        F.lit(now).alias("subscribed_time"), F.lit(now).alias("last_refresh"),
    )
    df.repartition(4).write.format("delta").mode("overwrite").save(path)
    return n


def produce(bootstrap: str, topic: str, rate: float, seconds: float, criteria: int,
            content_topics: list[str] | None = None) -> dict:
    """Offer IngestRecords at `rate` for `seconds`; half match one criterion (topic index < criteria)."""
    from kafka import KafkaProducer

    from schemas import pipeline_records_pb2 as pr
    from schemas import waku_message_pb2 as wm

    rng = random.Random(7)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024,
                             max_in_flight_requests_per_connection=5)
    total = int(rate * seconds)
    batch = max(1, int(rate / 200))  # send in 5 ms slices
    sent = 0
    began = time.monotonic()
    while sent < total:
        for _ in range(min(batch, total - sent)):
            if content_topics:
                ct = content_topics[sent % len(content_topics)]
            else:
                ct = topic_name(rng.randrange(2 * criteria))
            msg = wm.WakuMessage(payload=b"x%d" % sent, content_topic=ct, timestamp=time.time_ns())
            rec = pr.IngestRecord(pubsub_topic=PT, message=msg, received_time=time.time(), source=pr.RELAY,
                                  bridge_id="bench")
            producer.send(topic, key=b"%d" % sent, value=rec.SerializeToString())
            sent += 1
        delay = began + sent / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    producer.flush(60)
    took = time.monotonic() - began
    producer.close()
    return {"sent": sent, "seconds": took, "rate": sent / took}


def analyse(spark, config, messages_topic: str, push_pattern: str, criteria: int, since_ms: int = 0) -> dict:
    """Join message appends with push appends on message hash (Spark batch reads); figures over
    the messages appended from `since_ms` on (the warm-up is left out)."""
    from pyspark.sql import functions as F

    from core.settings import KafkaSettings
    from pipeline.spark.kafka_io import kafka_options
    from pipeline.spark.protobuf import from_protobuf
    from pipeline.spark.records import PUSH_RECORD, decode_ingest_records

    opts = kafka_options(KafkaSettings.from_config(config))
    m = (spark.read.format("kafka").options(**opts).option("subscribe", messages_topic)
         .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    msgs = decode_ingest_records(m).select(
        "message_hash", "content_topic", F.unix_millis("kafka_timestamp").alias("m_ms"))
    idx = F.regexp_extract("content_topic", r"/t(\d+)/", 1)
    msgs = msgs.withColumn("idx", F.when(idx != "", idx.cast("long")))
    p = (spark.read.format("kafka").options(**opts).option("subscribePattern", push_pattern)
         .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    pushes = p.select(from_protobuf(F.col("value"), PUSH_RECORD, spark).alias("r"),
                      F.unix_millis("timestamp").alias("p_ms"))
    pushes = pushes.select(F.col("r.message_hash").alias("message_hash"), "p_ms").cache()
    j = msgs.join(pushes, "message_hash", "full_outer")
    j = j.where(F.col("m_ms").isNull() | (F.col("m_ms") >= F.lit(since_ms)))
    stats = j.agg(
        F.count(F.when(F.col("m_ms").isNotNull(), 1)).alias("messages"),
        F.count(F.when(F.col("m_ms").isNotNull() & (F.col("idx") < criteria), 1)).alias("expected"),
        F.count(F.when(F.col("p_ms").isNotNull(), 1)).alias("pushes"),
        F.count(F.when(F.col("p_ms").isNotNull() & F.col("m_ms").isNull(), 1)).alias("orphans"),
        F.count(F.when(F.col("p_ms").isNull() & (F.col("idx") < criteria), 1)).alias("missing"),
        F.percentile_approx(F.col("p_ms") - F.col("m_ms"), [0.5, 0.99], 10000).alias("pct"),
        F.max(F.col("p_ms") - F.col("m_ms")).alias("max_ms"),
        F.min("p_ms").alias("p_first"), F.max("p_ms").alias("p_last"),
    ).collect()[0]
    pushes.unpersist()
    span = max((stats.p_last or 0) - (stats.p_first or 0), 1) / 1000.0
    pct = stats.pct or [None, None]
    return {"messages": stats.messages, "expected_pushes": stats.expected, "pushes": stats.pushes,
            "missing": stats.missing, "unexpected": stats.orphans,
            "matches_per_s": round(stats.pushes / span, 1) if stats.pushes else 0.0,
            "latency_p50_ms": pct[0], "latency_p99_ms": pct[1], "latency_max_ms": stats.max_ms}


def wait_caught_up(query, sent: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sum(p.get("numInputRows", 0) for p in query.recentProgress)
        if rows >= sent and not query.status.get("isDataAvailable", False):
            return
        time.sleep(1.0)
    log(f"warning: the query had not caught up after {timeout:.0f} s")


def run_mode(spark, base_overrides, bootstrap: str, mode: str, rate: float, seconds: float, criteria: int) -> dict:
    from pipeline.filter.matching import join_strategy, start_filter_query
    from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings

    tag = uuid.uuid4().hex[:6]
    messages = f"bench.{mode}.{tag}.messages"
    prefix = f"bench.{mode}.{tag}.push."
    create_topics(bootstrap, {messages: 2 if mode == "realtime" else 4,  # real time: one long task per partition
                              **{f"{prefix}bench-bridge-{i}": 2 for i in range(BRIDGES)}})
    cfg = load_config([*base_overrides, f"topics.messages={messages}", f"topics.push_prefix={prefix}",
                       f"filter.trigger={mode}", "filter.starting_offsets=earliest"], environ={})
    result: dict = {"mode": mode}
    offered = {"sent": 0, "rate": None}
    t0 = time.time()
    try:
        query = start_filter_query(spark, FilterJobSettings.from_config(cfg), query_name=f"bench_{mode}_{tag}",
                                   checkpoint=str(Path(cfg.path("warehouse.checkpoints")) / f"filter-{mode}-{tag}"))
    except Exception as exc:  # noqa: BLE001 - e.g. real-time mode refusing the plan
        return {"mode": mode, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    try:
        # warm-up: a few messages, until the first push appears
        warm = produce(bootstrap, messages, 200, 2, criteria)
        time.sleep(3)
        if mode == "microbatch":
            wait_caught_up(query, warm["sent"], 300)
        log(f"{mode}: warm-up done; offering {rate:.0f} msg/s for {seconds:.0f} s")
        t0 = time.time()
        offered = produce(bootstrap, messages, rate, seconds, criteria)
        log(f"{mode}: offered {offered['sent']} messages at {offered['rate']:.0f}/s")
        if mode == "microbatch":
            wait_caught_up(query, warm["sent"] + offered["sent"], 600)
        else:
            time.sleep(10)
        if query.exception():
            raise RuntimeError(str(query.exception()))
        result["join"] = join_strategy(query) if mode == "microbatch" else "n/a"
        batches = [p for p in query.recentProgress if p.get("numInputRows")]
        if batches:
            durs = sorted(p["durationMs"].get("triggerExecution", 0) for p in batches)
            result["batch_ms_p50"] = durs[len(durs) // 2]
            result["batch_ms_max"] = durs[-1]
    except Exception as exc:  # noqa: BLE001
        result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    finally:
        query.stop()
    result["offered"] = offered["sent"]
    result.update(analyse(spark, cfg, messages, prefix.replace(".", r"\.") + ".*", criteria, int(t0 * 1000)))
    result["messages_per_s"] = round(offered["rate"], 1) if offered["rate"] else None
    return result


def clients_run(spark, base_overrides, bootstrap: str, tmp: Path, clients: int, rate: float, seconds: float) -> dict:
    """Real libp2p filter clients behind an in-process bridge (subscriptions through the job)."""
    import trio

    from ingest.filter.client import FilterClient
    from ingest.metrics import BridgeMetrics
    from ingest.node import Bridge
    from ingest.settings import BridgeSettings
    from pipeline.filter.matching import start_filter_query
    from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
    from core.message import message_hash
    from pipeline.filter.subscriptions import SubscriptionsJob

    tag = uuid.uuid4().hex[:6]
    messages = f"bench.clients.{tag}.messages"
    create_topics(bootstrap, {messages: 2})
    cfg = load_config([*base_overrides, f"topics.messages={messages}", f"topics.push_prefix=bench.clients.{tag}.push.",
                       f"topics.subscriptions=bench.clients.{tag}.subs", f"bridge.key_file={tmp / 'bridge.key'}",
                       "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1",
                       "bridge.metrics_port=-1", f"warehouse.root={tmp / 'clients-warehouse'}",
                       f"warehouse.checkpoints={tmp / 'clients-checkpoints'}"], environ={})
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=BridgeMetrics(), out=open(os.devnull, "w"))
    cts = [f"/bench-clients/1/c{i}/proto" for i in range(clients)]
    received: list[tuple[bytes, float]] = []
    state: dict = {}
    ready = threading.Event()
    done = threading.Event()

    async def main() -> None:
        state["token"] = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            await bridge.filter.ready.wait()
            cs = [FilterClient() for _ in range(clients)]

            async def one(c: FilterClient, ct: str, task_status=trio.TASK_STATUS_IGNORED) -> None:
                async with c.running():
                    await c.connect(str(bridge.addrs[0]))
                    r = await c.subscribe(PT, [ct])
                    assert r.status_code == 200, r
                    task_status.started()
                    async for push in c.pushes():
                        m = push.message
                        h = message_hash(push.pubsub_topic, m.payload, m.content_topic,
                                         m.meta if m.HasField("meta") else None,
                                         m.timestamp if m.HasField("timestamp") else None)
                        received.append((h, time.time()))
            for c, ct in zip(cs, cts):
                await nursery.start(one, c, ct)
            ready.set()
            await trio.to_thread.run_sync(done.wait)
            bridge.stop()
            await bridge.stopped.wait()
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    subs = SubscriptionsJob(spark, SubscriptionsJobSettings.from_config(cfg), query_name=f"bench_clients_subs_{tag}")
    subs.start()
    query = start_filter_query(spark, FilterJobSettings.from_config(cfg), query_name=f"bench_clients_filter_{tag}")
    result: dict = {}
    try:
        if not ready.wait(180):
            raise RuntimeError("clients did not subscribe")
        deadline = time.monotonic() + 180
        while spark.read.format("delta").load(subs.path).count() < clients:
            if time.monotonic() > deadline:
                raise RuntimeError("subscriptions did not reach Delta")
            time.sleep(0.5)
        while query.lastProgress is None:
            time.sleep(0.5)
        time.sleep(2)
        offered = produce(bootstrap, messages, rate, seconds, 0, cts)
        time.sleep(15)
        # message append times, by hash
        from pyspark.sql import functions as F

        from core.settings import KafkaSettings
        from pipeline.spark.kafka_io import kafka_options
        from pipeline.spark.records import decode_ingest_records
        m = (spark.read.format("kafka").options(**kafka_options(KafkaSettings.from_config(cfg))).option("subscribe", messages)
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
        appends = {bytes(r.message_hash): r.ms for r in decode_ingest_records(m).select(
            "message_hash", F.unix_millis("kafka_timestamp").alias("ms")).collect()}
        lat = sorted(t * 1000 - appends[h] for h, t in received if h in appends)
        result = {"clients": clients, "clients_offered": offered["sent"], "clients_pushes": len(received),
                  "clients_messages_per_s": round(offered["rate"], 1)}
        if lat:
            result["clients_latency_p50_ms"] = round(lat[len(lat) // 2], 1)
            result["clients_latency_p99_ms"] = round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1)
        # the Spark part of it: message append -> push record append
        k = analyse(spark, cfg, messages, f"bench\\.clients\\.{tag}\\.push\\..*", 0)
        result["clients_kafka_latency_p50_ms"] = k["latency_p50_ms"]
        result["clients_kafka_latency_p99_ms"] = k["latency_p99_ms"]
    except Exception as exc:  # noqa: BLE001
        result["clients_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        query.stop()
        subs.stop()
        done.set()
        thread.join(60)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 peers, 2,000 msg/s, short runs")
    parser.add_argument("--peers", type=int)
    parser.add_argument("--rate", type=float, help="messages/s offered (default 20,000; quick 2,000)")
    parser.add_argument("--seconds", type=float, help="offer duration (default 30; quick 10)")
    parser.add_argument("--realtime-rate", type=float, help="messages/s in the real-time run")
    parser.add_argument("--realtime-epoch", help="filter.realtime_checkpoint_interval of the real-time run "
                        "(default: the configuration's); each epoch boundary re-reads the table")
    parser.add_argument("--no-realtime", action="store_true")
    parser.add_argument("--no-clients", action="store_true")
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args()
    peers = args.peers or (10_000 if args.quick else 100_000)
    rate = args.rate or (2_000.0 if args.quick else 20_000.0)
    seconds = args.seconds or (10.0 if args.quick else 30.0)

    tmp = Path(tempfile.mkdtemp(prefix="filter-bench-"))
    kafka = EmbeddedKafka(tmp / "kafka", port=free_port(), controller_port=free_port())
    out: dict = {}
    spark = None
    try:
        log(f"starting Kafka on {kafka.bootstrap_servers} ...")
        kafka.start()
        base = [f"kafka.bootstrap_servers={kafka.bootstrap_servers}", f"warehouse.root={tmp / 'warehouse'}",
                f"warehouse.checkpoints={tmp / 'checkpoints'}", "spark.master=local[2]",
                "spark.shuffle_partitions=4", "filter.subscription_ttl_s=86400", "filter.trigger_seconds=0.2",
                "filter.subscriptions_trigger_seconds=0.2"]
        from core.settings import WarehouseSettings
        from core.spark_conf import SparkSettings
        from pipeline.spark.session import build_session
        from pipeline.filter.subscriptions import ensure_subscriptions_table

        cfg = load_config(base, environ={})
        spark = build_session(SparkSettings.from_config(cfg), "bench-filter")
        path = ensure_subscriptions_table(spark, WarehouseSettings.from_config(cfg))
        t = time.monotonic()
        criteria = load_table(spark, path, peers)
        log(f"subscriptions: {criteria} criteria written in {time.monotonic() - t:.1f} s")
        out["criteria"] = criteria
        mb = run_mode(spark, base, kafka.bootstrap_servers, "microbatch", rate, seconds, criteria)
        log(f"micro-batch: {json.dumps(mb)}")
        for key in ("messages_per_s", "matches_per_s", "latency_p50_ms", "latency_p99_ms", "join", "missing",
                    "unexpected", "pushes", "batch_ms_p50", "batch_ms_max", "error"):
            if key in mb:
                out[key] = mb[key]
        if not args.no_realtime:
            rt_base = base + ([f"filter.realtime_checkpoint_interval={args.realtime_epoch}"] if args.realtime_epoch else [])
            rt = run_mode(spark, rt_base, kafka.bootstrap_servers, "realtime", args.realtime_rate or rate,
                          seconds, criteria)
            rt["epoch"] = load_config(rt_base, environ={}).get("filter.realtime_checkpoint_interval")
            log(f"real-time: {json.dumps(rt)}")
            for key, value in rt.items():
                if key != "mode":
                    out[f"realtime_{key}"] = value
        if not args.no_clients:
            cl = clients_run(spark, base, kafka.bootstrap_servers, tmp, args.clients, min(rate, 200.0),
                             5.0 if args.quick else 10.0)
            log(f"clients: {json.dumps(cl)}")
            out.update(cl)
    finally:
        if spark is not None:
            spark.stop()
        kafka.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
