"""Filter end to end: publish -> MessagePush at real libp2p clients, against 1M criteria.

    .venv/bin/python tests/benchmarks/filter_match.py [--quick] [--peers 100000] [--rate 20000]
        [--seconds 75] [--clients 60] [--client-procs 3] [--producers 3] [--fanout 1000]
        [--trigger realtime|microbatch] [--epoch "30 seconds"]

Every part is its own process, started as in production:
  - the embedded Kafka broker;
  - the subscriptions and filter jobs through ./spark-submit.sh (the filter job's trigger as
    given: by default real-time mode);
  - one bridge (`waku-bridge run`, filter on) whose pusher serves the client peers;
  - `--client-procs` processes hosting `--clients` libp2p filter clients in all (FilterClient,
    which reads pushes as the reference clients do); each subscribes over filter-subscribe to
    its own content topic and a popular one, and, during the run, to a new topic (subscriptions
    change while messages flow);
  - `--producers` processes offering IngestRecords into waku.messages at `--rate` msg/s in all.

Criteria: `--peers` synthetic peers x 10 criteria written to Delta `subscriptions` before the
jobs start (their pushes go to a bridge id nobody serves and are read back from Kafka), plus
`--fanout` synthetic peers and every client on one popular topic. Half of the synthetic traffic
matches one criterion; the client traffic is 1 msg/s on each client's own topic, 1 msg/s on the
popular topic and 4 msg/s on each client's new topic (6 pushes/s per client: under the bridge's
13/s per-peer pacing of go-waku-like clients, which these are not).

Statistics: tests/benchmarks/stats.py (percentiles by nearest rank, over everything offered;
one never delivered counts as +inf, and a percentile falling on one is null).
Figures (start-up and the warm-up excluded; reported apart):
  - latency: client receive time - publish time (producer's clock, same machine) over every push
    a client should have had: its own-topic and popular messages, and new-topic messages published
    from 1 s after its SUBSCRIBE was answered 200; one not received by the end is `missing`;
  - new_subscription_ms: 200 OK -> first push on the new topic received (includes the wait for
    the next message, 250 ms apart); new_subscription_matched_ms: 200 OK -> first push record for
    it appended by the filter job (the matching side, without the bridge's pusher); over every
    new subscription answered 200 (one never pushed/matched as +inf);
  - per stage for the clients' pushes received (a missing push has no stages): publish -> push
    record appended (client_job_part) and push record -> client receive (client_pusher_part: the
    bridge's pusher and the client);
  - job figures: publish -> push record appended (the Spark part) over every matching synthetic
    message offered; processed_per_s = messages the job matched and turned into push records
    (synthetic matches pushed + popular messages with a push record) per second over the time
    from the run's start to the last push record; matching_offered_per_s = the matching
    messages offered per second (reported apart, never added in); push records/s;
  - pushes_per_s: pushes the bridge delivered to clients per second;
  - cpu_s: CPU seconds each component used during the run and the drain (where the cores went),
    and the filter job's CPU per offered message.
The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks import stats  # noqa: E402 - run as a script: the repository joins sys.path first
from tools.processes import free_port  # noqa: E402 - run as a script: the repository joins sys.path first

PT = "/waku/2/default-waku/proto"
POPULAR = "/bench/1/popular/proto"
SYNTH_BRIDGE = "bench-synthetic"
CRITERIA_PER_PEER = 10
OWN_RATE, POPULAR_RATE, NEW_RATE = 1.0, 1.0, 4.0


def own_topic(i: int) -> str:
    return f"/bench/1/client{i}/proto"


def new_topic(i: int) -> str:
    return f"/bench/1/new{i}/proto"


def synth_topic(i: int) -> str:
    return f"/bench/1/t{i}/proto"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stage_ms(values: list[float], q: float) -> float | None:
    """Percentile q (0..1) of the values given, in ms to 0.1 (stats.percentile: nearest rank): for
    the per-stage splits, which exist only for pushes that were received."""
    return stats.finite(stats.percentile(values, q * 100), 1)


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- client process ---------------------------------------------------------------------------

def run_clients(spec: dict) -> None:
    """Host clients spec["first"] .. +count; print {"ready": ...} once subscribed; subscribe each
    to its new topic during the run; on SIGTERM write receipts to spec["out"]."""
    import trio

    from ingest.filter.client import FilterClient

    receipts: list[list] = []   # [client, payload id, publish ns, receive s]
    oks: dict[int, float] = {}  # client -> time its new-topic SUBSCRIBE was answered 200
    failures: list[int] = []   # clients whose new-topic SUBSCRIBE failed (then tried again)

    async def main() -> None:
        stop = trio.Event()
        ready = trio.Event()

        async def one(i: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
            client = FilterClient()
            async with client.running():
                await client.connect_and_subscribe(spec["bridge"], PT, [own_topic(i), POPULAR], attempts=6)
                task_status.started()

                async def read() -> None:
                    async for push in client.pushes():
                        now = time.time()
                        ident, _, sent = push.message.payload.decode().partition("|")
                        receipts.append([i, ident, int(sent), now])

                async def subscribe_new() -> None:
                    # spread over the run, from 10 s after this process's clients are all subscribed
                    await ready.wait()
                    await trio.sleep(10 + (spec["seconds"] - 15) * i / max(1, spec["clients"]))
                    for _attempt in range(5):  # as a reference client: try again on a failure
                        try:
                            r = await client.subscribe(PT, [new_topic(i)], timeout=30)
                        except Exception as exc:  # noqa: BLE001 - as a reference client: logged, tried again
                            log(f"client {i}: new topic: {type(exc).__name__}: {exc}")
                            failures.append(i)
                            await trio.sleep(1)
                            continue
                        if r.status_code == 200:
                            oks[i] = time.time()
                            return
                        log(f"client {i}: new topic answered {r.status_code}")
                        await trio.sleep(1)

                async with trio.open_nursery() as n:
                    n.start_soon(read)
                    n.start_soon(subscribe_new)
                    await stop.wait()
                    n.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(8)

            async def start(i: int) -> None:
                async with limiter:
                    await nursery.start(one, i)
            async with trio.open_nursery() as starting:
                for i in range(spec["first"], spec["first"] + spec["count"]):
                    starting.start_soon(start, i)
            print(json.dumps({"ready": spec["count"]}), flush=True)
            ready.set()
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            Path(spec["out"]).write_text(json.dumps({"receipts": receipts, "oks": oks, "failures": failures}))
            stop.set()
            nursery.cancel_scope.cancel()

    trio.run(main)


# -- producer process -------------------------------------------------------------------------

def run_producer(spec: dict) -> None:
    """Offer IngestRecords from spec["start"] for spec["seconds"] (wall clock): synthetic traffic
    at spec["rate"], plus (producer 0) the clients' traffic. Payload: "<id>|<publish ns>".
    Writes {"synthetic_matching": n, "synthetic": n, "client": [[id, ns, [clients]]...]}."""
    from kafka import KafkaProducer

    from schemas import pipeline_records_pb2 as pr
    from schemas import waku_message_pb2 as wm

    rng = random.Random(spec["seed"])
    producer = KafkaProducer(bootstrap_servers=spec["bootstrap"], acks=1, linger_ms=2, batch_size=512 * 1024,
                             max_in_flight_requests_per_connection=5)
    topic, me, criteria = spec["topic"], spec["index"], spec["criteria"]
    clients = spec["clients"] if me == 0 else 0
    rate = spec["rate"]
    counts = {"synthetic": 0, "synthetic_matching": 0, "popular": 0}
    client_log: list = []
    # client traffic schedule: (period, next due, kind, client)
    sched = []
    if clients:
        for i in range(clients):
            sched.append([1 / OWN_RATE, "own", i])
            sched.append([1 / NEW_RATE, "new", i])
        sched.append([1 / POPULAR_RATE, "popular", -1])
    start, seconds = spec["start"], spec["seconds"]
    due = [start + rng.random() * s[0] for s in sched]

    def send(content_topic: str, ident: str) -> int:
        ns = time.time_ns()
        msg = wm.WakuMessage(payload=f"{ident}|{ns}".encode(), content_topic=content_topic, timestamp=ns)
        rec = pr.IngestRecord(pubsub_topic=PT, message=msg, received_time=ns / 1e9, source=pr.RELAY, bridge_id="bench")
        producer.send(topic, value=rec.SerializeToString())
        return ns

    time.sleep(max(0.0, start - time.time()))
    began = time.time()
    seq = 0
    slice_s = 0.005
    while True:
        now = time.time()
        if now >= start + seconds:
            break
        want = int((now - began) * rate)
        while seq < want:
            if seq % 2 == 0:
                k = rng.randrange(criteria)
                counts["synthetic_matching"] += 1
            else:
                k = criteria + rng.randrange(criteria)   # matches nothing
            send(synth_topic(k), f"s{me}-{seq}")
            counts["synthetic"] += 1
            seq += 1
        for j, s in enumerate(sched):
            if due[j] <= now:
                period, kind, i = s
                ident = f"{kind}{i}-{int(due[j] * 1000)}"
                if kind == "own":
                    ns = send(own_topic(i), ident)
                    client_log.append([ident, ns, [i]])
                elif kind == "new":
                    ns = send(new_topic(i), ident)
                    client_log.append([ident, ns, [i], "new"])
                else:
                    ns = send(POPULAR, ident)
                    counts["popular"] += 1
                    client_log.append([ident, ns, list(range(clients))])
                due[j] += period
        time.sleep(slice_s)
    producer.flush(120)
    took = time.time() - began
    producer.close()
    Path(spec["out"]).write_text(json.dumps({**counts, "seconds": took, "cpu_s": time.process_time(),
                                             "client": client_log}))


# -- set-up -----------------------------------------------------------------------------------

def load_table(overrides: list[str], peers: int, fanout: int) -> int:
    """peers x 10 criteria plus `fanout` peers on the popular topic, straight into Delta."""
    from pyspark.sql import functions as F

    from core.config import load_config
    from core.settings import WarehouseSettings
    from core.spark_conf import SparkSettings
    from pipeline.filter.subscriptions import ensure_subscriptions_table
    from pipeline.spark.session import build_session

    cfg = load_config(overrides, environ={})
    spark = build_session(SparkSettings.from_config(cfg), "bench-setup")
    try:
        path = ensure_subscriptions_table(spark, WarehouseSettings.from_config(cfg))
        now = time.time() + 3600  # still live at the end of a long run (TTL 300 s)
        n = peers * CRITERIA_PER_PEER
        base = spark.range(n).select(
            F.format_string("peer-%07d", (F.col("id") / CRITERIA_PER_PEER).cast("long")).alias("peer_id"),
            F.lit(PT).alias("pubsub_topic"),
            F.format_string("/bench/1/t%d/proto", F.col("id")).alias("content_topic"))
        pop = spark.range(fanout).select(F.format_string("fan-%07d", F.col("id")).alias("peer_id"),
                                         F.lit(PT).alias("pubsub_topic"), F.lit(POPULAR).alias("content_topic"))
        df = base.unionByName(pop).select(
            "peer_id", "pubsub_topic", "content_topic", F.lit(SYNTH_BRIDGE).alias("bridge_id"),
            F.lit("v2").alias("protocol"), F.lit("").alias("request_id"),
            F.lit(now).alias("subscribed_time"), F.lit(now).alias("last_refresh"))
        df.repartition(4).write.format("delta").mode("append").save(path)
        return n + fanout
    finally:
        spark.stop()


def read_pushes(bootstrap: str, topic: str, until_idle_s: float = 5.0) -> list[tuple[str, int, int]]:
    """(payload id, publish ns, append ms) of every push on `topic` (a fan-out record's once per
    subscriber)."""
    from kafka import KafkaConsumer, TopicPartition

    from core.records import push_targets
    from schemas import pipeline_records_pb2 as pr

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             max_poll_records=20000, fetch_max_bytes=64 * 1024 * 1024)
    parts = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in parts]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    out = []
    idle_since = time.monotonic()
    while any(consumer.position(tp) < end[tp] for tp in tps):
        batch = consumer.poll(timeout_ms=500)
        if not batch:
            if time.monotonic() - idle_since > until_idle_s:
                break
            continue
        idle_since = time.monotonic()
        for recs in batch.values():
            for r in recs:
                p = pr.PushRecord.FromString(r.value)
                ident, _, sent = p.message.payload.decode().partition("|")
                out += [(ident, int(sent), r.timestamp)] * len(push_targets(p))  # a fan-out: one a subscriber
    consumer.close()
    return out


# After the queries stopped, the SparkContext's own stop can race its local executor: a task the
# scheduler dispatches as the executor's thread pool shuts down is refused with this ERROR
# (Spark core, not a query's; seen once at load 3-10, 2026-12-02). It says nothing of how the
# queries ended.
SHUTDOWN_RACE = ("Executor launch task", "rejected from java.util.concurrent.ThreadPoolExecutor")


def stop_outcome(log_text: str) -> str:
    """How a SIGTERM'd job's log says its queries ended: "stopped" (the hook stopped them and no
    ERROR line follows but the SparkContext's SHUTDOWN_RACE), "stopped, then: <first ERROR
    line>", "terminated with error" or "no stop logged"."""
    if "terminated with error" in log_text:
        return "terminated with error"
    at = log_text.find("before the SparkContext")
    if at < 0:
        return "no stop logged"
    errors = [line for line in log_text[at:].splitlines()
              if " ERROR " in line and not all(part in line for part in SHUTDOWN_RACE)]
    return f"stopped, then: {errors[0][:300]}" if errors else "stopped"


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--role":
        spec = json.loads(sys.argv[3])
        {"clients": run_clients, "producer": run_producer}[sys.argv[2]](spec)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 peers, 5,000 msg/s, 45 s, 50 clients")
    ap.add_argument("--peers", type=int)
    ap.add_argument("--rate", type=float, help="synthetic messages/s offered (all producers)")
    ap.add_argument("--seconds", type=float, help="measured run (default 75: longer than a 30 s epoch)")
    ap.add_argument("--clients", type=int)
    ap.add_argument("--client-procs", type=int, default=3)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--fanout", type=int, default=1000)
    ap.add_argument("--trigger", default="realtime", choices=["realtime", "microbatch"])
    ap.add_argument("--epoch", default="30 seconds", help="real-time mode's checkpoint interval")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = ap.parse_args()
    peers = args.peers or (10_000 if args.quick else 100_000)
    rate = args.rate or (5_000.0 if args.quick else 20_000.0)
    seconds = args.seconds or (45.0 if args.quick else 75.0)
    nclients = args.clients or 50

    from tools.embedded_kafka import EmbeddedKafka
    from tools.processes import group_cpu_s, start_bridge

    tmp = Path(tempfile.mkdtemp(prefix="filter-bench-"))
    (tmp / "logs").mkdir()
    procs: list[subprocess.Popen] = []
    kport, cport = free_port(), free_port()
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=kport, controller_port=cport,
                           jar_dir=REPO_ROOT / ".cache/jars/kafka")
    result: dict = {"trigger": args.trigger, "seed": 20261123}
    bridge = None
    log(f"load average at start: {load_average()}; temp dir {tmp}")
    try:
        broker.start()
        bootstrap = broker.bootstrap_servers
        from core.kafka import ensure_topics

        ensure_topics(bootstrap, {"waku.messages": 4, "waku.subscriptions": 4, f"waku.push.{SYNTH_BRIDGE}": 2},
                      topic_configs={"message.timestamp.type": "LogAppendTime"})
        overrides = [
            f"kafka.bootstrap_servers={bootstrap}", f"warehouse.root={tmp / 'warehouse'}",
            f"warehouse.checkpoints={tmp / 'checkpoints'}", "spark.master=local[2]", "spark.shuffle_partitions=2",
            "topics.messages_partitions=4", "job_metrics.store_port=-1", "job_metrics.subscriptions_port=-1",
            "job_metrics.filter_port=-1", f"filter.trigger={args.trigger}",
            f"filter.realtime_checkpoint_interval={args.epoch}", "filter.starting_offsets=latest",
        ]
        t = time.monotonic()
        criteria = load_table(overrides, peers, args.fanout)
        result["criteria"] = criteria + 3 * nclients
        result["table_load_s"] = round(time.monotonic() - t, 1)
        log(f"{criteria} criteria in Delta in {result['table_load_s']} s")

        bridge = start_bridge(overrides + [
            f"bridge.key_file={tmp / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
            "bridge.ws_port=-1", "bridge.metrics_port=-1", f"bridge.pubsub_topics={PT}",
            "store_service.enabled=false", "filter.enabled=true", "filter.max_requests_per_peer_per_minute=1000",
        ], log=(tmp / "logs" / "bridge.log").open("a"), timeout=120)
        log(f"bridge {bridge.peer_id}")

        def submit(job: str) -> subprocess.Popen:
            cmd = [str(REPO_ROOT / "spark-submit.sh"), job, *[a for o in overrides for a in ("--set", o)]]
            p = subprocess.Popen(cmd, stdout=(tmp / "logs" / f"{job}.log").open("ab"), stderr=subprocess.STDOUT,
                                 cwd=REPO_ROOT, start_new_session=True)
            procs.append(p)
            return p

        # clients first: their subscriptions are acknowledged before the filter job starts
        per = -(-nclients // args.client_procs)
        client_procs = []
        specs = []
        for k in range(args.client_procs):
            first, count = k * per, min(per, nclients - k * per)
            if count <= 0:
                break
            specs.append({"bridge": bridge.tcp_addr, "first": first, "count": count,
                          "out": str(tmp / f"clients{k}.json"), "seconds": seconds, "clients": nclients})
        subs = submit("subscriptions")
        t_job = time.monotonic()
        filt = submit("filter")

        # warm-up: messages matching synthetic criteria until push records appear
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        from schemas import pipeline_records_pb2 as pr
        from schemas import waku_message_pb2 as wm

        warm = KafkaProducer(bootstrap_servers=bootstrap)
        watch = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        ptp = [TopicPartition(f"waku.push.{SYNTH_BRIDGE}", p) for p in (0, 1)]
        watch.assign(ptp)
        deadline = time.monotonic() + 600
        while True:
            if filt.poll() is not None:
                raise RuntimeError(f"filter job exited with {filt.returncode} (see {tmp}/logs/filter.log)")
            msg = wm.WakuMessage(payload=b"warm|0", content_topic=synth_topic(0), timestamp=time.time_ns())
            warm.send("waku.messages", pr.IngestRecord(pubsub_topic=PT, message=msg, received_time=time.time(),
                                                       source=pr.RELAY, bridge_id="bench").SerializeToString())
            warm.flush()
            if watch.poll(timeout_ms=1000):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("no push record within 600 s of the filter job's start")
        result["startup_s"] = round(time.monotonic() - t_job, 1)
        log(f"filter job answering {result['startup_s']} s after spark-submit")
        watch.close()
        warm.close()

        # the run: clients subscribe (after the job started: their events reach the index live)
        for sp in specs:
            p = subprocess.Popen([sys.executable, __file__, "--role", "clients", json.dumps(sp)],
                                 stdout=subprocess.PIPE, stderr=(tmp / "logs" / f"clients{sp['first']}.log").open("a"),
                                 cwd=REPO_ROOT, text=True)
            client_procs.append(p)
        for p in client_procs:
            line = p.stdout.readline()
            if not line.startswith("{"):
                raise RuntimeError(f"a client process failed (see {tmp}/logs)")
        log(f"{nclients} clients subscribed; load average {load_average()}")
        start = time.time() + 2
        prod_specs = [{"index": k, "bootstrap": bootstrap, "topic": "waku.messages", "rate": rate / args.producers,
                       "criteria": peers * CRITERIA_PER_PEER, "clients": nclients, "start": start,
                       "seconds": seconds, "seed": 20261123 + k, "out": str(tmp / f"producer{k}.json")}
                      for k in range(args.producers)]
        producers = [subprocess.Popen([sys.executable, __file__, "--role", "producer", json.dumps(sp)],
                                      stderr=(tmp / "logs" / f"producer{sp['index']}.log").open("a"), cwd=REPO_ROOT)
                     for sp in prod_specs]
        groups = {"filter job": filt.pid, "subscriptions job": subs.pid, "kafka broker": broker._proc.pid,
                  "bridge": bridge.proc.pid}
        cpu0 = {k: group_cpu_s(v) for k, v in groups.items()}
        loads = []
        while any(p.poll() is None for p in producers):
            time.sleep(5)
            loads.append(os.getloadavg()[0])
        if any(p.returncode for p in producers):
            raise RuntimeError(f"a producer failed (see {tmp}/logs)")
        log(f"producers done; draining 15 s; load average {load_average()}")
        time.sleep(15)
        cpu1 = {k: group_cpu_s(v) for k, v in groups.items()}
        for p in client_procs:
            p.send_signal(signal.SIGTERM)
        for p in client_procs:
            p.wait(120)
        result["load_average_during"] = round(sum(loads) / max(1, len(loads)), 1)

        # -- analysis ------------------------------------------------------------------------
        made = [json.loads(Path(sp["out"]).read_text()) for sp in prod_specs]
        offered = sum(m["synthetic"] for m in made) + sum(len(m["client"]) for m in made)
        run_s = max(m["seconds"] for m in made)
        result["offered_per_s"] = round(offered / run_s, 1)
        # where the two cores went during the run (and the 15 s drain): CPU seconds per component
        cpu = {k: round(cpu1[k] - cpu0[k], 1) for k in groups}
        cpu["producers"] = round(sum(m["cpu_s"] for m in made), 1)
        result["cpu_s"] = cpu
        result["filter_job_cpu_us_per_message"] = round(cpu["filter job"] / max(1, offered) * 1e6, 1)
        result["seconds"] = round(run_s, 1)
        got = [json.loads(Path(sp["out"]).read_text()) for sp in specs]
        received: dict[tuple[int, str], float] = {}
        dup = 0
        for g in got:
            for i, ident, _sent, now in g["receipts"]:
                if (i, ident) in received:
                    dup += 1
                received.setdefault((i, ident), now)
        oks = {int(i): t for g in got for i, t in g["oks"].items()}
        result["subscribe_failures"] = sum(len(g["failures"]) for g in got)
        lat, missing, expected = [], 0, 0
        first_new: dict[int, float] = {}
        for m in made:
            for entry in m["client"]:
                ident, ns, targets = entry[0], entry[1], entry[2]
                is_new = len(entry) > 3
                for i in targets:
                    r = received.get((i, ident))
                    if is_new:
                        if r is not None and i in oks and ns / 1e9 >= oks[i]:
                            first_new[i] = min(first_new.get(i, r), r)
                        if i not in oks or ns / 1e9 < oks[i] + 1.0:
                            continue  # before the subscription was 1 s old: not owed
                    expected += 1
                    if r is None:
                        missing += 1
                    else:
                        lat.append((r - ns / 1e9) * 1000)
        new_ms = [(first_new[i] - oks[i]) * 1000 for i in oks if i in first_new]
        # over everything owed: a push never received (a new subscription never pushed) is +inf
        client_lat = stats.latency_summary(lat, expected, digits=1)
        new_sub = stats.latency_summary(new_ms, len(oks), digits=1)
        # per stage, from the bridge's push topic: publish -> push record (the job) -> client (the pusher)
        appended: dict[str, int] = {}
        first_new_record: dict[int, float] = {}
        for ident, ns, ms in read_pushes(bootstrap, f"waku.push.{bridge.peer_id}"):
            appended[ident] = min(appended.get(ident, ms), ms)
            if ident.startswith("new"):
                i = int(ident[3:].split("-", 1)[0])
                if i in oks and ns / 1e9 >= oks[i]:
                    first_new_record[i] = min(first_new_record.get(i, ms / 1000), ms / 1000)
        job_part, push_part = [], []
        for g in got:
            for _i, ident, sent, now in g["receipts"]:
                if ident in appended:
                    job_part.append(appended[ident] - sent / 1e6)
                    push_part.append(now * 1000 - appended[ident])
        new_job_ms = [(first_new_record[i] - oks[i]) * 1000 for i in oks if i in first_new_record]
        new_matched = stats.latency_summary(new_job_ms, len(oks), digits=1)
        result.update({
            "client_job_part_p50_ms": stage_ms(job_part, 0.5), "client_job_part_p99_ms": stage_ms(job_part, 0.99),
            "client_pusher_part_p50_ms": stage_ms(push_part, 0.5),
            "client_pusher_part_p99_ms": stage_ms(push_part, 0.99),
            "new_subscription_matched_p50_ms": new_matched.p50,
            "new_subscription_matched_p99_ms": new_matched.p99,
            "new_subscriptions_never_matched": len([i for i in oks if i not in first_new_record]),
        })
        result.update({
            "clients": nclients, "client_pushes_expected": expected, "client_pushes_received": len(lat),
            "latency_p50_ms": client_lat.p50, "latency_p99_ms": client_lat.p99, "latency_max_ms": client_lat.max,
            "client_missing": missing, "client_duplicates": dup,
            "new_subscriptions": len(oks), "new_subscription_p50_ms": new_sub.p50,
            "new_subscription_p99_ms": new_sub.p99,
            "new_subscriptions_never_pushed": len([i for i in oks if i not in first_new]),
            "pushes_per_s": stats.rate(len(lat), run_s),
        })
        log(f"clients: {len(lat)}/{expected} pushes, p50 {result['latency_p50_ms']} ms, "
            f"p99 {result['latency_p99_ms']} ms, new subscriptions p99 {result['new_subscription_p99_ms']} ms")

        # the job's side: every synthetic match, read back from the push topic
        pushes = read_pushes(bootstrap, f"waku.push.{SYNTH_BRIDGE}")
        synth = [(ident, ns, ms) for ident, ns, ms in pushes if ident.startswith("s")]
        seen = {ident for ident, _, _ in synth}
        want = sum(m["synthetic_matching"] for m in made)
        first_record: dict[str, float] = {}
        for ident, ns, ms in synth:
            first_record[ident] = min(first_record.get(ident, ms - ns / 1e6), ms - ns / 1e6)
        # publish -> push record over every matching synthetic message offered (missing: +inf)
        # (max: a record for a message not counted as matching would be a bug shown by synthetic_missing < 0)
        job_lat = stats.latency_summary(list(first_record.values()), max(want, len(first_record)), digits=1)
        job_s = max(run_s, max((ms for _, _, ms in pushes), default=0) / 1000 - start)
        popular_records = len([1 for ident, _, _ in pushes if ident.startswith("popular")])
        popular_sent = sum(m["popular"] for m in made)
        # popular messages the job processed: those with at least one push record
        popular_processed = len({ident for ident, _, _ in pushes if ident.startswith("popular")})
        result.update({
            "synthetic_offered": sum(m["synthetic"] for m in made), "synthetic_matching": want,
            "synthetic_pushed": len(seen), "synthetic_missing": want - len(seen),
            "fanout_records": popular_records, "fanout_expected": popular_sent * args.fanout,
            "popular_offered": popular_sent, "popular_processed": popular_processed,
            "job_latency_p50_ms": job_lat.p50, "job_latency_p99_ms": job_lat.p99,
            # over the time the job took: from the run's start to the last push record appended;
            # only what the job turned into push records (offered: matching_offered_per_s)
            "processed_per_s": stats.rate(len(seen) + popular_processed, job_s),
            "matching_offered_per_s": stats.rate(want + popular_sent, run_s),
            "push_records_per_s": stats.rate(len(synth) + popular_records, job_s),
            "job_seconds": round(job_s, 1),
        })
        result["missing"] = result["client_missing"] + result["synthetic_missing"] + max(
            0, result["fanout_expected"] - popular_records)
        log(f"job: {len(seen)}/{want} synthetic matches pushed, publish -> push record p50 "
            f"{result['job_latency_p50_ms']} ms p99 {result['job_latency_p99_ms']} ms")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        # SIGTERM stopped the real-time query (always inside a long batch) before its SparkContext:
        # ended stopped, not "terminated with error", and nothing logged as an error on the way
        # (jvm/ StopQueriesFirst).
        filter_log = tmp / "logs" / "filter.log"
        if filter_log.exists():
            result["filter_job_stop"] = stop_outcome(filter_log.read_text(errors="replace"))
        if bridge is not None:
            bridge.stop(30)
        broker.stop()
        result["load_average_end"] = load_average()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
