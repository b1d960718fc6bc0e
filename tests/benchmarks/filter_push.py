"""Bridge filter pusher throughput: one `waku-bridge run` process, real py-libp2p filter clients
in other processes, push records written straight into the bridge's push topic (no Spark).

    .venv/bin/python tests/benchmarks/filter_push.py [--quick] [--peers 400] [--procs 4]
        [--rate-per-peer 12] [--duration 30] [--one-shot-fraction 0.1] [--profile FILE]

Set-up: the embedded Kafka broker; one bridge (`python -m ingest.cli run`, its metrics on a free
port); `--procs` client processes hosting `--peers` libp2p hosts in all, each with one filter
connection and one SUBSCRIBE (its own content topic and a shared one); a producer process that
writes PushRecords into `waku.push.<bridge id>`, each peer offered `--rate-per-peer` pushes/s
(below filter.push_rate_per_peer, pacing the peers that read one push per stream) for
`--duration` s; then a fan-out: one message matching every peer (one record per peer, as the
filter job's join with Delta `subscriptions` writes them; its resident criteria write one record
with every peer as a target), written at once.

Clients read pushes as the reference clients do: most like nwaku and js-waku (read every push of
a stream until the bridge closes it), `--one-shot-fraction` like go-waku (read one push, close).
Each push is stamped on receipt (time.time(); same machine as the producer, which puts its
append time in the message's timestamp).

Report: offered pushes/s, delivered pushes/s (received by the clients: the headline), latency
append -> receipt p50/p99 over every push offered (tests/benchmarks/stats.py: nearest rank, a
push never received as +inf, null where a percentile falls on one), missing (must be 0),
duplicates, the fan-out's completion time (null unless every peer got it), and
the bridge's per-stage time (its waku_filter_push_stage_seconds counters). Last line: one JSON
object.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks import stats  # noqa: E402
from tools.processes import free_port  # noqa: E402

PUBSUB_TOPIC = "/waku/2/default-waku/proto"
FANOUT_TOPIC = "/bench/1/all/proto"


def peer_topic(i: int) -> str:
    return f"/bench/1/p{i}/proto"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- client process ---------------------------------------------------------------------------

def run_clients(spec: dict) -> None:
    """Host spec["count"] peers; print one JSON line {"ready": [[index, peer id], ...]} once all
    subscribed; on SIGTERM write every receipt to spec["out"] and exit."""
    import trio

    from ingest.filter.client import FilterClient
    from ingest.filter.codec import FILTER_PUSH_CODEC, MAX_PUSH_BYTES
    from ingest.framing import FrameReader
    from schemas import filter_v2_pb2 as fv2

    first, count, one_shot_every = spec["first"], spec["count"], spec["one_shot_every"]
    receipts: list[list] = []  # [peer index, payload id, receipt time]
    stats = {"streams": 0}

    def handler(index: int, one_shot: bool):
        async def on_push(stream) -> None:
            stats["streams"] += 1
            frames = FrameReader(stream, MAX_PUSH_BYTES)
            try:
                while True:
                    data = await frames.read_frame()
                    if data is None:
                        break
                    now = time.time()
                    mp = fv2.MessagePush.FromString(data)
                    ident = mp.waku_message.payload.decode().split("|", 1)[0]
                    receipts.append([index, ident, now, mp.waku_message.timestamp])
                    if one_shot:  # go-waku: one push per stream, then close
                        break
            except Exception:  # noqa: BLE001 - reset or closed: as a reference client, stop reading
                pass
            finally:
                try:
                    await stream.close()
                except Exception:  # noqa: BLE001
                    pass
        return on_push

    async def main() -> None:
        stop = trio.Event()
        clients: list[tuple[int, FilterClient]] = []

        async def one(index: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
            client = FilterClient()
            one_shot = one_shot_every > 0 and index % one_shot_every == 0
            async with client.running():
                client.host.set_stream_handler(FILTER_PUSH_CODEC, handler(index, one_shot))
                await client.connect_and_subscribe(spec["bridge"], PUBSUB_TOPIC, [peer_topic(index), FANOUT_TOPIC])
                clients.append((index, client))
                task_status.started()
                await stop.wait()

        async with trio.open_nursery() as nursery:
            limiter = trio.CapacityLimiter(8)

            async def start(i: int) -> None:
                async with limiter:
                    await nursery.start(one, i)
            async with trio.open_nursery() as starting:
                for i in range(first, first + count):
                    starting.start_soon(start, i)
            print(json.dumps({"ready": [[i, str(c.peer_id)] for i, c in sorted(clients)],
                              "one_shot": [i for i, _ in clients if one_shot_every and i % one_shot_every == 0]}),
                  flush=True)
            async def progress() -> None:
                while True:
                    await trio.sleep(1.0)
                    print(json.dumps({"received": len(receipts)}), flush=True)
            nursery.start_soon(progress)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            Path(spec["out"]).write_text(json.dumps({"receipts": receipts, "streams": stats["streams"]}))
            stop.set()
            nursery.cancel_scope.cancel()

    trio.run(main)


# -- producer process -------------------------------------------------------------------------

def run_producer(spec: dict) -> None:
    """Steady phase: each peer offered spec["rate"] pushes/s for spec["duration"] s; then the
    fan-out message to every peer. Writes {"sent": {id: [peer indexes]}, "phases": ...}."""
    from kafka import KafkaProducer

    from core.message import hash_of
    from schemas import pipeline_records_pb2 as pr
    from schemas.waku_message_pb2 import WakuMessage

    peers: list[list] = spec["peers"]  # [index, peer id]
    producer = KafkaProducer(bootstrap_servers=spec["kafka"], acks=1, linger_ms=5, batch_size=256 * 1024,
                             max_in_flight_requests_per_connection=5)
    topic = spec["topic"]
    n = len(peers)
    rate, duration = spec["rate"], spec["duration"]
    payload_pad = "x" * spec.get("payload_bytes", 100)
    sent = 0

    def record(index: int, peer: str, content_topic: str, ident: str, ts_ns: int) -> bytes:
        msg = WakuMessage(payload=f"{ident}|{payload_pad}".encode(), content_topic=content_topic, timestamp=ts_ns)
        return pr.PushRecord(peer_id=peer, pubsub_topic=PUBSUB_TOPIC, message=msg,
                             message_hash=hash_of(PUBSUB_TOPIC, msg), protocol="v2").SerializeToString()

    # Steady: peers are spread evenly over each second (peer k at offset k/n of the period).
    period = 1.0 / rate
    start = time.time() + 0.5
    seq = [0] * n
    total = int(rate * duration)
    t_first = start
    done = False
    while not done:
        now = time.time()
        done = True
        for k, (index, peer) in enumerate(peers):
            s = seq[k]
            if s >= total:
                continue
            done = False
            due = start + s * period + (k / n) * period
            if due <= now:
                ts = time.time()
                producer.send(topic, key=peer.encode(),
                              value=record(index, peer, peer_topic(index), f"s:{index}:{s}", int(ts * 1e9)))
                seq[k] = s + 1
                sent += 1
        time.sleep(0.002)
    producer.flush()
    t_steady_end = time.time()
    steady = {"sent": sent, "seconds": t_steady_end - t_first}
    print(json.dumps({"phase": "steady", **steady}), flush=True)

    time.sleep(spec.get("gap_s", 3.0))
    ts = time.time()
    fan_value = None
    for _index, peer in peers:  # one message, one record per subscribed peer (the filter job's output)
        msg = WakuMessage(payload=f"f:fan|{payload_pad}".encode(), content_topic=FANOUT_TOPIC, timestamp=int(ts * 1e9))
        if fan_value is None:
            fan_hash = hash_of(PUBSUB_TOPIC, msg)
        fan_value = pr.PushRecord(peer_id=peer, pubsub_topic=PUBSUB_TOPIC, message=msg, message_hash=fan_hash,
                                  protocol="v2").SerializeToString()
        producer.send(topic, key=peer.encode(), value=fan_value)
    producer.flush()
    print(json.dumps({"phase": "fanout", "sent": n, "at": ts, "seconds": time.time() - ts}), flush=True)
    producer.close()
    Path(spec["out"]).write_text(json.dumps({"steady": steady, "per_peer": total, "fanout_at": ts}))


# -- a sampling profiler for the bridge process -------------------------------------------------

def run_sampled_bridge(out: str, argv: list[str]) -> None:
    """`python -m ingest.cli <argv>` with a thread sampling the main thread's stack every 2 ms
    (cProfile slows the bridge threefold and its peers time out); at exit writes to `out` the
    share of busy samples per function, self and inclusive (samples in epoll: idle)."""
    import atexit
    import collections
    import runpy

    main_id = threading.main_thread().ident
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    counts = {"busy": 0, "idle": 0}
    stop = threading.Event()

    def name(code) -> str:
        return f"{Path(code.co_filename).name}:{code.co_name}"

    def sample() -> None:
        while not stop.wait(0.002):
            frame = sys._current_frames().get(main_id)
            if frame is None:
                continue
            if frame.f_code.co_name in ("get_events", "poll") and "epoll" in frame.f_code.co_filename:
                counts["idle"] += 1
                continue
            counts["busy"] += 1
            own[name(frame.f_code)] += 1
            seen = set()
            while frame is not None:
                n = name(frame.f_code)
                if n not in seen:
                    seen.add(n)
                    incl[n] += 1
                frame = frame.f_back

    def dump() -> None:
        stop.set()
        busy = max(1, counts["busy"])
        lines = [f"samples: busy {counts['busy']}, idle (epoll) {counts['idle']}", "", "self %:"]
        lines += [f"{100 * c / busy:6.2f} {n}" for n, c in own.most_common(40)]
        lines += ["", "inclusive %:"] + [f"{100 * c / busy:6.2f} {n}" for n, c in incl.most_common(80)]
        Path(out).write_text("\n".join(lines) + "\n")

    atexit.register(dump)
    threading.Thread(target=sample, daemon=True).start()
    sys.argv = ["ingest.cli", *argv]
    runpy.run_module("ingest.cli", run_name="__main__")


# -- orchestration ----------------------------------------------------------------------------

def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("waku_filter_push"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, list[float]]:
    """Per thread name: [user s, system s] (threads of one name added)."""
    out: dict[str, list[float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        acc = out.setdefault(name, [0.0, 0.0])
        acc[0] += int(fields[11]) / tick
        acc[1] += int(fields[12]) / tick
    return out


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    if sys.argv[1:3] == ["--role", "bridge-sampled"]:  # --role bridge-sampled --spec OUT -- <ingest.cli args>
        run_sampled_bridge(sys.argv[4], sys.argv[sys.argv.index("--") + 1:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="60 peers in 2 processes, 20 s (under 2 minutes)")
    ap.add_argument("--peers", type=int, default=400)
    ap.add_argument("--procs", type=int, default=4, help="client processes")
    ap.add_argument("--rate-per-peer", type=float, default=12.0, help="pushes/s offered per peer (one-shot: 13/s)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of the steady phase")
    ap.add_argument("--one-shot-fraction", type=float, default=0.1,
                    help="share of peers reading one push per stream (go-waku); the others keep reading")
    ap.add_argument("--payload-bytes", type=int, default=100)
    ap.add_argument("--profile", metavar="FILE", help="sample the bridge's stack, the busiest functions to FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra bridge settings")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "clients":
        run_clients(json.loads(args.spec))
        return 0
    if args.role == "producer":
        run_producer(json.loads(args.spec))
        return 0
    if args.quick:
        args.peers, args.procs, args.duration = 60, 2, 20.0

    from tools.embedded_kafka import EmbeddedKafka
    from tools.processes import start_bridge

    tmp = Path(tempfile.mkdtemp(prefix="filter-push-"))
    say(f"work dir {tmp}; load average {load_average()}")
    kafka_port, controller_port, metrics_port = free_port(), free_port(), free_port()
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=kafka_port, controller_port=controller_port,
                           jar_dir=REPO_ROOT / ".cache/jars/kafka")
    procs: list[subprocess.Popen] = []
    bridge = None
    try:
        broker.start()
        kafka = broker.bootstrap_servers
        overrides = [f"kafka.bootstrap_servers={kafka}", f"bridge.key_file={tmp / 'bridge.key'}",
                     "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1",
                     f"bridge.metrics_port={metrics_port}", "topics.push_partitions=2",
                     f"filter.max_peers={max(1000, args.peers)}", *args.set]
        if args.profile:
            # The same entry and arguments, sampled (the profile is written when the bridge exits).
            import tools.processes as tp
            orig = tp.bridge_command
            tp.bridge_command = lambda ov=(), cf=None: [sys.executable, __file__, "--role", "bridge-sampled",
                                                         "--spec", args.profile, "--", *orig(ov, cf)[3:]]
        bridge = start_bridge(overrides, log=(tmp / "bridge.log").open("w"), timeout=120)
        bridge_id = bridge.peer_id
        topic = f"waku.push.{bridge_id}"
        say(f"bridge {bridge_id} up; {args.peers} peers in {args.procs} client processes")

        one_shot_every = round(1 / args.one_shot_fraction) if args.one_shot_fraction > 0 else 0
        per = [args.peers // args.procs + (1 if i < args.peers % args.procs else 0) for i in range(args.procs)]
        readers = []
        first = 0
        for i, count in enumerate(per):
            spec = {"first": first, "count": count, "bridge": bridge.tcp_addr, "one_shot_every": one_shot_every,
                    "out": str(tmp / f"clients{i}.json")}
            first += count
            p = subprocess.Popen([sys.executable, __file__, "--role", "clients", "--spec", json.dumps(spec)],
                                 stdout=subprocess.PIPE, stderr=(tmp / f"clients{i}.log").open("w"), text=True,
                                 cwd=REPO_ROOT, start_new_session=True)
            procs.append(p)
            readers.append(p)
        peers: list[list] = []
        one_shot: set[int] = set()
        for p in readers:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"a client process exited: {(tmp / 'clients0.log').read_text()[-2000:]}")
            ready = json.loads(line)
            peers += ready["ready"]
            one_shot |= set(ready["one_shot"])
        say(f"{len(peers)} peers subscribed ({len(one_shot)} read one push per stream); load {load_average()}")
        received_now = [0] * len(readers)

        def follow(i: int, p: subprocess.Popen) -> None:
            for line in p.stdout:
                try:
                    received_now[i] = json.loads(line)["received"]
                except (ValueError, KeyError):
                    pass
        for i, p in enumerate(readers):
            threading.Thread(target=follow, args=(i, p), daemon=True).start()
        idle0 = cpu_seconds(bridge.proc.pid)
        time.sleep(3.0)
        idle_cpu_per_s = (cpu_seconds(bridge.proc.pid) - idle0) / 3.0
        before = scrape(metrics_port)
        cpu_before = cpu_seconds(bridge.proc.pid)
        threads_before = thread_cpu(bridge.proc.pid)

        spec = {"kafka": kafka, "topic": topic, "peers": peers, "rate": args.rate_per_peer,
                "duration": args.duration, "payload_bytes": args.payload_bytes, "out": str(tmp / "producer.json")}
        prod = subprocess.Popen([sys.executable, __file__, "--role", "producer", "--spec", json.dumps(spec)],
                                stdout=subprocess.PIPE, stderr=(tmp / "producer.log").open("w"), text=True,
                                cwd=REPO_ROOT, start_new_session=True)
        procs.append(prod)
        loads = []

        def sample_load() -> None:
            while prod.poll() is None:
                loads.append(load_average())
                time.sleep(5)
        threading.Thread(target=sample_load, daemon=True).start()
        for line in prod.stdout:
            say(f"producer: {line.strip()}")
        prod.wait()
        if prod.returncode:
            raise RuntimeError(f"producer failed: {(tmp / 'producer.log').read_text()[-2000:]}")
        produced = json.loads((tmp / "producer.json").read_text())
        expected = produced["per_peer"] * len(peers) + len(peers)
        # Drain: until the clients received everything, or nothing more came for 10 s.
        last, last_change = -1, time.time()
        while time.time() - last_change < 10:
            total = sum(received_now)
            if total >= expected:
                break
            if total != last:
                last, last_change = total, time.time()
            time.sleep(0.5)
        time.sleep(1.5)  # metrics flush once a second
        after = scrape(metrics_port)
        bridge_cpu = cpu_seconds(bridge.proc.pid) - cpu_before
        threads_after = thread_cpu(bridge.proc.pid)
        threads = {name: [round(u - threads_before.get(name, [0, 0])[0], 2),
                          round(st - threads_before.get(name, [0, 0])[1], 2)]
                   for name, (u, st) in threads_after.items()}
        threads = {k: v for k, v in threads.items() if v[0] + v[1] > 0}
        uptime = load_average()
        for p in readers:
            p.send_signal(signal.SIGTERM)
        receipts: list = []
        streams = 0
        for i, p in enumerate(readers):
            p.wait(60)
            data = json.loads((tmp / f"clients{i}.json").read_text())
            receipts += data["receipts"]
            streams += data["streams"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if bridge is not None:
            bridge.stop(60)
        broker.stop()

    # -- figures ----------------------------------------------------------------------------
    got: dict[tuple[int, str], int] = {}
    steady_lat, fan_lat, steady_times = [], [], []
    for index, ident, t, ts_ns in receipts:
        key = (index, ident)
        got[key] = got.get(key, 0) + 1
        if got[key] > 1:
            continue
        lat = t - ts_ns / 1e9
        if ident.startswith("f:"):
            fan_lat.append(lat)
        else:
            steady_lat.append(lat)
            steady_times.append(t)
    per_peer = produced["per_peer"]
    missing = 0
    for index, _ in peers:
        missing += sum(1 for s in range(per_peer) if (index, f"s:{index}:{s}") not in got)
        missing += 0 if (index, "f:fan") in got else 1
    missing_sample = [[index, f"s:{index}:{s}", index in one_shot] for index, _ in peers for s in range(per_peer)
                      if (index, f"s:{index}:{s}") not in got][:20]
    duplicates = sum(c - 1 for c in got.values())
    steady_span = (max(steady_times) - min(steady_times)) if len(steady_times) > 1 else 0.0
    offered = produced["steady"]["sent"] / produced["steady"]["seconds"] if produced["steady"]["seconds"] else 0
    delivered = stats.rate(len(steady_times) - 1, steady_span, None) or 0.0
    # over every push offered: a missing one is +inf (null where a percentile falls on it)
    steady = stats.latency_summary(steady_lat, per_peer * len(peers), scale=1e3, digits=1)
    fan = stats.latency_summary(fan_lat, len(peers), scale=1e3, digits=1)
    stage = {}
    for name, v in after.items():
        if name.startswith("waku_filter_push_stage_seconds_total"):
            stage_name = name.split('stage="')[1].split('"')[0]
            stage[stage_name] = v - before.get(name, 0)
    pushes = after.get('waku_filter_pushes_total{outcome="pushed"}', 0) - before.get(
        'waku_filter_pushes_total{outcome="pushed"}', 0)
    outcomes = {name.split('outcome="')[1].split('"')[0]: after[name] - before.get(name, 0)
                for name in after if name.startswith("waku_filter_pushes_total")}
    stage_us = {k: round(v / pushes * 1e6, 1) if pushes else None for k, v in sorted(stage.items())}
    result = {
        "benchmark": "filter_push", "quick": args.quick, "peers": len(peers), "client_procs": args.procs,
        "one_shot_peers": len(one_shot), "rate_per_peer": args.rate_per_peer, "duration_s": args.duration,
        "offered_per_s": round(offered, 1), "delivered_per_s": round(delivered, 1),
        "expected": expected, "received": len(got), "missing": missing, "missing_sample": missing_sample,
        "duplicates": duplicates,
        "latency_p50_ms": steady.p50, "latency_p99_ms": steady.p99, "latency_missing": steady.missing,
        "fanout_peers": len(fan_lat), "fanout_p50_ms": fan.p50, "fanout_p99_ms": fan.p99,
        "fanout_complete_ms": fan.max, "fanout_missing": fan.missing,
        "client_streams": streams, "outcomes": outcomes, "bridge_cpu_s": round(bridge_cpu, 2),
        "bridge_idle_cpu_per_s": round(idle_cpu_per_s, 3), "bridge_threads_user_sys_s": threads,
        "bridge_cpu_us_per_push": round(bridge_cpu / pushes * 1e6, 1) if pushes else None,
        "stage_seconds": {k: round(v, 3) for k, v in sorted(stage.items())}, "stage_us_per_push": stage_us,
        "load_average_during": loads, "load_average_end": uptime,
    }
    print(f"offered {result['offered_per_s']} pushes/s to {len(peers)} peers; delivered "
          f"{result['delivered_per_s']} pushes/s; latency p50 {result['latency_p50_ms']} ms p99 "
          f"{result['latency_p99_ms']} ms; missing {missing}, duplicates {duplicates}")
    print(f"fan-out to {len(fan_lat)} peers: p50 {result['fanout_p50_ms']} ms, p99 {result['fanout_p99_ms']} ms, "
          f"all within {result['fanout_complete_ms']} ms")
    print(f"bridge CPU {result['bridge_cpu_s']} s, {result['bridge_cpu_us_per_push']} us per push (idle: "
          f"{result['bridge_idle_cpu_per_s']} s/s); per-stage time "
          f"per push (us): {stage_us}; client streams {streams}; outcomes {outcomes}")
    print(f"bridge threads (user s, system s): {threads}")
    print(f"load average during: {loads}; at the end {uptime}")
    print(json.dumps(result))
    return 0 if missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
