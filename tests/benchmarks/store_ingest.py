"""Store ingest benchmark: producers -> Kafka -> store job (spark-submit) -> Delta, and the store
service's fresh tail answering over libp2p (issue 12).

    .venv/bin/python tests/benchmarks/store_ingest.py [--quick] [--rate R] [--producers P]
        [--seconds S] [--warmup W [--warmup-until-lag L]] [--max-offsets N] [--payload-bytes B] [--probe-rate Q]
        [--no-service] [--job-nice N] [--keep DIR]

Every component is its own process, on loopback, from a temporary directory:
  - an embedded Kafka broker, topic waku.messages with 4 partitions;
  - the store job, started as in production: `./spark-submit.sh store` (Spark local[2]) with
    `store.max_offsets_per_trigger` set (default 50,000 records per micro-batch, 20,000 with --quick);
  - bridge B: `waku-bridge run` with only the store service (Delta reader + its Kafka tail);
  - P producer processes (`--role producer`), each offering rate/P records per second of the
    load generator's mix (1 KiB payloads; 5 % duplicates, 2 % ephemeral, 1 % invalid). Each
    generates its records before the load starts (stamped with the receive time at which they
    are due: generating is the load generator's work, ~12 µs a record in Python, not the
    system's) and sends them on schedule with librdkafka (confluent-kafka, acks=all, the Java
    client's murmur2 partitioner on the hash key); the offered rate reached is measured;
  - a prober process (`--role prober`): `--probe-rate` times a second it produces one new
    message (acks=all); one poller asks B over libp2p, every `--probe-poll-ms` (10) while any
    probe is unanswered, for all unanswered probes at once (a store v3 query by their message
    hashes, a new stream per query), so the prober's load on B stays bounded when B falls behind.
  `--job-nice N` starts the store job at niceness N (the bridge keeps 0).
  `--no-service` leaves bridge B and the prober out: the store job's throughput with only the
  broker and the producers beside it on the cores (queryable figures are then null).

Sequence: broker, store job and bridge B start; a first 2,000 records are produced and the
time from `spark-submit` to their first Delta commit is `startup_s` (JVM, Spark session, first
batch's code generation: reported apart, not in any rate or latency). Then the producers offer
`--rate` for `--warmup` seconds (30; 10 with --quick: the broker's, the job's and bridge B's JIT
and caches warm up under the real load; not measured) and go on at the same rate for
`--seconds` (2 min by default, 20 s with --quick), the measured window; the benchmark then
waits up to `--drain` seconds for the job to commit what was offered. `--warmup-until-lag L`
makes the warm-up adaptive: the window begins once a commit's median append -> commit latency
is at most L s (no backlog left; the JIT has settled enough to keep up), after at least
`--warmup-min` s (30) and at most `--warmup` s; the warm-up taken is reported
(`warmup_taken_s`). The producers generate records for the longest warm-up (~1.3 KB of memory
a record until it is sent).

What is measured (over the measured window):
  offered_per_s      records the producers sent / the window's length (all producers together)
  messages_per_s     steady-state throughput: rows committed to Delta `messages` per second
                     between the first and the last commit after the window began
  committed_p50_s/p99_s  per stored message of the window (every one the producers offered that
                     the store must hold: valid, not ephemeral, first copy): Delta commit time
                     (the mtime of the _delta_log entry that added its file) - Kafka append time
                     (the record's CreateTime); messages not committed by the end of the drain
                     count as missing and as +inf in these percentiles (null when > 1 % / 50 %
                     are missing); `committed_*_of_committed_s` are over the committed ones only.
                     Every percentile here: tests/benchmarks/stats.py (nearest rank)
  queryable_p50_ms/p99_ms  per probe: first answer from B containing the message - Kafka
                     acknowledgement; probes not answered within 30 s (5 s with --quick) count as
                     missing (`queryable_missing`) and as +inf in the percentiles;
                     `queryable_query_errors`: the prober's queries that failed
  warmup_taken_s     the warm-up before the window (adaptive with --warmup-until-lag)
  missing            window messages not committed by the end
  committed_lag_at_start_s  how far behind the job was as the window began: append -> commit,
                     median, of the last commit before it (a backlog the warm-up left)
  load_cpu_s, load_cpu_us_per_record  CPU seconds of each component during the window (the store
                     job's driver and executors, the broker, bridge B, the prober, the producers'
                     sending), and per offered record: where the two cores go
  store_job_jvm_cpu_s  the store job's JVM CPU in the window by thread kind: the JIT's compilers,
                     the GC, Spark's task threads, the rest (tools/processes.jvm_threads_cpu_s;
                     a task thread that ends in the window moves its CPU from tasks to the rest)
  batch_*            the store job's own per-batch figures from its log (time per phase): the
                     batches that ended in the window (before session 21: every batch after the
                     start-up's, the warm-up's included)
  load_avg_*         os.getloadavg() at start and end (the machine is shared)

`--profile N` instead runs the store query in this process over N seeded records (available-now,
`--max-offsets` per batch; the same input every run) with Spark's event log on, and prints per
micro-batch its wall time, the writer's phases, every Spark job (duration, call site) and every
Delta commit, the CPU the batch took in the driver JVM (local mode: the executors' tasks, and
the JIT compiling for them) and in Python (`jvm_cpu_s`, `python_cpu_s`; per record over the full
batches: `jvm_cpu_us_per_record`), the classes Spark generated and Janino compiled for it (code
the codegen cache did not hold: `compiles`), and the streaming engine's own time per batch
(`engine_mean_ms`); `--writer PATH`
profiles another version of pipeline/store/writer.py (before/after; its `write_checked_batch`),
`--untimed-share S` clears the sender timestamp of that share of records (the global
de-duplication check then runs: untimed copies against every stored untimed row).

    .venv/bin/python tests/benchmarks/store_ingest.py --profile 30000 --max-offsets 10000

The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import array
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.stats import finite, latency_summary, percentile  # noqa: E402 - as below
from tools.processes import free_port, proc_cpu_s  # noqa: E402 - run as a script: the repository joins sys.path first

TOPIC = "waku.messages"
PROBE_PUBSUB = "/waku/2/rs/1/0"
PROBE_CT = "/bench/1/probe/proto"


def log(msg: str) -> None:
    print(f"[store_ingest {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_whole(path: Path, text: str) -> None:
    """Write a file another process polls for: it appears whole or not at all (a plain write
    let a producer read `measure_at` empty and fail, losing a 15-minute run)."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    os.replace(part, path)



# ---------------------------------------------------------------------------------------------
# Roles (each its own process: `store_ingest.py --role NAME --spec JSON`)
# ---------------------------------------------------------------------------------------------

def role_producer(spec: dict) -> None:
    """Offer spec['rate'] records/s for spec['seconds'] from spec['start_at'] (wall clock), to
    spec['topic'] (default waku.messages). Also store_tail.py's producer.

    The records (the load generator's mix) are generated before the load starts, each stamped
    with the receive time at which it is due, so generating them (~12 µs a record in Python) is
    not part of the offered load; they are then sent on schedule with librdkafka
    (confluent-kafka: acks=all, the Java client's murmur2 partitioner on the message-hash key,
    Kafka CreateTime set when the record is handed over). Writes the hashes the store must hold
    (32 bytes each) to spec['out'] + '.hashes' and a JSON summary to spec['out']."""
    from confluent_kafka import Producer

    from tools.loadgen import LoadGenerator, LoadProfile

    gen = LoadGenerator(LoadProfile(payload_bytes=spec["payload_bytes"], seed=spec["seed"]))
    rate, seconds, start_at = spec["rate"], spec["seconds"], spec["start_at"]
    # Warm-up records are sent first at the same rate, not counted: spec['warmup_s'] of them, or
    # with spec['measure_file'] (an adaptive warm-up) at most that many, until the harness
    # writes the wall-clock time at which the measured window begins into that file.
    topic = spec.get("topic", TOPIC)
    warm = int(rate * spec.get("warmup_s", 0.0))
    count = warm + int(rate * seconds)
    measure_file = Path(spec["measure_file"]) if spec.get("measure_file") else None
    t0 = time.process_time()
    records, stored_before = [], array.array("Q")  # hashes the store must hold before record i
    for i in range(count):
        stored_before.append(len(gen.truth.stored))
        records.append(gen.next(start_at + i / rate))
    stored_before.append(len(gen.truth.stored))
    generate_cpu_s = time.process_time() - t0
    failed = []
    p = Producer({"bootstrap.servers": spec["bootstrap"], "acks": "all", "linger.ms": spec.get("linger", 5),
                  "batch.size": 1 << 20, "message.max.bytes": 4 << 20, "partitioner": "murmur2_random",
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 4 << 20,
                  "delivery.report.only.error": True,
                  "on_delivery": lambda err, msg: failed.append(str(err)) if err else None})
    delay = start_at - time.time()
    late_start = max(0.0, -delay)
    if delay > 0:
        time.sleep(delay)
    started_wall = time.time()
    write_whole(Path(spec["out"] + ".started"), str(started_wall))  # the harness measures from here + warm-up
    began = time.monotonic()
    cpu0 = time.process_time()
    measured_from = None
    first = warm if measure_file is None else None  # index of the window's first record, once known
    next_look = 0.0
    sent = 0
    produce = p.produce
    while sent < count:
        if first is None and time.monotonic() >= next_look:
            next_look = time.monotonic() + 0.1
            if measure_file.exists():  # the window begins at the record due then (or the next one)
                at = float(measure_file.read_text())
                first = min(warm, max(sent, math.ceil((at - started_wall) * rate)))
                count = first + int(rate * seconds)
        if measured_from is None and first is not None and sent >= first:
            measured_from, cpu0 = time.monotonic(), time.process_time()
        due = min(count if first is not None else warm, int((time.monotonic() - began) * rate) + 1)
        while sent < due:
            r = records[sent]
            try:
                produce(topic, r.value, r.key)
            except BufferError:  # librdkafka's queue is full: serve it, then retry
                p.poll(0.005)
                continue
            records[sent] = None  # sent: its memory may go
            sent += 1
        p.poll(0)
        if sent < count:
            time.sleep(0.004)  # ~linger.ms: each wake-up hands librdkafka a few dozen records
    took = time.monotonic() - (measured_from or began)
    left = p.flush(60)
    first = warm if first is None else first
    stored = list(gen.truth.stored)[stored_before[first]:stored_before[count]]  # the measured window's messages
    Path(spec["out"] + ".hashes").write_bytes(b"".join(stored))
    Path(spec["out"]).write_text(json.dumps({
        "sent": count - first, "warmup_sent": first, "seconds": took, "stored": len(stored), "flushed_at": time.time(),
        "late_start_s": round(late_start, 2), "generate_cpu_s": round(generate_cpu_s, 1),
        "send_cpu_us_per_record": round((time.process_time() - cpu0) / max(count - first, 1) * 1e6, 2),
        "undelivered": left + len(failed), "errors": failed[:5]}))


def role_prober(spec: dict) -> None:
    """Every 1/spec['rate'] s: produce a new message (acks=all) and, from its acknowledgement, wait
    for bridge B to answer it. One poller asks B for every unanswered probe at once (a store v3
    query by their message hashes, a new stream each, as reference clients do) every
    spec['poll_ms'] ms while any is unanswered: B's load from the prober is bounded
    (1000 / poll_ms queries a second at most) whatever the latency, where a poll loop per probe
    multiplied its queries when B fell behind. A probe's latency is the response to the first
    query that held it minus its acknowledgement (resolution poll_ms plus one round trip). One
    JSON line per probe to spec['out']."""
    import trio

    from core.message import message_hash
    from ingest.store import codec_v3
    from ingest.store.client import StoreClient
    from schemas import pipeline_records_pb2 as pr
    from schemas import waku_message_pb2 as wm
    from tools.loadgen import producer

    out = open(spec["out"], "a", buffering=1)
    p = producer(spec["bootstrap"], linger_ms=0)
    start_file = Path(spec["start_file"])  # the harness writes when the measured window begins
    while not start_file.exists():
        time.sleep(0.05)
    time.sleep(max(0.0, float(start_file.read_text()) - time.time()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    waiting: dict[bytes, float] = {}  # hash -> acknowledged at (perf_counter), in acknowledgement order
    errors = [0]

    def done(h: bytes, found: float | None) -> None:
        acked = waiting.pop(h)
        out.write(json.dumps({"hash": h.hex(), "ms": None if found is None else (found - acked) * 1000,
                              "acked": time.time() - (time.perf_counter() - acked)}) + "\n")

    async def probe(seq: int) -> None:
        now = time.time()
        msg = wm.WakuMessage(payload=b"probe-%d-" % seq + os.urandom(16), content_topic=PROBE_CT,
                             timestamp=int(now * 1e9))
        h = message_hash(PROBE_PUBSUB, msg.payload, msg.content_topic, None, msg.timestamp)
        value = pr.IngestRecord(pubsub_topic=PROBE_PUBSUB, message=msg, received_time=now,
                                source=pr.RELAY, bridge_id="bench-probe").SerializeToString()
        fut = p.send(TOPIC, key=h, value=value)
        await trio.to_thread.run_sync(lambda: fut.get(timeout=60))
        waiting[h] = time.perf_counter()

    async def poller(client, peer) -> None:
        seq = 0
        while not (stop.is_set() and not waiting):
            tick = trio.current_time() + spec["poll_ms"] / 1000
            for h, acked in list(waiting.items()):  # the oldest first
                if time.perf_counter() - acked > spec["timeout_s"]:
                    done(h, None)
            asked = list(waiting)[:20]
            if asked:
                seq += 1
                try:
                    resp = await client.query_v3(peer, codec_v3.request(f"p{seq}", hashes=asked))
                    found = time.perf_counter()
                    if resp.status_code == 200:
                        for m in resp.messages:
                            if bytes(m.message_hash) in waiting:
                                done(bytes(m.message_hash), found)
                except Exception:  # noqa: BLE001 - counted; the probes go on
                    errors[0] += 1
            await trio.sleep(max(0.0, tick - trio.current_time()))

    async def main() -> None:
        async with StoreClient.running(timeout=15) as client:
            peer = await client.connect(spec["peer"])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(poller, client, peer)
                seq, nxt = 0, trio.current_time()
                while not stop.is_set():
                    nursery.start_soon(probe, seq)
                    seq += 1
                    nxt += 1.0 / spec["rate"]
                    await trio.sleep(max(0.0, nxt - trio.current_time()))

    trio.run(main)
    out.write(json.dumps({"query_errors": errors[0]}) + "\n")
    p.close()


# ---------------------------------------------------------------------------------------------
# Watching Delta commits
# ---------------------------------------------------------------------------------------------

class DeltaWatcher(threading.Thread):
    """Follows the Delta log of `messages`. For each version: its commit time (the log entry's
    mtime), and per added file the rows' hash prefixes (first 8 bytes) and Kafka append times."""

    def __init__(self, path: str, interval_s: float = 0.05, fs=None) -> None:
        from pyarrow import fs as pafs

        super().__init__(daemon=True)
        # `fs`: Arrow's file system of the table (its S3 one for --warehouse s3; `path` bucket/key)
        self.path, self.interval_s, self.fs = path, interval_s, fs or pafs.LocalFileSystem()
        self.commits: list[tuple[int, float, int]] = []  # (version, commit time, rows added)
        self.prefixes: list = []  # numpy uint64 arrays
        self.latencies: list = []  # numpy float arrays (commit time - kafka append time, s)
        self.stop_event = threading.Event()
        self.version = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            if not self.step():
                time.sleep(self.interval_s)

    def step(self) -> bool:
        from pyarrow import fs as pafs

        entry = f"{self.path}/_delta_log/{self.version:020d}.json"
        info = self.fs.get_file_info(entry)
        if info.type == pafs.FileType.NotFound:
            return False
        committed = info.mtime.timestamp()
        with self.fs.open_input_stream(entry) as f:
            text = f.read().decode()
        added = [json.loads(line)["add"]["path"] for line in text.splitlines() if line.startswith('{"add"')]
        rows = 0
        for name in added:
            rows += self._read(f"{self.path}/{name}", committed)
        self.commits.append((self.version, committed, rows))
        self.version += 1
        return True

    def _read(self, file: str, committed: float) -> int:
        from urllib.parse import unquote

        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        t = pq.read_table(unquote(file), columns=["message_hash", "kafka_timestamp"], filesystem=self.fs)
        if t.num_rows == 0:
            return 0
        hashes = t.column("message_hash").combine_chunks().cast(pa.binary())
        offsets = np.frombuffer(hashes.buffers()[1], dtype=np.int32)[hashes.offset:hashes.offset + len(hashes) + 1]
        data = np.frombuffer(hashes.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
        self.prefixes.append(data.reshape(-1, 32)[:, :8].copy().view(np.uint64).ravel())
        ts = t.column("kafka_timestamp").combine_chunks().cast(pa.timestamp("us")).cast(pa.int64())
        self.latencies.append(committed - ts.to_numpy(zero_copy_only=False) / 1e6)
        return t.num_rows


# ---------------------------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------------------------

BATCH_LINE = re.compile(r"batch (\d+): (\d+) in, (\d+) stored.*\(([\d.]+)s: (\{.*\})\)")


def batch_figures(job_log: Path, after_batch: int, last: int) -> dict:
    """Per-batch times the store job logs (`batch N: ... (T s: {phase: s})`): the batches after
    `after_batch` up to `last` (the measured window's)."""
    import ast

    times, inputs, phases = [], [], {}
    for line in job_log.read_text(errors="replace").splitlines():
        m = BATCH_LINE.search(line)
        if not m or not after_batch < int(m.group(1)) <= last:
            continue
        times.append(float(m.group(4)))
        inputs.append(int(m.group(2)))
        for k, v in ast.literal_eval(m.group(5)).items():
            phases.setdefault(k, []).append(v)
    if not times:
        return {"batches": 0}
    return {"batches": len(times), "batch_p50_s": finite(percentile(times, 50), 2),
            "batch_max_s": round(max(times), 2), "batch_rows_mean": round(sum(inputs) / len(inputs)),
            "batch_phase_p50_s": {k: finite(percentile(v, 50), 3) for k, v in phases.items()}}


def last_batch(job_log: Path) -> int:
    ids = [int(m.group(1)) for m in map(BATCH_LINE.search, job_log.read_text(errors="replace").splitlines()) if m]
    return max(ids) if ids else -1



# ---------------------------------------------------------------------------------------------
# --profile: one store job's micro-batches, stage by stage (in-process, same input every run)
# ---------------------------------------------------------------------------------------------

def profile(args) -> dict:
    """Produce `--profile` seeded records, run the store query in this process (available-now,
    `--max-offsets` records per batch) with Spark's event log on, and report per batch: wall
    time, the writer's phases, every Spark job (duration, call site) and every Delta commit.
    `--untimed-share` clears the sender timestamp of that share of the valid records, so the
    global de-duplication check (untimed copies against every stored untimed row) runs."""
    from core.config import load_config
    from core.spark_conf import SparkSettings
    from pipeline.spark.session import build_session, freeze_start_up_objects
    from pipeline.store import job as store_job
    from pipeline.store.settings import StoreJobSettings
    from schemas import pipeline_records_pb2 as pr
    from tools.embedded_kafka import EmbeddedKafka
    from tools.loadgen import LoadGenerator, LoadProfile, produce

    t_start = time.time()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="waku-bench-profile-"))
    (tmp / "events").mkdir(parents=True, exist_ok=True)
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=free_port(), controller_port=free_port(),
                           jar_dir=REPO / ".cache/jars/kafka", heap="-Xmx1g")
    broker.start()
    out: dict = {}
    try:
        from core.kafka import ensure_topics

        ensure_topics(broker.bootstrap_servers, {TOPIC: 4})
        gen = LoadGenerator(LoadProfile(payload_bytes=args.payload_bytes, seed=42))
        records = gen.batch(args.profile)
        if args.untimed_share:
            import random

            rnd = random.Random(7)
            for r in records:
                rec = pr.IngestRecord()
                try:
                    rec.ParseFromString(r.value)
                except Exception:  # noqa: BLE001 - an invalid record stays as it is
                    continue
                if rec.HasField("message") and rec.message.timestamp and rnd.random() < args.untimed_share:
                    rec.message.ClearField("timestamp")
                    r.value = rec.SerializeToString()
        produce(broker.bootstrap_servers, TOPIC, records)
        if args.seed_rows:
            # A table of retention size before the first batch: two days of history ending 10
            # minutes ago (outside the receive-time window), `--seed-untimed-share` of it
            # without sender timestamp: what the global check for untimed copies must read.
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from store_query import SPAN_S, write_table

            seconds = write_table(str(tmp / "run0" / "wh" / "messages"), args.seed_rows, 16_384,
                                  base_t=time.time() - 600 - SPAN_S, untimed_share=args.seed_untimed_share)
            out["seed"] = {"rows": args.seed_rows, "untimed_share": args.seed_untimed_share,
                           "write_s": round(seconds, 1)}
            log(f"seeded {args.seed_rows:,} rows in {seconds:.0f} s")

        def cfg_for(run: str):
            return load_config([f"kafka.bootstrap_servers={broker.bootstrap_servers}",
                                f"warehouse.root={tmp / run / 'wh'}", f"warehouse.checkpoints={tmp / run / 'cp'}",
                                f"spark.master={args.master}", "spark.shuffle_partitions=2",
                                f"store.max_offsets_per_trigger={args.max_offsets}",
                                "spark.options=spark.eventLog.enabled=true,spark.eventLog.compress=false,"
                                f"spark.eventLog.rolling.enabled=false,spark.eventLog.dir=file://{tmp / 'events'}"
                                + "".join(f",{o}" for o in args.spark_option)])

        spark = build_session(SparkSettings.from_config(cfg_for("run0")), "store-profile")
        jvm_pid = spark.sparkContext._gateway.proc.pid  # the driver JVM (local mode: the executors too)
        # Classes Spark generated and Janino compiled (code not found in the codegen cache): a
        # histogram's count, so exact; the driver and (local mode) the executors share it.
        compiled = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
        windows: list[tuple] = []  # (batch id, start, end, phases, input rows, writer name)
        import importlib.util
        import inspect

        current = store_job.write_checked_batch
        writers = {"current": current}
        if args.writer:  # another version of pipeline/store/writer.py (before/after comparisons)
            spec = importlib.util.spec_from_file_location("writer_under_test", args.writer)
            module = importlib.util.module_from_spec(spec)
            sys.modules["writer_under_test"] = module
            spec.loader.exec_module(module)
            writers = {"other": module.write_checked_batch}
            if args.compare:  # then the current one, in the same session over the same input
                writers = {"other": module.write_checked_batch, "current": current}
        rounds = list(writers)

        def prefix(name: str) -> str:  # the writer's name on its figures, when two are compared
            return "" if len(writers) == 1 else f"{name}_"

        freeze_start_up_objects()  # as jobs/store.py does (the records made above are many)
        began = time.monotonic()
        for i, name in enumerate(rounds):
            real = writers[name]
            takes = len(inspect.signature(real).parameters) - 3  # an older writer takes fewer

            def timed(batch, batch_id, settings, *rest, real=real, takes=takes, name=name):
                t0 = time.time()
                cpu0 = (proc_cpu_s(jvm_pid), time.process_time())
                compiles0 = compiled.getCount()
                stats = real(batch, batch_id, settings, *rest[:takes])
                cpu = (round(proc_cpu_s(jvm_pid) - cpu0[0], 2), round(time.process_time() - cpu0[1], 2),
                       compiled.getCount() - compiles0)
                windows.append((batch_id, t0, time.time(), dict(stats.phase_seconds), stats.input_rows, name, cpu))
                log(f"{name} batch {batch_id}: {stats.input_rows} in, {stats.stored_rows} stored, "
                    f"{time.time() - t0:.2f} s {stats.phase_seconds}")
                return stats

            store_job.write_checked_batch = timed
            try:
                q = store_job.start_store_query(spark, StoreJobSettings.from_config(cfg_for(f"run{i}")),
                                                available_now=True)
                # A budget keeps the run short on a shared machine: what finished by then is reported.
                finished = q.awaitTermination(max(1.0, args.profile_budget - (time.time() - t_start)))
                # The streaming engine's own time per batch (offset and commit logs, Kafka
                # offsets, planning) around foreachBatch ("addBatch"), full batches only.
                engine = [p["durationMs"] for p in q.recentProgress
                          if p["numInputRows"] >= 0.9 * args.max_offsets and p["batchId"] > 0]
                if engine:
                    out[f"{prefix(name)}engine_mean_ms"] = {
                        k: round(sum(d.get(k, 0) for d in engine) / len(engine))
                        for k in dict.fromkeys(k for d in engine for k in d)}
                if not finished:
                    q.stop()
                    out["stopped_by_budget"] = True
                    break
            finally:
                store_job.write_checked_batch = current
        out["catch_up_s"] = round(time.monotonic() - began, 1)
        out["catch_up_per_s"] = round(sum(w[4] for w in windows) / (time.monotonic() - began))
        out["spark_options"] = list(args.spark_option)
        out["stored_rows"] = (spark.read.format("delta").load(str(tmp / "run0" / "wh" / "messages")).count()
                              - args.seed_rows)
        spark.stop()
        (tmp / "windows.json").write_text(json.dumps(windows))

        jobs: dict[int, dict] = {}
        for f in (tmp / "events").rglob("*"):
            if not f.is_file() or f.name.startswith("."):
                continue
            for line in f.read_text().splitlines():
                e = json.loads(line)
                if e["Event"] == "SparkListenerJobStart":
                    props = e.get("Properties") or {}
                    jobs[e["Job ID"]] = {"start": e["Submission Time"] / 1000,
                                         "site": props.get("callSite.short", ""),
                                         "desc": props.get("spark.job.description") or ""}
                elif e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in jobs:
                    jobs[e["Job ID"]]["end"] = e["Completion Time"] / 1000
        commits = []
        for log_dir in tmp.glob("run*/wh/*/_delta_log"):
            for entry in sorted(log_dir.glob("*.json")):
                for line in entry.read_text().splitlines():
                    if line.startswith('{"commitInfo"'):
                        ci = json.loads(line)["commitInfo"]
                        commits.append((ci["timestamp"] / 1000, log_dir.parent.name, ci.get("operation")))
        batches = []
        for batch_id, t0, t1, phases, rows, name, (jvm_cpu, py_cpu, compiles) in windows:
            js = [j for j in jobs.values() if t0 <= j["start"] <= t1 + 0.001]
            batches.append({
                "writer": name, "batch": batch_id, "rows": rows, "seconds": round(t1 - t0, 2), "phases": phases,
                "jvm_cpu_s": jvm_cpu, "python_cpu_s": py_cpu, "compiles": compiles,
                "spark_jobs": [(round(j.get("end", t1) - j["start"], 2),
                                j["desc"].split("\n")[-1][:40] or j["site"][:40])
                               for j in sorted(js, key=lambda j: j["start"])],
                "spark_job_seconds": round(sum(j.get("end", t1) - j["start"] for j in js), 2),
                "delta_commits": [(table, op) for ts, table, op in commits if t0 <= ts <= t1 + 0.5]})
            print(json.dumps(batches[-1]), flush=True)
        # Steady batches: full ones (input at max_offsets), not the session's first (JIT warm-up).
        full = [b for b in batches[1:] if b["rows"] >= 0.9 * args.max_offsets]
        for name in dict.fromkeys(b["writer"] for b in batches):
            mine = [b for b in full if b["writer"] == name]
            if not mine:
                continue
            pre = prefix(name)
            phases = {k: round(sum(b["phases"].get(k, 0) for b in mine) / len(mine), 3)
                      for k in dict.fromkeys(k for b in mine for k in b["phases"])}
            out.update({f"{pre}batches": len(mine),
                        f"{pre}batch_mean_s": round(sum(b["seconds"] for b in mine) / len(mine), 2),
                        f"{pre}batch_p50_s": finite(percentile([b["seconds"] for b in mine], 50), 2),
                        f"{pre}phase_mean_s": phases,
                        # CPU of the batch's work itself (the foreachBatch call), per record in.
                        f"{pre}jvm_cpu_us_per_record": round(sum(b["jvm_cpu_s"] for b in mine)
                                                             / sum(b["rows"] for b in mine) * 1e6, 1),
                        f"{pre}python_cpu_us_per_record": round(sum(b["python_cpu_s"] for b in mine)
                                                                / sum(b["rows"] for b in mine) * 1e6, 1),
                        f"{pre}compiles_per_batch": round(sum(b["compiles"] for b in mine) / len(mine), 1),
                        f"{pre}spark_jobs_per_batch": round(sum(len(b["spark_jobs"]) for b in mine) / len(mine), 1),
                        f"{pre}spark_job_seconds_per_batch":
                            round(sum(b["spark_job_seconds"] for b in mine) / len(mine), 2),
                        f"{pre}delta_commits_per_batch":
                            round(sum(len(b["delta_commits"]) for b in mine) / len(mine), 1)})
        out.update(first_batch_s=batches[0]["seconds"] if batches else None, records=args.profile,
                   max_offsets_per_trigger=args.max_offsets, untimed_share=args.untimed_share)
    finally:
        broker.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 s of load (default 120 s), 30 s drain, 20,000 offsets a batch, "
                             "probes time out after 5 s (30 s)")
    parser.add_argument("--rate", type=float, default=50_000.0, help="offered records/s, all producers")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=None, help="length of the load")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds of load at the same rate before the measured window "
                             "(default 30; 10 with --quick)")
    parser.add_argument("--warmup-until-lag", type=float, default=None, metavar="L",
                        help="adaptive warm-up: the window begins once a commit's median append -> commit "
                             "latency is at most L s (after --warmup-min s; --warmup is then the longest)")
    parser.add_argument("--warmup-min", type=float, default=30.0,
                        help="with --warmup-until-lag: the shortest warm-up (s)")
    parser.add_argument("--no-service", action="store_true",
                        help="no bridge B and no prober: the store job's throughput with only the broker and "
                             "the producers beside it (queryable figures are then null)")
    parser.add_argument("--drain", type=float, default=None, help="max wait for the job to catch up")
    parser.add_argument("--max-offsets", type=int, default=None,
                        help="store.max_offsets_per_trigger (default 50,000; 20,000 with --quick)")
    parser.add_argument("--trigger-seconds", type=float, default=0.5, help="store.trigger_seconds")
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--probe-rate", type=float, default=5.0, help="queryable probes per second")
    parser.add_argument("--probe-poll-ms", type=float, default=10.0,
                        help="the prober asks B for all its unanswered probes this often (one query)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--job-set", action="append", default=[], metavar="KEY=VALUE",
                        help="one more setting for the store job alone (its --set; repeatable)")
    parser.add_argument("--job-nice", type=int, default=0, metavar="N",
                        help="run the store job (spark-submit and its JVM) at niceness N: on a shared host the "
                             "batch job yields the cores to the serving bridge first")
    parser.add_argument("--keep", default=None, help="run in this directory and keep it")
    parser.add_argument("--warehouse", choices=["local", "s3"], default="local",
                        help="s3: tables and checkpoints on a SeaweedFS S3 gateway started for the run "
                             "(tools/object_store.py; commit times are its objects' Last-Modified, whole seconds)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="instead: profile the store job's batches over N seeded records, in-process")
    parser.add_argument("--profile-budget", type=float, default=170.0,
                        help="--profile: stop the query after this many seconds from the start")
    parser.add_argument("--spark-option", action="append", default=[], metavar="KEY=VALUE",
                        help="--profile: one more Spark setting for the session (repeatable)")
    parser.add_argument("--writer", default=None,
                        help="--profile: path of another writer.py to profile (its write_checked_batch)")
    parser.add_argument("--compare", action="store_true",
                        help="--profile with --writer: that writer, then the current one, in one session")
    parser.add_argument("--untimed-share", type=float, default=0.0,
                        help="--profile: share of valid records without sender timestamp")
    parser.add_argument("--seed-rows", type=int, default=0,
                        help="--profile: first write this many rows of older history into messages "
                             "(a table of retention size)")
    parser.add_argument("--seed-untimed-share", type=float, default=0.0,
                        help="--profile --seed-rows: share of those rows without sender timestamp")
    parser.add_argument("--role", choices=["producer", "prober"], help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        {"producer": role_producer, "prober": role_prober}[args.role](json.loads(args.spec))
        return 0
    if args.max_offsets is None:
        args.max_offsets = 20_000 if args.quick or args.profile else 50_000
    if args.profile:
        load_start = os.getloadavg()
        out = profile(args)
        out.update(load_avg_start=[round(x, 2) for x in load_start],
                   load_avg_end=[round(x, 2) for x in os.getloadavg()], date=time.strftime("%Y-%m-%d"))
        print(json.dumps(out), flush=True)
        return 0
    seconds = args.seconds or (20.0 if args.quick else 120.0)
    drain = args.drain or (30.0 if args.quick else 60.0)
    if args.warmup is None:
        args.warmup = 10.0 if args.quick else 30.0

    import numpy as np

    from core.kafka import ensure_topics
    from tools.embedded_kafka import EmbeddedKafka
    from tools.loadgen import GENERATE_S_PER_RECORD, LoadGenerator, LoadProfile, produce
    from tools.processes import group_cpu_s, jvm_threads_cpu_s, start_bridge

    load_start = os.getloadavg()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="waku-bench-store-"))
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    kport, cport = free_port(), free_port()
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=kport, controller_port=cport,
                           jar_dir=REPO / ".cache/jars/kafka", heap="-Xmx1g",
                           # a backlog larger than the default 1 GiB a partition stays readable
                           extra_config={"log.retention.bytes": -1})
    broker.start()
    bootstrap = broker.bootstrap_servers
    s3 = None
    if args.warehouse == "s3":  # SeaweedFS's S3 gateway: tables and checkpoints on s3a://
        from tools.object_store import SeaweedS3

        s3 = SeaweedS3(tmp / "s3").start()
        s3.create_bucket("waku")
    overrides = [
        f"kafka.bootstrap_servers={bootstrap}", f"warehouse.root={tmp / 'warehouse'}",
        f"warehouse.checkpoints={tmp / 'checkpoints'}", f"spark.master={args.master}",
        "spark.shuffle_partitions=2", f"store.trigger_seconds={args.trigger_seconds}",
        f"store.max_offsets_per_trigger={args.max_offsets}", "job_metrics.store_port=0",
        *(s3.overrides("waku") if s3 else []),
    ]
    procs: list[subprocess.Popen] = []
    bridge = None
    results: dict[str, object] = {}
    try:
        ensure_topics(bootstrap, {TOPIC: 4})
        job_log = tmp / "logs" / "store-job.log"
        submitted = time.time()
        job = subprocess.Popen([*(["nice", "-n", str(args.job_nice)] if args.job_nice else []),
                                str(REPO / "spark-submit.sh"), "store",
                                *[a for o in overrides + args.job_set for a in ("--set", o)]],
                               stdout=job_log.open("ab"), stderr=subprocess.STDOUT, cwd=REPO,
                               start_new_session=True)
        procs.append(job)
        bridge = None if args.no_service else start_bridge(overrides + [
            f"bridge.key_file={tmp / 'b' / 'key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
            "bridge.ws_port=-1", "bridge.metrics_port=-1", "store_service.enabled=true",
            "store_service.refresh_interval_s=0.5", "store_service.max_queries_per_peer_per_s=0",
            "filter.enabled=false", "bridge.lightpush_enabled=false"],
            log=(tmp / "logs" / "bridge-b.log").open("a"), timeout=120)
        peer = bridge.tcp_addr.replace("0.0.0.0", "127.0.0.1") if bridge else None
        log(f"bridge B at {peer}; store job submitted (log {job_log})")

        # Warm-up: start-up of the job is measured apart (submit -> first Delta commit of rows).
        produce(bootstrap, TOPIC, LoadGenerator(LoadProfile(payload_bytes=args.payload_bytes, seed=999)).batch(2000))
        watcher = (DeltaWatcher("waku/waku/warehouse/messages", fs=s3.settings.arrow_filesystem()) if s3
                   else DeltaWatcher(str(tmp / "warehouse" / "messages")))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if job.poll() is not None:
                raise RuntimeError(f"store job exited with {job.returncode}: see {job_log}")
            while watcher.step():
                pass
            if any(rows for _, _, rows in watcher.commits):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("store job made no commit in 300 s")
        first = next(t for _, t, rows in watcher.commits if rows)
        results["startup_s"] = round(first - submitted, 1)
        log(f"start-up: first commit {results['startup_s']} s after spark-submit; load starts")

        per = args.rate / args.producers
        # The producers generate their records first, all sharing the cores with the store
        # job's start. A producer that starts late stamps its records seconds in the past, and
        # two producers late by different amounts offer receive times seconds apart (up to
        # 14.8 s late with 20 µs a record), which the tail's sorted lists pay for on every
        # insert (docs/benchmarks.md, session 16).
        warmup = args.warmup  # with --warmup-until-lag: the longest warm-up
        adaptive = args.warmup_until_lag is not None
        start_at = (time.time() + 3.0 + per * (seconds + warmup) * GENERATE_S_PER_RECORD * args.producers
                    / (os.cpu_count() or 2))
        for i in range(args.producers):
            spec = {"bootstrap": bootstrap, "rate": per, "seconds": seconds, "seed": 100 + i, "warmup_s": warmup,
                    "payload_bytes": args.payload_bytes, "start_at": start_at,
                    "measure_file": str(tmp / "measure_at") if adaptive else None,
                    "out": str(tmp / f"producer-{i}.json")}
            procs.append(subprocess.Popen([sys.executable, __file__, "--role", "producer", "--spec", json.dumps(spec)],
                                          stdout=(tmp / "logs" / f"producer-{i}.log").open("ab"),
                                          stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True))
        probe_out = tmp / "probes.jsonl"
        prober = None
        if not args.no_service:
            prober = subprocess.Popen([sys.executable, __file__, "--role", "prober", "--spec", json.dumps(
                {"bootstrap": bootstrap, "peer": peer, "rate": args.probe_rate,
                 "timeout_s": 5.0 if args.quick else 30.0, "poll_ms": args.probe_poll_ms,
                 "start_file": str(tmp / "measure_at"), "out": str(probe_out)})],
                stdout=(tmp / "logs" / "prober.log").open("ab"),
                stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
            procs.append(prober)
        watcher.start()
        producers = procs[1:1 + args.producers]
        # CPU per component during the measured load (where the two cores go).
        groups = {"store_job": job.pid, "kafka_broker": broker._proc.pid}
        if bridge is not None:
            groups.update(bridge_b=bridge.proc.pid, prober=prober.pid)
        started = [Path(str(tmp / f"producer-{i}.json") + ".started") for i in range(args.producers)]
        while not all(f.exists() for f in started):  # a producer still generating starts late
            if any(p.poll() not in (None, 0) for p in producers):
                raise RuntimeError(f"a producer failed: see {tmp / 'logs'}")
            time.sleep(0.1)
        load_began = max(float(f.read_text()) for f in started)
        measure_at = load_began + warmup
        if adaptive:
            log(f"load starts: warm-up at the same rate until the job commits within {args.warmup_until_lag:g} s "
                f"of the append (at least {args.warmup_min:.0f} s, at most {warmup:.0f} s), "
                f"then {seconds:.0f} s measured")
            while time.time() < load_began + warmup - 1.0:
                lags = watcher.latencies[-1] if watcher.latencies else []
                if (time.time() >= load_began + args.warmup_min and len(lags)
                        and (percentile(lags, 50) or 0.0) <= args.warmup_until_lag):
                    measure_at = time.time() + 0.5
                    break
                time.sleep(0.25)
        else:
            log(f"load starts: {warmup:.0f} s of warm-up at the same rate, then {seconds:.0f} s measured")
        write_whole(tmp / "measure_at", str(measure_at))
        results["warmup_taken_s"] = round(measure_at - load_began, 1)
        time.sleep(max(0.0, measure_at - time.time()))
        load_commit_from = watcher.version
        window_batch = last_batch(job_log)  # the batch_* figures: batches that end in the window
        # How far behind the job is when the window begins (a backlog left by the warm-up, while
        # the JIT and caches were cold, weighs on every latency of the window): the append ->
        # commit latency, median, of the last commit before the window.
        lag_at_start = finite(percentile(watcher.latencies[-1], 50), 2) if watcher.latencies else None
        cpu0 = {k: group_cpu_s(v) for k, v in groups.items()}
        jvm0 = jvm_threads_cpu_s(groups["store_job"])
        for i, p in enumerate(producers):
            if p.wait(seconds + 300) != 0:
                raise RuntimeError(f"producer {i} exited with {p.returncode}: see {tmp / 'logs'}")
        ended = time.time()
        window_last_batch = last_batch(job_log)
        cpu1 = {k: group_cpu_s(v) for k, v in groups.items()}
        jvm1 = jvm_threads_cpu_s(groups["store_job"])
        summaries = [json.loads((tmp / f"producer-{i}.json").read_text()) for i in range(args.producers)]
        sent = sum(s["sent"] for s in summaries)
        results["offered_per_s"] = round(sent / max(s["seconds"] for s in summaries))
        results["committed_lag_at_start_s"] = lag_at_start
        results["offered_records"] = sent
        results["producer_late_start_s"] = max(s["late_start_s"] for s in summaries)
        results["undelivered"] = sum(s["undelivered"] for s in summaries)
        cpu = {k: round(cpu1[k] - cpu0[k], 1) for k in groups}
        cpu["producers"] = round(sum(s["send_cpu_us_per_record"] * s["sent"] for s in summaries) / 1e6, 1)
        results["load_cpu_s"] = cpu
        results["load_cpu_us_per_record"] = {k: round(v / max(sent, 1) * 1e6, 1) for k, v in cpu.items()}
        # The store job's JVM by thread kind: the JIT still compiling minutes after the start
        # is part of the job's CPU in the window (docs/benchmarks.md, session 17).
        results["store_job_jvm_cpu_s"] = {k: round(jvm1[k] - jvm0[k], 1) for k in jvm1}
        log(f"offered {sent} records in {seconds:.0f} s: {results['offered_per_s']}/s; draining")
        if prober is not None:
            prober.send_signal(signal.SIGTERM)

        expected = np.concatenate([np.frombuffer((tmp / f"producer-{i}.json.hashes").read_bytes(), dtype=np.uint8)
                                   .reshape(-1, 32)[:, :8].copy().view(np.uint64).ravel()
                                   for i in range(args.producers)])

        def committed_count() -> int:
            got = np.concatenate(watcher.prefixes) if watcher.prefixes else np.empty(0, np.uint64)
            return int(np.isin(expected, got).sum())

        drain_end = time.monotonic() + drain
        while time.monotonic() < drain_end and committed_count() < len(expected):
            time.sleep(1.0)
        try:
            if prober is not None:
                prober.wait(40)
        except subprocess.TimeoutExpired:
            prober.kill()
        watcher.stop_event.set()
        watcher.join(30)

        # Committed latency over every message the store must hold.
        got = np.concatenate(watcher.prefixes) if watcher.prefixes else np.empty(0, np.uint64)
        lat = np.concatenate(watcher.latencies) if watcher.latencies else np.empty(0)
        order = np.argsort(got, kind="stable")
        got, lat = got[order], lat[order]
        idx = np.clip(np.searchsorted(got, expected), 0, max(len(got) - 1, 0))
        hit = (got[idx] == expected) if len(got) else np.zeros(len(expected), bool)
        committed = (lat[idx][hit] if len(lat) else np.empty(0)).tolist()
        over_all = latency_summary(committed, int(len(expected)))  # the missing ones as +inf
        over_committed = latency_summary(committed, len(committed))
        results.update(
            expected_messages=int(len(expected)), missing=over_all.missing,
            committed_p50_s=over_all.p50, committed_p99_s=over_all.p99,
            committed_p50_of_committed_s=over_committed.p50, committed_p99_of_committed_s=over_committed.p99)

        # Steady-state throughput: rows committed between the first and the last load commit.
        load_commits = [(t, rows) for v, t, rows in watcher.commits if v >= load_commit_from and rows]
        if len(load_commits) >= 2:
            t0, t1 = load_commits[0][0], load_commits[-1][0]
            rows = sum(r for _, r in load_commits[1:])
            results["messages_per_s"] = round(rows / (t1 - t0)) if t1 > t0 else None
            in_load = [(t, r) for t, r in load_commits if t <= ended]
            if len(in_load) >= 2:
                results["messages_per_s_during_load"] = round(
                    sum(r for _, r in in_load[1:]) / (in_load[-1][0] - in_load[0][0]))
            results["load_commits"] = len(load_commits)
        else:
            results["messages_per_s"] = None

        lines = [json.loads(line) for line in probe_out.read_text().splitlines()] if probe_out.exists() else []
        probes = [pr for pr in lines if "hash" in pr]
        results["queryable_query_errors"] = sum(pr.get("query_errors", 0) for pr in lines)
        queryable = latency_summary([pr["ms"] for pr in probes if pr["ms"] is not None], len(probes), digits=1)
        results.update(
            queryable_sample=len(probes), queryable_missing=queryable.missing,
            queryable_p50_ms=queryable.p50, queryable_p99_ms=queryable.p99, queryable_max_ms=queryable.max)
        results.update(batch_figures(job_log, window_batch, window_last_batch))
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        if bridge is not None:
            bridge.stop(20)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        broker.stop()
        if s3 is not None:
            s3.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    results.update(warehouse=args.warehouse, load_avg_start=[round(x, 2) for x in load_start],
                   load_avg_end=[round(x, 2) for x in os.getloadavg()],
                   rate_asked=args.rate, producers=args.producers, seconds=seconds,
                   no_service=args.no_service, warmup_s=args.warmup, warmup_until_lag_s=args.warmup_until_lag,
                   max_offsets_per_trigger=args.max_offsets, trigger_seconds=args.trigger_seconds,
                   payload_bytes=args.payload_bytes, probe_rate=args.probe_rate, probe_poll_ms=args.probe_poll_ms,
                   master=args.master, job_nice=args.job_nice, job_set=args.job_set,
                   cores=os.cpu_count(), quick=args.quick, date=time.strftime("%Y-%m-%d"))
    print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
