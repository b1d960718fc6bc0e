"""go-waku v0.10.0's own node against ours, the same go-waku clients driving both (issue 41).

    flock /tmp/bench.lock .venv/bin/python tests/benchmarks/side_by_side.py [--quick]
        [--sides gowaku,ours] [--clients 20] [--filter-rates 50,200] [--store-clients 8] [--keep]

Builds go-waku's node (`cmd/waku` of github.com/waku-org/go-waku v0.10.0 from the Go module proxy:
tests/interop/gowaku-node/build.sh, to .cache/interop/gowaku-node) when missing, then for each side
in turn, alone on this machine:

- **gowaku**: `gowaku-node --store --store-message-db-url sqlite3://<tmp>/store.db --filter
  --lightpush` (relay on, cluster 1, pubsub topic /waku/2/rs/1/0, TCP on 127.0.0.1, no discv5, no
  RLN, no NAT/circuit relay; its per-IP connection limit raised: every client is on 127.0.0.1;
  `--filter-timeout 1ns` works around v0.10.0's inverted expiry, which drops every filter
  subscription at the first one-minute cleanup tick after it was made).
  It serves only the legacy store protocol, so its store clients query with the legacy store
  (`--legacy`); ours are queried with store v3.
- **ours**: `tools.local_run --no-demo --no-dashboard` on free ports in a temporary directory, as
  tests/benchmarks/relay_flat_out.py starts it (embedded Kafka, the store, subscriptions and filter
  Spark jobs, the bridge on cluster 1).

Clients: the go-waku harness (.cache/interop/wakuinterop, tests/interop/go), each kind in its own
process. Phases per side (start-up and each phase's warm-up are excluded from the figures and
reported apart):

1. **start-up**: until the node listens (ours: until the store job has created its table).
2. **idle**: after `--settle` s, the stack's CPU over `--idle` s (cores).
3. **filter** at each rate of `--filter-rates` (msg/s): `wakuinterop filter-many` runs `--clients`
   light clients (each its own go-waku node), client j subscribed to content topic j; a relay
   publisher (`relay-publish --rotate-content-topics`) sends message i on topic i mod clients, so
   each client gets rate/clients pushes/s (kept <= 15: go-waku's light client accepts 15 pushes/s
   per peer). Push latency = client receipt - message timestamp (both wall clock, one machine),
   over every message published in the measured window (after `--warm` s, 180 by default: the
   JVMs of our stack compile the new rate's code for minutes, 2026-11-30: 6.72 ms of CPU a push 60 s
   in, 5.01 from 180 s; the warm-up's CPU a push is reported apart), missing as +inf; also per
   10 s of the window by publish time (`push_p99_ms_by_slice`: where the tail sits). The window
   (`--filter-window`, 300 s) covers our stack's periodic work at its rate: the filter job's
   real-time epoch boundary (every 5 minutes, ~0.8 CPU-s of compiling; a 60 s window 5 minutes
   in always held it) and the subscriptions job's MERGE of the clients' pings (every 2 minutes).
4. **queryable**: a relay publisher paced at `--paced-rate` msg/s and `wakuinterop store-probe`
   asking for the newest page every 20 ms (its own load is part of the run); queryable latency =
   first returned by a store query - message timestamp, over every message of the window (after
   `--queryable-warm` s, 45 by default: a new rate's first store batches run the store job's
   colder code, up to 10 s a batch of 10,000 against ~1 s; the warm-up's figures are reported
   apart); ours also: where each message's time went (publish > bridge receive > Kafka append >
   first seen by the probe).
5. **flat out**: `relay-publish --rate 0` for `--flat` s; stored/s = messages stored / (first
   publish -> last one stored); ours also: the bridge's read rate (its received_total / publish s).
6. **store**: `--store-clients` `store-bench` clients (closed loop, random queries over what the
   phases stored) for `--store` s: page latency p50/p99 and pages/s.

CPU: user + system seconds of every process of the stack (tools/processes.py's process-group
helpers; ours per process: broker, bridge, each job's spark-submit group), over each phase's
measured window: per 1,000 messages stored (flat out), per push (filter), per page (store).
Percentiles: tests/benchmarks/stats.py (nearest rank, every message offered, missing as +inf,
null where a percentile falls on a missing one). The load average is reported with each side.
The last line is JSON with both sides.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks.relay_flat_out import (  # noqa: E402
    GO_BIN,
    load1,
    scrape,
    stack_overrides,
    start_local_run,
    total,
)
from tests.benchmarks.stats import latency_summary, p99_by_slice, rate  # noqa: E402
from tools.processes import free_port, group_cpu_by_pid, proc_cpu_s, stop_process  # noqa: E402

NODE_BIN = REPO_ROOT / ".cache" / "interop" / "gowaku-node"
NODE_BUILD = REPO_ROOT / "tests" / "interop" / "gowaku-node" / "build.sh"
PUBSUB_TOPIC = "/waku/2/rs/1/0"
FILTER_PUSH_LIMIT = 15.0  # go-waku's light client: pushes/s per peer


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- the go-waku clients --------------------------------------------------------------------------

class GoClient:
    """One wakuinterop process; its JSON lines are read as they come (event lines timestamped on
    arrival), the last one is its summary."""

    def __init__(self, args: list[str], log: Path, *, stdin: bool = False) -> None:
        self.proc = subprocess.Popen([str(GO_BIN), *args], stdout=subprocess.PIPE, stderr=log.open("w"),
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True,
                                     start_new_session=True)
        self.events: queue.Queue[tuple[float, dict]] = queue.Queue()
        self.summary: dict = {}
        self.publishes: list[tuple[str, int]] = []  # relay-publish: (hash, timestamp ns)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            if ev.get("event") == "publish":
                self.publishes.append((ev["hash"], ev["timestamp"]))
            elif ev.get("event") == "summary":
                self.summary = ev
            else:
                self.events.put((time.time(), ev))

    def wait_event(self, name: str, timeout: float) -> float:
        """Wall time at which event `name` arrived; RuntimeError when the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                at, ev = self.events.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    time.sleep(0.3)  # the pump reads the summary
                    raise RuntimeError(f"wakuinterop ended before {name!r}: {self.summary.get('error')}") from None
                continue
            if ev.get("event") == name:
                return at
        raise RuntimeError(f"wakuinterop: no {name!r} within {timeout:.0f} s")

    def finish(self, timeout: float) -> dict:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(30)
        time.sleep(0.3)
        deadline = time.monotonic() + 10
        while not self.summary and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.summary

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# -- the two sides --------------------------------------------------------------------------------

@dataclass
class Side:
    name: str
    tmp: Path
    addr: str = ""
    legacy_store: bool = False
    startup_s: float = 0.0
    stop: Callable[[], None] = lambda: None
    cpu_by_process: Callable[[], dict[str, float]] = dict
    stored: Callable[[], int] = lambda: 0
    bridge_received: Callable[[], float | None] = lambda: None
    metrics: Callable[[], dict[str, float]] = dict  # ours: the bridge's Prometheus sample
    # ours: {message hash (0x hex): (bridge receive, message append, push append)} wall seconds
    stage_times: Callable[[], dict[str, tuple[float, float, float | None]]] = dict
    extra: dict = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)  # ours: local_run's --set items (a job of the stack takes them)
    root_pid: int = 0  # ours: local_run's process (its descendants are the stack)

    def cpu(self) -> float:
        return sum(self.cpu_by_process().values())


def start_gowaku(tmp: Path, filter_max_subscribers: int | None = None) -> Side:
    """go-waku's node; `filter_max_subscribers`: its filter service's subscriber limit raised
    from go-waku's 20 (GOWAKU_FILTER_MAX_SUBSCRIBERS, which the node's build adds:
    tests/interop/gowaku-node/build.sh)."""
    if not NODE_BIN.exists():
        say(f"building go-waku's node: {NODE_BUILD}")
        out = subprocess.run(["bash", str(NODE_BUILD)], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stdout + out.stderr)
    key = os.urandom(32).hex()
    db = tmp / "store.db"
    argv = [str(NODE_BIN), "--tcp-port", str(free_port()), "--address", "127.0.0.1", "--nodekey", key,
            "--cluster-id", "1", "--pubsub-topic", PUBSUB_TOPIC, "--relay", "--store",
            "--store-message-db-url", f"sqlite3://{db}", "--filter", "--lightpush",
            "--circuit-relay=false", "--nat", "none", "--ip-colocation-limit", "10000",
            # room for every light client besides the publisher and the probes (1,000 clients met
            # the cap of 1,000 and go-waku's pushes failed with "connection failed")
            "--max-connections", str(max(1000, (filter_max_subscribers or 0) + 200)),
            "--log-level", "WARN", "--log-encoding", "nocolor",
            # go-waku v0.10.0's filter server deletes, every minute, the subscribers seen *within*
            # the timeout (subscribers_map.go cleanUp: `if elapsedTime < sub.timeout`), so every
            # subscription dies at the first tick after it was made; with 1 ns none is ever deleted
            "--filter-timeout", "1ns"]
    addr = subprocess.run([*argv, "--show-addresses"], capture_output=True, text=True, timeout=60).stdout.strip()
    if "/p2p/" not in addr:
        raise RuntimeError(f"gowaku-node --show-addresses printed {addr!r}")
    began = time.monotonic()
    env = dict(os.environ)
    if filter_max_subscribers:
        env["GOWAKU_FILTER_MAX_SUBSCRIBERS"] = str(filter_max_subscribers)
    proc = subprocess.Popen(argv, stdout=(tmp / "node.log").open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)
    host, port = "127.0.0.1", int(addr.split("/tcp/")[1].split("/")[0])
    import socket
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"gowaku-node exited: {(tmp / 'node.log').read_text()[-2000:]}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)

    def stop() -> None:
        stop_process(proc, 30)

    def stored() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as c:
                return int(c.execute("SELECT COUNT(*) FROM message").fetchone()[0])
        except sqlite3.Error:
            return 0

    return Side("gowaku", tmp, addr=addr, legacy_store=True, startup_s=time.monotonic() - began, stop=stop,
                cpu_by_process=lambda: {"gowaku-node": proc_cpu_s(proc.pid) if proc.poll() is None else 0.0},
                stored=stored)


def process_groups(root: int) -> dict[int, str]:
    """{process group: name} of `root` and every descendant (ours: local_run, the broker, the
    bridge and the jobs each start a session of their own)."""
    parent: dict[int, int] = {}
    pgid: dict[int, int] = {}
    cmd: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            cmd[int(d)] = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parent[int(d)], pgid[int(d)] = int(fields[1]), int(fields[2])
    members = {root}
    grew = True
    while grew:
        new = {p for p, pp in parent.items() if pp in members and p not in members}
        members |= new
        grew = bool(new)
    groups: dict[int, str] = {}
    for p in members:  # the group's commands, joined
        if p in pgid:
            groups[pgid[p]] = groups.get(pgid[p], "") + " | " + cmd.get(p, "")
    out: dict[int, str] = {}
    for g, c in groups.items():
        job = re.search(r"jobs/(\w+)\.py", c)
        if job:  # a Spark job: ./spark-submit.sh's JVM and its Python driver
            out[g] = f"{job.group(1)} job"
        elif "kafka.Kafka" in c:
            out[g] = "broker"
        elif "ingest.cli" in c:
            out[g] = "bridge"
        elif "local_run" in c:
            out[g] = "local_run"
        else:
            out[g] = f"pgid {g}"
    for g, name in list(out.items()):  # a group started by a named one (a Spark driver's Python
        p = g                           # worker daemon leads its own) counts as that one
        while name.startswith("pgid") and p in parent and parent[p] in pgid and parent[p] != p:
            p = parent[p]
            name = out.get(pgid[p], name)
        out[g] = name
    return out


def start_ours(tmp: Path, extra: list[str]) -> Side:
    kafka_port, metrics_port = free_port(), free_port()
    # As relay_flat_out and stack_cost start it; REST off as go-waku's node here.
    overrides = stack_overrides(tmp, kafka_port, metrics_port, "sbs.messages") + ["rest.enabled=false", *extra]
    run_log = tmp / "local_run.log"
    began = time.monotonic()
    local = start_local_run(overrides, run_log)
    addr = None
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and local.poll() is None:
        text = run_log.read_text()
        m = re.search(r"bridge listening on (/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)", text)
        addr = addr or (m.group(1) if m else None)
        if addr and re.search(r"rows in the Delta store: \d+", text):  # the store job made its table
            break
        time.sleep(0.5)
    if local.poll() is not None or addr is None:
        raise RuntimeError(f"local_run did not come up: {run_log.read_text()[-3000:]}")
    startup = time.monotonic() - began
    groups = process_groups(local.pid)

    seen: dict[int, tuple[str, float]] = {}  # pid: (its group's name, its CPU when last seen)

    def cpu_by_process() -> dict[str, float]:
        """CPU so far by name, counting a process that ended at its last sample: a counter that
        never goes back when a group's process ends inside a window (a Spark driver's Python
        worker daemon leads a group of its own and ends when idle)."""
        for g, name in (process_groups(local.pid) | groups).items():  # groups started since too
            for pid, cpu in group_cpu_by_pid(g).items():
                seen[pid] = (name, cpu)
        out: dict[str, float] = {}
        for name, cpu in seen.values():
            out[name] = out.get(name, 0.0) + cpu
        return out

    def stop() -> None:
        if local.poll() is None:
            local.send_signal(signal.SIGINT)
            try:
                local.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(local.pid, signal.SIGKILL)

    def stored() -> int:
        from deltalake import DeltaTable
        try:
            adds = DeltaTable(str(tmp / "warehouse" / "messages")).get_add_actions(flatten=True)
            return int(sum(v or 0 for v in adds.column("num_records").to_pylist()))
        except Exception:  # noqa: BLE001 - not created yet
            return 0

    def bridge_received() -> float | None:
        try:
            return total(scrape(metrics_port), "waku_bridge_received_total")
        except OSError:
            return None

    def metrics() -> dict[str, float]:
        try:
            return scrape(metrics_port)
        except OSError:
            return {}

    def stage_times() -> dict[str, tuple[float, float, float | None]]:
        return kafka_stage_times(f"127.0.0.1:{kafka_port}", "sbs.messages", "sbs.push.")

    return Side("ours", tmp, addr=addr, startup_s=startup, stop=stop, cpu_by_process=cpu_by_process,
                stored=stored, bridge_received=bridge_received, stage_times=stage_times, metrics=metrics,
                extra={"processes": sorted(set(groups.values()))}, overrides=overrides, root_pid=local.pid)


def kafka_stage_times(bootstrap: str, messages: str, push_prefix: str) -> dict[str, tuple[float, float, float | None]]:
    """Per message hash: the bridge's receive time (IngestRecord.received_time), the message's
    append to `messages` and its push record's append to a `push_prefix*` topic (None: not
    pushed) (broker clock: LogAppendTime), for the phases' stage breakdowns."""
    from kafka import KafkaConsumer, TopicPartition

    from core.records import decode_push
    from core.validation import decode_ingest

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024)
    try:
        topics = [t for t in consumer.topics() if t == messages or t.startswith(push_prefix)]
        parts = [TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(parts)
        recv: dict[str, tuple[float, float]] = {}
        pushed: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(consumer.position(p) < end[p] for p in parts):
            for tp, recs in consumer.poll(timeout_ms=500, max_records=100_000).items():
                for r in recs:
                    if tp.topic == messages:
                        f = decode_ingest(r.value)
                        if f.has_message and r.key:
                            recv.setdefault("0x" + r.key.hex(), (float(f.received_time or 0), r.timestamp / 1000))
                    else:
                        rec = decode_push(r.value)
                        if rec is not None:
                            pushed.setdefault("0x" + rec.message_hash.hex(), r.timestamp / 1000)
        return {h: (*recv[h], pushed.get(h)) for h in recv}
    finally:
        consumer.close()


# -- phases ---------------------------------------------------------------------------------------

def stage_times_of(side: Side, stages: dict) -> dict[str, tuple[float, float, float | None]]:
    """`side.stage_times()`, or {} with the error in `stages` (the breakdown is an extra)."""
    try:
        return side.stage_times()
    except Exception as exc:  # noqa: BLE001 - the breakdown is an extra
        stages["error"] = str(exc)
        return {}


def summarize_spans(spans: dict[str, list[float]], stages: dict) -> None:
    """p50 / p99 / max (ms) of each stage's spans, into `stages`."""
    for k, v in spans.items():
        x = latency_summary(v, len(v), digits=1)
        stages[k] = {"p50": x.p50, "p99": x.p99, "max": x.max}


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after.get(k, 0.0) - before.get(k, 0.0), 2) for k in after}


def common(side: Side) -> list[str]:
    return ["--peer", side.addr, "--cluster-id", "1", "--pubsub-topic", PUBSUB_TOPIC]


def wait_stored(side: Side, target: float, timeout: float, still_s: float = 10.0) -> tuple[int, float]:
    """Polls the side's store until it holds `target` messages or stops growing for `still_s`;
    (count, wall time of the last growth)."""
    last, last_at = side.stored(), time.time()
    deadline = time.monotonic() + timeout
    while last < target and time.monotonic() < deadline and time.time() - last_at < still_s:
        time.sleep(0.25)
        n = side.stored()
        if n != last:
            last, last_at = n, time.time()
    return last, last_at


def timed_window(pub: GoClient, warm: float, window: float,
                 side: Side) -> tuple[float, float, dict, dict, dict]:
    """Waits for the publisher's first message, then `warm` s; samples the stack's CPU at the
    first message and at the window's start and end. (window start, end (wall times), CPU at the
    first message, at the window's start, at its end)."""
    deadline = time.monotonic() + 120
    while not pub.publishes and time.monotonic() < deadline:
        if pub.proc.poll() is not None:
            raise RuntimeError(f"publisher ended: {pub.finish(5).get('error')}")
        time.sleep(0.02)
    if not pub.publishes:
        raise RuntimeError("publisher sent nothing in 120 s")
    cw = side.cpu_by_process()
    first = pub.publishes[0][1] / 1e9
    ws, we = first + warm, first + warm + window
    time.sleep(max(0.0, ws - time.time()))
    c0 = side.cpu_by_process()
    time.sleep(max(0.0, we - time.time()))
    c1 = side.cpu_by_process()
    return ws, we, cw, c0, c1


SLICE_S = 10.0  # the filter runs' p99 per this much of the window


CLIENTS_PER_PROCESS = 100  # filter-many: go-waku light clients in one process


def _merged(summaries: list[dict]) -> dict:
    """One filter-many summary from several processes' (their clients' receipts and counts)."""
    out: dict = {"receipts": [], "error": None}
    for f in summaries:
        out["receipts"].extend(f.get("receipts", []))
        for key in ("duplicates", "failed_clients", "subscribe_retries", "pushes", "clients", "connected_at_end"):
            out[key] = (out.get(key) or 0) + (f.get(key) or 0)
        out["error"] = out["error"] or f.get("error")
    return out


def start_filter_many(side: Side, topics: list[str], clients: int, seconds: float, log_of: Callable[[int], Path], *,
                      keep_streams: bool = False, connect_rate: float = 0.0) -> list[GoClient]:
    """`clients` go-waku light clients in `filter-many` processes of at most CLIENTS_PER_PROCESS
    (client j on topic j mod len(topics) in all), subscribed for `seconds`; process k logs to
    `log_of(k)`. `connect_rate`: clients started a second in all (0: at once). 500 in one process
    lost ~470 of their connections within seconds of subscribing, 5 x 100 kept all 500 (2026-12-04)."""
    fms = []
    for k, first in enumerate(range(0, clients, CLIENTS_PER_PROCESS)):
        n = min(CLIENTS_PER_PROCESS, clients - first)
        shift = first % len(topics)
        mine = [a for t in topics[shift:] + topics[:shift] for a in ("--content-topic", t)]
        fms.append(GoClient(["filter-many", *common(side), "--clients", str(n), *mine, "--timeout", "120",
                             *(["--keep-streams"] if keep_streams else []),
                             *(["--connect-rate", str(connect_rate * n / clients)] if connect_rate > 0 else []),
                             "--seconds", str(seconds)], log_of(k)))
    return fms


def phase_filter(side: Side, msg_rate: float, clients: int, warm: float, window: float, *,
                 fanout: int = 1, keep_streams: bool = False, connect_rate: float = 0.0) -> dict:
    """`clients` go-waku filter clients (`filter-many`), `clients // fanout` content topics (each
    message is pushed to `fanout` clients), a relay publisher at `msg_rate` rotating over them.
    `keep_streams`: the clients read every push of a stream (nwaku, js-waku), else one a stream
    (go-waku's light client); `connect_rate`: clients started a second (0: all at once). Latency
    and missing over every (message, subscribed client) pair offered in the window."""
    if fanout < 1 or clients % fanout:
        raise ValueError(f"--fanout {fanout} must divide the {clients} clients")
    topics = [f"/sbs/1/f{j}/proto" for j in range(clients // fanout)]
    cts = [a for t in topics for a in ("--content-topic", t)]
    log = side.tmp / f"filter-{int(msg_rate)}"
    t0 = time.monotonic()
    fms = start_filter_many(side, topics, clients, warm + window + 20, lambda k: log.with_suffix(f".clients{k}.log"),
                            keep_streams=keep_streams, connect_rate=connect_rate)
    for fm in fms:
        fm.wait_event("ready", 180 + (clients / connect_rate if connect_rate > 0 else 0))
    subscribe_s = time.monotonic() - t0
    pub = GoClient(["relay-publish", *common(side), *cts, "--rotate-content-topics", "--rate", str(msg_rate),
                    "--seconds", str(warm + window + 2), "--linger", "2", "--timeout", "120"],
                   log.with_suffix(".publisher.log"))
    try:
        m0 = side.metrics()
        ws, we, cw, c0, c1 = timed_window(pub, warm, window, side)
        m1 = side.metrics()
        pub_summary = pub.finish(warm + window + 120)
        # the clients stay until the last pushes of the window arrived, then unsubscribe (go-waku's
        # node holds 20 subscribers at most, and with --filter-timeout 1ns never drops one)
        fsum = _merged([fm.finish(warm + window + 120) for fm in fms])
    finally:
        pub.kill()
        for fm in fms:
            fm.kill()
    recv: dict[str, list[int]] = {}  # message hash -> receipt times (ns), one a client that got it
    for h, _ts, rt, *_client in fsum.get("receipts", []):
        recv.setdefault(h, []).append(rt)
    log.with_suffix(".json").write_text(json.dumps({"window": [ws, we], "published": pub.publishes, "clients": fsum}))
    offered = [(h, ts) for h, ts in pub.publishes if ws <= ts / 1e9 < we]
    warmup = [(h, ts) for h, ts in pub.publishes if ts / 1e9 < ws]

    def each_push(h: str, ts: int) -> list[float | None]:
        """Latency (ms) of the message's push to each of its `fanout` clients; None: never got it."""
        got: list[float | None] = [(rt - ts) / 1e6 for rt in recv.get(h, ())[:fanout]]
        return got + [None] * (fanout - len(got))

    # (publish time s, latency ms or None: never delivered) of each push offered in the window
    pushes = [(ts / 1e9, x) for h, ts in offered for x in each_push(h, ts)]
    lat = [x for _, x in pushes if x is not None]
    wlat = [x for h, ts in warmup for x in each_push(h, ts) if x is not None]
    s = latency_summary(lat, len(offered) * fanout, digits=2)
    w = latency_summary(wlat, len(warmup) * fanout, digits=1)
    slices = p99_by_slice(pushes, ws, we, SLICE_S)
    stages: dict = {}
    st = stage_times_of(side, stages)
    if st:  # ours: where the time of each delivered push of the window went (ms)
        spans: dict[str, list[float]] = {"publish>bridge": [], "bridge>messages": [], "messages>push record": [],
                                         "push record>client": []}
        for h, ts in offered:
            rx, m_app, p_app = st.get(h, (0.0, 0.0, None))
            if h in recv and p_app is not None:
                got = max(recv[h]) / 1e9  # the message's last push
                for k, v in zip(spans, (rx - ts / 1e9, m_app - rx, p_app - m_app, got - p_app), strict=True):
                    spans[k].append(v * 1000)
        summarize_spans(spans, stages)
    if m0 and m1:  # the bridge's pusher, per push of the window (ms): its waku_filter_push_stage_seconds
        key = 'waku_filter_pushes_total{outcome="pushed"}'
        pushed = m1.get(key, 0.0) - m0.get(key, 0.0)
        stages["bridge_pushed"] = pushed
        for k in m1:
            if k.startswith("waku_filter_push_stage_seconds_total{") and pushed:
                stages["bridge_" + k.split('stage="')[1].split('"')[0] + "_ms_per_push"] = round(
                    (m1[k] - m0.get(k, 0.0)) * 1000 / pushed, 3)
        for k in m1:
            if k.startswith("waku_filter_pushes_total{"):
                stages["bridge_" + k.split('outcome="')[1].split('"')[0]] = m1[k] - m0.get(k, 0.0)
    cpu = cpu_delta(c0, c1)
    cpu_s = sum(cpu.values())
    warm_cpu_s = sum(cpu_delta(cw, c0).values())  # the warm-up's, reported apart: the JVMs still compile
    return {
        "rate": msg_rate, "clients": clients, "fanout": fanout, "keep_streams": keep_streams,
        "window_s": round(we - ws, 1), "subscribe_s": round(subscribe_s, 1),
        "published": len(pub.publishes), "publisher_ok": pub_summary.get("ok"), "offered": len(offered) * fanout,
        "delivered": s.delivered, "missing": s.missing, "duplicates": fsum.get("duplicates"),
        "push_p50_ms": s.p50, "push_p90_ms": s.p90, "push_p99_ms": s.p99, "push_max_ms": s.max,
        "warmup_offered": len(warmup) * fanout, "warmup_missing": w.missing, "warmup_push_p50_ms": w.p50,
        "warmup_push_p99_ms": w.p99, "warmup_s": warm,
        "warmup_cpu_ms_per_push": round(warm_cpu_s * 1000 / w.delivered, 2) if w.delivered else None,
        "push_p99_ms_by_slice": slices,
        "cpu_s": round(cpu_s, 2), "cpu_by_process_s": cpu,
        "cpu_ms_per_push": round(cpu_s * 1000 / s.delivered, 2) if s.delivered else None,
        "cores": round(cpu_s / (we - ws), 3),
        "clients_failed": fsum.get("failed_clients"), "clients_error": fsum.get("error"),
        "subscribe_retries": fsum.get("subscribe_retries"),
        **({"stages_ms": stages} if stages else {}),
    }


def phase_queryable(side: Side, msg_rate: float, warm: float, window: float) -> dict:
    ct = ["--content-topic", "/sbs/1/q/proto"]
    log = side.tmp / "queryable"
    probe = GoClient(["store-probe", *common(side), *ct, "--interval-ms", "20", "--timeout", "30",
                      "--seconds", str(warm + window + 15), *(["--legacy"] if side.legacy_store else [])],
                     log.with_suffix(".probe.log"))
    probe.wait_event("ready", 120)
    pub = GoClient(["relay-publish", *common(side), *ct, "--rate", str(msg_rate), "--seconds",
                    str(warm + window), "--linger", "2", "--timeout", "120"], log.with_suffix(".publisher.log"))
    try:
        ws, we, _, c0, c1 = timed_window(pub, warm, window, side)
        pub_summary = pub.finish(warm + window + 120)
        psum = probe.finish(60)
    finally:
        pub.kill()
        probe.kill()
    seen = {h: at for h, _ts, at in psum.get("seen", [])}
    offered = [(h, ts) for h, ts in pub.publishes if ws <= ts / 1e9 < we]
    warmup = [(h, ts) for h, ts in pub.publishes if ts / 1e9 < ws]
    s = latency_summary([(seen[h] - ts) / 1e6 for h, ts in offered if h in seen], len(offered), digits=1)
    w = latency_summary([(seen[h] - ts) / 1e6 for h, ts in warmup if h in seen], len(warmup), digits=1)
    q = latency_summary(psum.get("latencies_ms", []), len(psum.get("latencies_ms", [])), digits=1)
    cpu = cpu_delta(c0, c1)
    stages: dict = {}
    st = stage_times_of(side, stages)
    if st:  # ours: where the time of each message of the window went (ms); a missing one: its Kafka stages only
        spans: dict[str, list[float]] = {"publish>bridge": [], "bridge>messages": [], "messages>queryable": []}
        late: list[dict] = []
        for h, ts in offered:
            if h in st:
                rx, m_app, _ = st[h]
                got = seen.get(h)
                spans["publish>bridge"].append((rx - ts / 1e9) * 1000)
                spans["bridge>messages"].append((m_app - rx) * 1000)
                if got is not None:
                    spans["messages>queryable"].append((got / 1e9 - m_app) * 1000)
                if got is None or got - ts > 100e6:
                    late.append({"hash": h, "ts": ts, "rx": rx, "appended": m_app, "seen": got})
        summarize_spans(spans, stages)
        stages["late_or_missing"] = len(late)
        log.with_suffix(".late.json").write_text(json.dumps(late))
    log.with_suffix(".json").write_text(json.dumps({"window": [ws, we], "published": pub.publishes,
                                                    "seen": psum.get("seen", [])}))
    return {
        "rate": msg_rate, "window_s": round(we - ws, 1), "published": len(pub.publishes),
        "publisher_ok": pub_summary.get("ok"), "publisher_error": pub_summary.get("error"),
        "offered": len(offered), "missing": s.missing,
        "queryable_p50_ms": s.p50, "queryable_p99_ms": s.p99, "queryable_max_ms": s.max,
        "warmup_s": warm, "warmup_offered": len(warmup), "warmup_missing": w.missing,
        "warmup_queryable_p50_ms": w.p50, "warmup_queryable_p99_ms": w.p99,
        "probe_queries": psum.get("queries"), "probe_errors": psum.get("errors"),
        "probe_query_p50_ms": q.p50, "probe_query_p99_ms": q.p99,
        "cpu_s": round(sum(cpu.values()), 2), "cpu_by_process_s": cpu,
        "cores": round(sum(cpu.values()) / (we - ws), 3),
        **({"stages_ms": stages} if stages else {}),
    }


def phase_flat(side: Side, seconds: float) -> dict:
    stored0, _ = wait_stored(side, float("inf"), 300, still_s=3)  # the earlier phases are stored
    recv0 = side.bridge_received()
    pub = GoClient(["relay-publish", *common(side), "--content-topic", "/sbs/1/flat/proto", "--rate", "0",
                    "--seconds", str(seconds), "--quiet", "--linger", "5", "--payload-size", "1024",
                    "--timeout", "120"], side.tmp / "flat.publisher.log")
    try:
        started = pub.wait_event("ready", 120)
        c0 = side.cpu_by_process()
        summary = pub.finish(seconds + 300)
    finally:
        pub.kill()
    published = int(summary.get("published") or 0)
    publish_s = (summary.get("publish_ms") or 0) / 1000
    recv1 = side.bridge_received()
    n, last_at = wait_stored(side, stored0 + published, 600)
    c1 = side.cpu_by_process()
    stored = n - stored0
    span = max(last_at - started, 1e-3)
    cpu = cpu_delta(c0, c1)
    cpu_s = sum(cpu.values())
    out = {
        "seconds": seconds, "published": published, "publish_per_s": rate(published, publish_s),
        "publisher_ok": summary.get("ok"), "publisher_error": summary.get("error"),
        "dropped_in_publisher": summary.get("dropped_to_bridge"),  # gossipsub's outbound queue was full
        "stored": stored, "stored_per_s": rate(stored, span), "store_span_s": round(span, 1),
        "cpu_s": round(cpu_s, 2), "cpu_by_process_s": cpu,
        "cpu_s_per_1000_msgs": round(cpu_s * 1000 / stored, 3) if stored else None,
    }
    if recv0 is not None and recv1 is not None:
        out["bridge_received"] = recv1 - recv0
        out["relay_read_per_s"] = rate(recv1 - recv0, publish_s)
    return out


def phase_store(side: Side, clients: int, seconds: float, start_ns: int, end_ns: int,
                pages_per_s: float = 0.0) -> dict:
    """`clients` store-bench clients for `seconds`: closed loop, or with `pages_per_s` > 0 open
    loop at pages_per_s / clients each (latency from when each page was due)."""
    topics = [f"/sbs/1/f{j}/proto" for j in range(4)] + ["/sbs/1/q/proto", "/sbs/1/flat/proto"]
    cts = [a for t in topics for a in ("--content-topic", t)]
    paced = ["--rate", f"{pages_per_s / clients:.6f}"] if pages_per_s > 0 else []
    procs = [GoClient(["store-bench", *common(side), *cts, "--seconds", str(seconds), "--seed", str(i + 1),
                       "--start-ns", str(start_ns), "--end-ns", str(end_ns), "--timeout", "60", *paced,
                       *(["--legacy"] if side.legacy_store else [])],
                      side.tmp / f"store-{i}.log", stdin=True) for i in range(clients)]
    try:
        for p in procs:
            p.wait_event("ready", 180)
        c0, t0 = side.cpu_by_process(), time.time()
        for p in procs:
            assert p.proc.stdin is not None
            p.proc.stdin.write("go\n")
            p.proc.stdin.flush()
        sums = [p.finish(seconds + 120) for p in procs]
        c1, t1 = side.cpu_by_process(), time.time()
    finally:
        for p in procs:
            p.kill()
    lat = [x for s in sums for x in s.get("latencies_ms", [])]
    pages = sum(int(s.get("pages") or 0) for s in sums)
    errors = sum(int(s.get("errors") or 0) for s in sums)
    s = latency_summary(lat, len(lat) + errors, digits=1)
    cpu = cpu_delta(c0, c1)
    cpu_s = sum(cpu.values())
    return {
        "clients": clients, "seconds": seconds, "protocol": "legacy store" if side.legacy_store else "store v3",
        "rate": pages_per_s or None,
        "late_pages": sum(int(s.get("late") or 0) for s in sums) if pages_per_s > 0 else None,
        "pages": pages, "errors": errors,
        "last_error": next((s.get("last_error") for s in sums if s.get("last_error")), None),
        "messages": sum(int(s.get("messages") or 0) for s in sums), "pages_per_s": rate(pages, t1 - t0),
        "query_p50_ms": s.p50, "query_p99_ms": s.p99, "query_max_ms": s.max,
        "cpu_s": round(cpu_s, 2), "cpu_by_process_s": cpu,
        "cpu_ms_per_page": round(cpu_s * 1000 / pages, 2) if pages else None,
    }


def run_side(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    say(f"{name}: starting (load {load1():.1f})")
    side = start_gowaku(tmp) if name == "gowaku" else start_ours(tmp, args.overrides)
    out: dict = {"startup_s": round(side.startup_s, 1), **side.extra}
    loads = [load1()]
    first_ns = time.time_ns()
    try:
        say(f"{name}: up in {side.startup_s:.1f} s at {side.addr}; "
            f"settling {args.settle:.0f} s, idle {args.idle:.0f} s")
        time.sleep(args.settle)
        c0, t0 = side.cpu_by_process(), time.monotonic()
        time.sleep(args.idle)
        idle = cpu_delta(c0, side.cpu_by_process())
        idle_s = time.monotonic() - t0
        out["idle"] = {"window_s": round(idle_s, 1), "cores": round(sum(idle.values()) / idle_s, 3),
                       "cores_by_process": {k: round(v / idle_s, 3) for k, v in idle.items()}}
        say(f"{name}: idle {out['idle']}")
        loads.append(load1())
        for i, r in enumerate(args.filter_rates):
            if i and name == "gowaku":
                # go-waku's node holds 20 filter subscribers and rate-limits each peer's requests
                # (the clients' unsubscribes get 429): each filter run gets a node of its own
                side.stop()
                (tmp / f"node{i}").mkdir()
                side = start_gowaku(tmp / f"node{i}")
            say(f"{name}: filter at {r:g} msg/s, {args.clients} clients")
            out[f"filter_{int(r)}"] = f = phase_filter(side, r, args.clients, args.warm, args.filter_window)
            say(f"{name}: filter {r:g}: p50 {f['push_p50_ms']} p99 {f['push_p99_ms']} ms, missing {f['missing']}, "
                f"{f['cpu_ms_per_push']} CPU ms/push (warm-up: {f['warmup_cpu_ms_per_push']}); p99 per {SLICE_S:g} s "
                f"of the window {f['push_p99_ms_by_slice']}")
            loads.append(load1())
        if args.paced_rate > 0:
            say(f"{name}: queryable at {args.paced_rate:g} msg/s")
            out["queryable"] = q = phase_queryable(side, args.paced_rate, args.queryable_warm, args.window)
            say(f"{name}: queryable p50 {q['queryable_p50_ms']} p99 {q['queryable_p99_ms']} ms, missing {q['missing']} "
                f"(warm-up, first {q['warmup_s']:g} s: p99 {q['warmup_queryable_p99_ms']} ms, "
                f"missing {q['warmup_missing']})"
                + (f"; stages {q['stages_ms']}" if q.get("stages_ms") else ""))
            loads.append(load1())
        if args.flat > 0:
            say(f"{name}: relay flat out for {args.flat:g} s")
            out["flat"] = fl = phase_flat(side, args.flat)
            say(f"{name}: flat out: {fl}")
            loads.append(load1())
        if args.store > 0 and args.store_clients > 0:
            say(f"{name}: store, {args.store_clients} clients for {args.store:g} s")
            out["store"] = st = phase_store(side, args.store_clients, args.store, first_ns, time.time_ns())
            say(f"{name}: store: p50 {st['query_p50_ms']} p99 {st['query_p99_ms']} ms, {st['pages_per_s']} pages/s")
            loads.append(load1())
    finally:
        side.stop()
    out["load_avg_1m"] = [round(x, 1) for x in loads]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows, one filter rate: a few minutes")
    parser.add_argument("--sides", default="gowaku,ours")
    parser.add_argument("--clients", type=int, default=20, help="filter light clients")
    parser.add_argument("--filter-rates", default=None, help="msg/s of the filter runs (default 50,200)")
    parser.add_argument("--paced-rate", type=float, default=1000.0, help="msg/s of the queryable run (0: none)")
    parser.add_argument("--flat", type=float, default=None, help="seconds of the flat-out run (0: none)")
    parser.add_argument("--store-clients", type=int, default=None)
    parser.add_argument("--store", type=float, default=None, help="seconds of the store run (0: none)")
    parser.add_argument("--settle", type=float, default=None, help="seconds after start-up before the idle window")
    parser.add_argument("--idle", type=float, default=None, help="seconds of the idle window (>= 30)")
    parser.add_argument("--warm", type=float, default=None, help="warm-up seconds of each filter run")
    parser.add_argument("--queryable-warm", type=float, default=None,
                        help="warm-up seconds of the queryable run (its figures reported apart)")
    parser.add_argument("--window", type=float, default=None, help="measured seconds of the queryable run")
    parser.add_argument("--filter-window", type=float, default=None,
                        help="measured seconds of each filter run (300: an epoch of the filter job, 2-3 "
                             "subscriptions batches)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="extra local_run --set k=v for our stack")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories (logs)")
    args = parser.parse_args()
    q = args.quick
    args.filter_rates = [float(x) for x in (args.filter_rates or ("50,200")).split(",") if x]
    for name, full, quick in [("flat", 30.0, 10.0), ("store_clients", 8, 4), ("store", 30.0, 10.0),
                              ("settle", 20.0, 10.0), ("idle", 60.0, 30.0), ("warm", 180.0, 10.0),
                              ("queryable_warm", 45.0, 20.0),
                              ("window", 60.0, 20.0), ("filter_window", 300.0, 20.0)]:
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    for r in args.filter_rates:
        if r / args.clients > FILTER_PUSH_LIMIT:
            parser.error(f"{r:g} msg/s over {args.clients} clients is more than go-waku's "
                         f"{FILTER_PUSH_LIMIT:g} pushes/s per client")
    if not GO_BIN.exists():
        print(f"{GO_BIN} missing: bash tests/interop/go/build.sh", file=sys.stderr)
        return 2
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": q,
                    "cores": os.cpu_count(), "clients": args.clients, "overrides": args.overrides}
    for name in [s.strip() for s in args.sides.split(",") if s.strip()]:
        tmp = Path(tempfile.mkdtemp(prefix=f"side-by-side-{name}-"))
        try:
            result[name] = run_side(name, args, tmp)
        except Exception as exc:  # noqa: BLE001 - the other side still runs; reported in the JSON
            say(f"{name}: failed: {exc} (logs in {tmp})")
            result[name] = {"error": str(exc)[:2000]}
            args.keep = True
        finally:
            if args.keep:
                say(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    result.update(headline(result, args))
    print(json.dumps(result), flush=True)
    return 0 if all("error" not in result.get(s, {}) for s in ("gowaku", "ours") if s in result) else 1


def headline(result: dict, args: argparse.Namespace) -> dict:
    """The flat keys issue 41 asks for (the 50 msg/s filter run for the push keys)."""
    out: dict = {}
    for side, prefix in (("gowaku", "gowaku_"), ("ours", "ours_")):
        r = result.get(side) or {}
        f = r.get("filter_50") or r.get(f"filter_{int(args.filter_rates[0])}") if args.filter_rates else {}
        f = f or {}
        out.update({
            f"{prefix}idle_cpu_cores": (r.get("idle") or {}).get("cores"),
            f"{prefix}cpu_ms_per_push": f.get("cpu_ms_per_push"),
            f"{prefix}push_p50_ms": f.get("push_p50_ms"),
            f"{prefix}push_p99_ms": f.get("push_p99_ms"),
            f"{prefix}missing": f.get("missing"),
            f"{prefix}queryable_p50_ms": (r.get("queryable") or {}).get("queryable_p50_ms"),
            f"{prefix}queryable_p99_ms": (r.get("queryable") or {}).get("queryable_p99_ms"),
            f"{prefix}queryable_missing": (r.get("queryable") or {}).get("missing"),
            f"{prefix}warmup_queryable_p99_ms": (r.get("queryable") or {}).get("warmup_queryable_p99_ms"),
            f"{prefix}stored_per_s": (r.get("flat") or {}).get("stored_per_s"),
            f"{prefix}cpu_s_per_1000_msgs": (r.get("flat") or {}).get("cpu_s_per_1000_msgs"),
            f"{prefix}store_query_p50_ms": (r.get("store") or {}).get("query_p50_ms"),
            f"{prefix}store_query_p99_ms": (r.get("store") or {}).get("query_p99_ms"),
            f"{prefix}cpu_ms_per_page": (r.get("store") or {}).get("cpu_ms_per_page"),
        })
        f200 = r.get("filter_200") or {}
        out[f"{prefix}push_p99_ms_at_200"] = f200.get("push_p99_ms")
        out[f"{prefix}missing_at_200"] = f200.get("missing")
    out["ours_relay_read_per_s"] = ((result.get("ours") or {}).get("flat") or {}).get("relay_read_per_s")
    return out


if __name__ == "__main__":
    sys.exit(main())
