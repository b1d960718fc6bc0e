"""What the whole stack costs idle and at a trickle (issue 41): CPU per process of `make run`.

    .venv/bin/python tests/benchmarks/stack_cost.py [--quick] [--idle-s 60] [--trickle-rate 50]
        [--trickle-s 60] [--freshness-rate 1000 --freshness-s 30] [--threads] [--set k=v ...]
        [--warehouse local|s3]

Starts the stack as `tools.local_run --no-demo --no-dashboard` does (embedded Kafka, the store,
subscriptions and filter jobs through ./spark-submit.sh, the bridge on cluster 1, every shard) on
free ports in a temporary directory (tests/benchmarks/relay_flat_out.py's start; `--set` items
are added to its overrides). Start-up (local_run started -> the bridge listens and every job's
streaming query has started) is reported apart as `startup_s`; then `--settle-s` (60; 30 with --quick) are let
pass (the jobs' first batches, the JIT's first compiles: C2 takes ~0.2 core a JVM for a minute).

- Idle: CPU of every process over `--idle-s` (60; 30 with --quick) with no traffic.
- Trickle: the go-waku harness (`.cache/interop/wakuinterop relay-publish --rate R`, its own
  process, not counted) publishes R msg/s (`--trickle-rate`, 50) of 300-byte payloads over relay
  into the bridge; CPU is measured over `--trickle-s` (60; 30 with --quick) after go-waku's
  `ready` (it is in the bridge's mesh) and `--trickle-warm-s` of warm-up (30; 15 with --quick).
  `trickle_cpu_cores_above_idle` = trickle cores - idle cores;
  `trickle_cpu_ms_per_msg` = (trickle - idle) CPU over the messages the bridge received.
- Freshness (`--freshness-rate R`, 0: off): go-waku publishes R msg/s for `--freshness-s`; a
  prober process follows the messages topic (librdkafka) and, for one record in
  `--probe-every` (200), asks the bridge's store service for it by hash (a store v3 query of every
  unanswered probe every 10 ms): queryable latency = the first answer holding it - the record's
  Kafka append time (LogAppendTime), over every probe, unanswered in 10 s = +inf
  (tests/benchmarks/stats.py). Where it goes, from the bridge's histograms in the window: Kafka
  append -> in the fresh tail (`tail_lag_ms`, each batch's oldest record) and a query's service
  time (`store_query_ms`).

Processes are the local run's process groups (tools/processes.py group_cpu_s): `broker`, `store`,
`subscriptions` and `filter` jobs (spark-submit's JVM and the Python driver), `bridge`, and
`local_run` itself (it counts the Delta rows every 5 s). `--threads`: the 8 busiest threads of
each process in each phase (/proc/<pid>/task/*/stat). The load average is reported before and
after. The last line is JSON.
"""
from __future__ import annotations

import argparse
import json
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

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks.relay_flat_out import (  # noqa: E402 - run as a script: the repository joins sys.path first
    CONTENT_TOPIC,
    GO_BIN,
    PUBSUB_TOPIC,
    scrape,
    stack_overrides,
    start_local_run,
    total,
    wait_local_run,
)
from tests.benchmarks.stats import histogram_percentile, latency_summary  # noqa: E402
from tools.processes import _stat_cpu_s, free_port, group_cpu_s  # noqa: E402

TOPIC = "cost.messages"


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _cmdline(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def stack_groups(root: int) -> dict[str, int]:
    """name -> process group id of every process group below the local run `root` (its own too)."""
    parent: dict[str, str] = {}
    pgid: dict[str, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (f := _stat(d)) is not None:
            parent[d], pgid[d] = f[1], int(f[2])

    def below(pid: str) -> bool:
        while pid in parent:
            if pid == str(root):
                return True
            pid = parent[pid]
        return False

    groups: dict[str, int] = {"local_run": root}
    for pid in parent:
        if not below(pid) or pgid[pid] == root:
            continue
        cmd = _cmdline(str(pgid[pid])) or _cmdline(pid)
        text = " ".join(cmd)
        if "kafka.Kafka" in text:
            name = "broker"
        elif "ingest.cli" in text:
            name = "bridge"
        elif job := next((m.group(1) for a in cmd if (m := re.search(r"jobs/(\w+)\.py$", a))), None):
            name = job  # spark-submit's JVM: ... jobs/<job>.py
        else:
            name = f"pg{pgid[pid]}"
        groups.setdefault(name, pgid[pid])
    return groups


def group_threads(pgid: int) -> dict[str, float]:
    """"<comm>" -> CPU seconds so far of every thread of the group's processes (by thread name)."""
    out: dict[str, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or (f := _stat(d)) is None or int(f[2]) != pgid:
            continue
        try:
            tasks = os.listdir(f"/proc/{d}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                name = Path(f"/proc/{d}/task/{t}/comm").read_text().strip()
                cpu = _stat_cpu_s(Path(f"/proc/{d}/task/{t}/stat").read_text())
            except (OSError, ValueError):
                continue
            out[name] = out.get(name, 0.0) + cpu
    return out


class Window:
    """CPU seconds of every group between `start()` and `stop()`, as cores."""

    def __init__(self, groups: dict[str, int], threads: bool) -> None:
        self.groups = groups
        self.threads = threads
        self.cores: dict[str, float] = {}
        self.top_threads: dict[str, list[tuple[str, float]]] = {}

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.cpu0 = {n: group_cpu_s(g) for n, g in self.groups.items()}
        self.th0 = {n: group_threads(g) for n, g in self.groups.items()} if self.threads else {}

    def stop(self) -> float:
        took = time.monotonic() - self.t0
        self.cores = {n: round((group_cpu_s(g) - self.cpu0[n]) / took, 4) for n, g in self.groups.items()}
        for n, g in self.groups.items() if self.threads else ():
            now = group_threads(g)
            d = {t: (c - self.th0[n].get(t, 0.0)) / took for t, c in now.items()}
            self.top_threads[n] = sorted(((t, round(c, 4)) for t, c in d.items() if c > 0.0005),
                                         key=lambda x: -x[1])[:8]
        return took

    @property
    def total(self) -> float:
        return round(sum(self.cores.values()), 4)


def report(title: str, w: Window) -> None:
    print(f"{title}: {w.total:.3f} cores in all", flush=True)
    for name, c in sorted(w.cores.items(), key=lambda x: -x[1]):
        print(f"  {name:14s} {c:.3f}", flush=True)
        for t, tc in w.top_threads.get(name, []):
            print(f"      {t:18s} {tc:.4f}", flush=True)


JOB_STARTED = {"store": "store query started", "subscriptions": "subscriptions query started",
               "filter": "filter query started"}


def wait_queries(local: subprocess.Popen, logs: Path, timeout_s: float = 900) -> None:
    """Until every job's streaming query has started (a job's table exists well before its query
    runs: minutes on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and local.poll() is None:
        text = "".join(_text(p) for p in logs.glob("*-job.log"))  # live-job.log: all three (spark.one_driver)
        if all(started in text for started in JOB_STARTED.values()):
            return
        time.sleep(1)
    raise RuntimeError(f"the jobs' queries did not start (logs in {logs})")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def buckets(before: dict[str, float], after: dict[str, float], name: str) -> list[tuple[float, float]]:
    """[(upper bound, cumulative count)] of histogram `name` between two scrapes."""
    out = []
    for key, v in after.items():
        m = re.fullmatch(name + r'_bucket\{le="([^"]+)"\}', key)
        if m:
            out.append((float(m.group(1)), v - before.get(key, 0.0)))
    return sorted(out)


def hist_ms(before: dict[str, float], after: dict[str, float], name: str) -> dict[str, float | None]:
    """p50 / p99 (ms, a bucket's upper bound: tests/benchmarks/stats.py) of histogram `name`."""
    b = buckets(before, after, name)
    return {f"p{p}": (None if (v := histogram_percentile(b, p)) is None else round(v * 1000, 1)) for p in (50, 99)}


def received_since(metrics_port: int, before: dict[str, float]) -> float:
    """Messages the bridge received since the `before` scrape of its metrics."""
    name = "waku_bridge_received_total"
    return total(scrape(metrics_port), name) - total(before, name)


def go_publish(addr: str, rate: float, seconds: float, payload: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(GO_BIN), "relay-publish", "--peer", addr, "--cluster-id", "1",
                             "--pubsub-topic", PUBSUB_TOPIC, "--content-topic", CONTENT_TOPIC,
                             "--seconds", str(seconds), "--rate", str(rate), "--quiet", "--linger", "2",
                             "--payload-size", str(payload), "--timeout", "120"],
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, start_new_session=True)


def wait_ready(go: subprocess.Popen) -> dict:
    """go-waku's `ready` event (it publishes from now on); its summary if it ended first."""
    assert go.stdout is not None
    for line in go.stdout:
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") in ("ready", "summary"):
                return event
    return {"event": "ended"}


def go_summary(go: subprocess.Popen) -> dict:
    assert go.stdout is not None
    lines = [line for line in go.stdout.read().splitlines() if line.startswith("{")]
    go.wait(60)
    return json.loads(lines[-1]) if lines else {}


def role_prober(spec: dict) -> None:
    """Follows the topic from its end; every spec['every']-th record is a probe: asked of the
    bridge by hash until answered. One JSON line per probe (latency after the Kafka append)."""
    import trio
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    from ingest.store import codec_v3
    from ingest.store.client import StoreClient

    out = open(spec["out"], "a", buffering=1)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    lock = threading.Lock()
    waiting: dict[bytes, float] = {}  # hash -> Kafka append time (Unix s), in append order
    errors = [0]

    def follow() -> None:
        c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": "stack-cost-prober",
                      "enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.min.bytes": 1})
        md = c.list_topics(spec["topic"], timeout=30)
        c.assign([TopicPartition(spec["topic"], p, OFFSET_END) for p in md.topics[spec["topic"]].partitions])
        n = 0
        while not stop.is_set():
            for m in c.consume(1000, 0.05):
                key = m.key()
                if m.error() or key is None:
                    continue
                n += 1
                if n % spec["every"] == 0:
                    with lock:
                        waiting.setdefault(key, m.timestamp()[1] / 1000.0)
        c.close()

    def done(h: bytes, found: float | None) -> None:
        appended = waiting.pop(h)
        out.write(json.dumps({"hash": h.hex(), "ms": None if found is None else (found - appended) * 1000}) + "\n")

    async def main() -> None:
        async with StoreClient.running(timeout=15) as client:
            peer = await client.connect(spec["peer"])
            seq = 0
            while not (stop.is_set() and not waiting):
                tick = trio.current_time() + 0.01
                with lock:
                    for h, appended in list(waiting.items()):
                        if time.time() - appended > spec["timeout_s"]:
                            done(h, None)
                    asked = list(waiting)[:20]
                if asked:
                    seq += 1
                    try:
                        resp = await client.query_v3(peer, codec_v3.request(f"p{seq}", hashes=asked))
                        found = time.time()
                        if resp.status_code == 200:
                            with lock:
                                for m in resp.messages:
                                    if bytes(m.message_hash) in waiting:
                                        done(bytes(m.message_hash), found)
                    except Exception:  # noqa: BLE001 - counted; the probes go on
                        errors[0] += 1
                await trio.sleep(max(0.0, tick - trio.current_time()))

    threading.Thread(target=follow, daemon=True).start()
    trio.run(main)
    out.write(json.dumps({"query_errors": errors[0]}) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="30 s windows, 30 s settle")
    parser.add_argument("--settle-s", type=float)
    parser.add_argument("--idle-s", type=float)
    parser.add_argument("--trickle-rate", type=float, default=50.0, help="msg/s over relay (0: no trickle phase)")
    parser.add_argument("--trickle-s", type=float)
    parser.add_argument("--trickle-warm-s", type=float,
                        help="seconds of trickle before its window (warm-up, not counted; 30, quick 15)")
    parser.add_argument("--payload-bytes", type=int, default=300)
    parser.add_argument("--freshness-rate", type=float, default=0.0, help="msg/s over relay (0: no freshness phase)")
    parser.add_argument("--freshness-s", type=float, default=30.0)
    parser.add_argument("--probe-every", type=int, default=200)
    parser.add_argument("--threads", action="store_true", help="the busiest threads of each process")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="extra local_run --set k=v")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    parser.add_argument("--warehouse", choices=["local", "s3"], default="local",
                        help="s3: tables and checkpoints on a SeaweedFS S3 gateway started for the run (its CPU "
                             "counted as `seaweedfs`)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "prober":
        role_prober(json.loads(args.spec))
        return 0
    settle = args.settle_s if args.settle_s is not None else (30.0 if args.quick else 60.0)
    idle_s = args.idle_s if args.idle_s is not None else (30.0 if args.quick else 60.0)
    trickle_s = args.trickle_s if args.trickle_s is not None else (30.0 if args.quick else 60.0)
    if not GO_BIN.exists():
        print(f"{GO_BIN} missing: bash tests/interop/go/build.sh", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="stack-cost-"))
    kafka_port, metrics_port = free_port(), free_port()
    run_log = tmp / "local_run.log"
    result: dict = {"cores": os.cpu_count(), "load_avg_1m_before": round(os.getloadavg()[0], 2),
                    "overrides": args.overrides, "warehouse": args.warehouse}
    local = None
    s3 = None
    try:
        if args.warehouse == "s3":  # SeaweedFS's S3 gateway: tables and checkpoints on s3a://
            from tools.object_store import SeaweedS3

            s3 = SeaweedS3(tmp / "s3").start()
            s3.create_bucket("waku")
            args.overrides = [*s3.overrides("waku"), *args.overrides]
        print(f"starting the stack (logs in {tmp}) ...", flush=True)
        began = time.monotonic()
        local = start_local_run(stack_overrides(tmp, kafka_port, metrics_port, TOPIC) + args.overrides, run_log)
        addr = wait_local_run(local, run_log)
        wait_queries(local, tmp / "var")
        result["startup_s"] = round(time.monotonic() - began, 1)
        time.sleep(settle)
        groups = stack_groups(local.pid)
        if s3 is not None and s3.proc is not None:
            groups["seaweedfs"] = s3.proc.pid  # its own session: the group is its pid
        print(f"up in {result['startup_s']} s: {addr}; processes {groups}", flush=True)

        idle = Window(groups, args.threads)
        idle.start()
        time.sleep(idle_s)
        idle.stop()
        report(f"idle ({idle_s:.0f} s)", idle)
        result["idle_cpu_cores"] = idle.total
        result["idle_cpu_cores_by_process"] = idle.cores
        if args.threads:
            result["idle_top_threads"] = idle.top_threads

        if args.trickle_rate > 0:
            warm_s = args.trickle_warm_s if args.trickle_warm_s is not None else (15.0 if args.quick else 30.0)
            go = go_publish(addr, args.trickle_rate, warm_s + trickle_s + 3, args.payload_bytes,
                            tmp / "go-trickle.log")
            ready = wait_ready(go)
            time.sleep(warm_s)  # the first batches with data compile their code paths: warm-up
            before = scrape(metrics_port)
            w = Window(groups, args.threads)
            w.start()
            time.sleep(trickle_s)
            took = w.stop()
            received = received_since(metrics_port, before)
            summary = go_summary(go)
            report(f"trickle {args.trickle_rate:g} msg/s ({took:.0f} s, {received:.0f} received)", w)
            above = round(w.total - idle.total, 4)
            result.update({
                "trickle_rate": args.trickle_rate, "trickle_ready": ready.get("event"), "trickle_warm_s": warm_s,
                "trickle_received": received, "trickle_published": summary.get("published"),
                "trickle_cpu_cores": w.total, "trickle_cpu_cores_above_idle": above,
                "trickle_cpu_cores_by_process": w.cores,
                "trickle_cpu_cores_above_idle_by_process": {n: round(c - idle.cores.get(n, 0.0), 4)
                                                            for n, c in w.cores.items()},
                "trickle_cpu_ms_per_msg": round(above * took / received * 1000, 2) if received else None,
            })
            if args.threads:
                result["trickle_top_threads"] = w.top_threads

        if args.freshness_rate > 0:
            probes = tmp / "probes.jsonl"
            spec = {"bootstrap": f"127.0.0.1:{kafka_port}", "topic": TOPIC, "peer": addr, "out": str(probes),
                    "every": args.probe_every, "timeout_s": 10.0}
            prober = subprocess.Popen([sys.executable, __file__, "--role", "prober", "--spec", json.dumps(spec)],
                                      cwd=REPO_ROOT, stderr=(tmp / "prober.log").open("w"), start_new_session=True)
            time.sleep(3)  # the prober's consumer and store client are up
            go = go_publish(addr, args.freshness_rate, args.freshness_s, args.payload_bytes, tmp / "go-fresh.log")
            wait_ready(go)
            before = scrape(metrics_port)
            w = Window(groups, args.threads)
            w.start()
            summary = go_summary(go)
            took = w.stop()
            after = scrape(metrics_port)
            received = received_since(metrics_port, before)
            prober.send_signal(signal.SIGTERM)
            prober.wait(30)
            rows = [json.loads(line) for line in probes.read_text().splitlines()] if probes.exists() else []
            lat = [r["ms"] for r in rows if "hash" in r and r["ms"] is not None]
            offered = sum(1 for r in rows if "hash" in r)
            s = latency_summary(lat, offered, digits=1)
            report(f"freshness {args.freshness_rate:g} msg/s ({took:.0f} s, {received:.0f} received)", w)
            tail_lag = hist_ms(before, after, "waku_store_tail_lag_seconds")
            query = hist_ms(before, after, "waku_store_query_seconds")
            print(f"queryable after the Kafka append: p50 {s.p50} ms, p99 {s.p99} ms, max {s.max} ms "
                  f"({offered} probes, {offered - len(lat)} unanswered); in the bridge: Kafka -> tail "
                  f"(oldest of a batch) {tail_lag}, a query {query} (histogram bounds)", flush=True)
            result.update({
                "freshness_rate": args.freshness_rate, "freshness_published": summary.get("published"),
                "freshness_received": received, "freshness_received_per_s": round(received / took, 1),
                "freshness_cpu_cores": w.total, "freshness_cpu_cores_by_process": w.cores,
                "queryable_p50_ms": s.p50, "queryable_p99_ms": s.p99, "queryable_max_ms": s.max,
                "probes": offered, "probes_unanswered": offered - len(lat),
                "tail_lag_ms": tail_lag, "store_query_ms": query,
                "probe_query_errors": next((r["query_errors"] for r in rows if "query_errors" in r), None),
            })
            if args.threads:
                result["freshness_top_threads"] = w.top_threads
        result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
        print(json.dumps(result), flush=True)
        return 0
    finally:
        if local is not None and local.poll() is None:
            local.send_signal(signal.SIGINT)
            try:
                local.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(local.pid, signal.SIGKILL)
        if s3 is not None:
            s3.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
