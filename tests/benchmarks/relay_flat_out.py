"""go-waku publishing flat out into the bridge beside the running Spark jobs (issue 36 item 10).

    .venv/bin/python tests/benchmarks/relay_flat_out.py [--seconds 60] [--no-jobs] [--payload-bytes B]

Starts `tools.local_run --no-demo --no-dashboard` (embedded Kafka, the store, subscriptions and
filter jobs through ./spark-submit.sh, the bridge on cluster 1, every shard) on free ports in a
temporary directory; once the store job has created its table, runs the go-waku harness
(`wakuinterop relay-publish --seconds S --rate 0`: as fast as go-waku goes) against the bridge.
Afterwards it counts: what go-waku published, what the bridge received / accepted / produced /
dropped (its metrics), which of go-waku's messages are in Kafka (by message hash, the record
key), and, once the store job has caught up, how many of them the store job quarantined (by
reason: `timestamp_skew` means the receive time was stamped more than max_clock_skew_s after
the message was sent). `connected_s` is how long go-waku stayed connected (its whole run when
it never lost the bridge). `lag_*_s`: the bridge's receive time minus the message timestamp,
over every message go-waku published (tests/benchmarks/stats.py: nearest rank; one not in Kafka
as +inf, null where a percentile falls on one). The load average is sampled every second. The
last line is JSON.
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

from tests.benchmarks import relay_bridge  # noqa: E402
from tests.benchmarks.stats import latency_summary  # noqa: E402
from tools.embedded_kafka import EmbeddedKafka  # noqa: E402
from tools.processes import free_port, start_bridge  # noqa: E402

GO_BIN = REPO_ROOT / ".cache" / "interop" / "wakuinterop"
PUBSUB_TOPIC = "/waku/2/rs/1/0"
CONTENT_TOPIC = "/flat/1/out/proto"


def scrape(port: int) -> dict[str, float]:
    return relay_bridge.scrape(port, timeout=10)


def total(sample: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in sample.items() if k == prefix or k.startswith(prefix + "{"))


def load1() -> float:
    return os.getloadavg()[0]


def kafka_keys(bootstrap: str, topic: str) -> tuple[int, set[bytes], dict[bytes, float]]:
    """(records, distinct keys, received_time - sender timestamp of each key's first record) of the topic."""
    from kafka import KafkaConsumer, TopicPartition

    from core.validation import decode_ingest

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(parts)
        keys: set[bytes] = set()
        lags: dict[bytes, float] = {}  # per record key (message hash): its first record's lag
        records = 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and any(consumer.position(p) < end[p] for p in parts):
            for recs in consumer.poll(timeout_ms=500, max_records=100_000).values():
                records += len(recs)
                keys.update(r.key for r in recs)
                for r in recs:
                    f = decode_ingest(r.value)
                    if f.has_message and f.timestamp and f.received_time is not None:
                        lags.setdefault(r.key, f.received_time - f.timestamp / 1e9)
        return records, keys, lags
    finally:
        consumer.close()


def delta_rows(path: Path, columns: list[str]) -> list[dict]:
    from deltalake import DeltaTable

    try:
        return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()
    except Exception:  # noqa: BLE001 - not created yet
        return []


def stack_overrides(tmp: Path, kafka_port: int, metrics_port: int, topic: str) -> list[str]:
    """`--set` items of a local run in `tmp` on free ports: the bridge on cluster 1, every shard,
    topics named after `topic`'s prefix (other benchmarks start the stack the same way)."""
    prefix = topic.rsplit(".", 1)[0]
    return [
        f"embedded_kafka.port={kafka_port}", f"embedded_kafka.controller_port={free_port()}",
        f"embedded_kafka.data_dir={tmp / 'kafka'}",
        f"topics.messages={topic}", f"topics.subscriptions={prefix}.subscriptions",
        f"topics.push_prefix={prefix}.push.",
        f"warehouse.root={tmp / 'warehouse'}", f"warehouse.checkpoints={tmp / 'var' / 'checkpoints'}",
        f"bridge.key_file={tmp / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
        "bridge.ws_port=-1", f"bridge.metrics_port={metrics_port}",
        "bridge.cluster_id=1", "rln.enabled=false", "bridge.num_shards_in_cluster=8", "bridge.pubsub_topics=",
        "bridge.all_shards=true",
        f"job_metrics.store_port={free_port()}", f"job_metrics.subscriptions_port={free_port()}",
        f"job_metrics.filter_port={free_port()}", f"dashboard.port={free_port()}",
        f"rest.port={free_port()}",  # local_run turns the REST API on (nwaku's port 8645 by default)
    ]


def start_local_run(overrides: list[str], run_log: Path) -> subprocess.Popen:
    """`tools.local_run --no-demo --no-dashboard` with `overrides`, in its own session, output to
    `run_log`, the jobs' and the bridge's logs beside it in var/."""
    argv = [sys.executable, "-m", "tools.local_run", "--no-demo", "--no-dashboard",
            "--logs", str(run_log.parent / "var")]
    for o in overrides:
        argv += ["--set", o]
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=run_log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait_local_run(local: subprocess.Popen, run_log: Path, timeout_s: float = 900) -> str:
    """The bridge's TCP address once the local run is up (the store job made its table)."""
    addr = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and local.poll() is None:
        text = run_log.read_text()
        m = re.search(r"bridge listening on (/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)", text)
        addr = addr or (m.group(1) if m else None)
        if addr and re.search(r"rows in the Delta store: \d+", text):  # the store job made its table
            return addr
        time.sleep(1)
    raise RuntimeError(f"local_run did not come up: {run_log.read_text()[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long go-waku publishes")
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--no-jobs", action="store_true",
                        help="Kafka and the bridge only (no Spark jobs, no store figures)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args()
    if not GO_BIN.exists():
        print(f"{GO_BIN} missing: bash tests/interop/go/build.sh", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="relay-flat-out-"))
    kafka_port, metrics_port = free_port(), free_port()
    topic = "flat.messages"
    overrides = stack_overrides(tmp, kafka_port, metrics_port, topic)
    run_log = tmp / "local_run.log"
    local = kafka = bridge = None
    loads: list[float] = []
    try:
        if args.no_jobs:
            print(f"starting Kafka and the bridge (logs in {tmp}) ...", flush=True)
            kafka = EmbeddedKafka(tmp / "kafka", port=kafka_port, controller_port=free_port())
            kafka.start()
            kafka.create_topics({topic: 4})
            (tmp / "var").mkdir()
            bridge = start_bridge([f"kafka.bootstrap_servers={kafka.bootstrap_servers}", *overrides],
                                  log=(tmp / "var" / "bridge.log").open("w"))
            addr = bridge.tcp_addr
        else:
            print(f"starting Kafka, the three Spark jobs and the bridge (logs in {tmp}) ...", flush=True)
            local = start_local_run(overrides, run_log)
            addr = wait_local_run(local, run_log)
        print(f"bridge at {addr}; load {load1():.1f}; go-waku publishes flat out for {args.seconds:.0f} s", flush=True)

        sampling = True

        def sample() -> None:
            while sampling:
                loads.append(load1())
                time.sleep(1)
        threading.Thread(target=sample, daemon=True).start()
        before = scrape(metrics_port)
        started = time.monotonic()
        go = subprocess.run([str(GO_BIN), "relay-publish", "--peer", addr, "--cluster-id", "1",
                             "--pubsub-topic", PUBSUB_TOPIC, "--content-topic", CONTENT_TOPIC,
                             "--seconds", str(args.seconds), "--rate", "0", "--quiet", "--linger", "5",
                             "--payload-size", str(args.payload_bytes), "--timeout", "120"],
                            capture_output=True, text=True, timeout=args.seconds + 600)
        ran_s = time.monotonic() - started
        sampling = False
        summary = json.loads([line for line in go.stdout.splitlines() if line.startswith("{")][-1])
        (tmp / "go-waku.stderr").write_text(go.stderr)
        hashes = {bytes.fromhex(h[2:]) for h in summary.get("hashes", [])}
        # the bridge's pipeline drains: wait for produced + dropped to stop moving
        last, still = None, 0
        while still < 5:
            s = scrape(metrics_port)
            now = (total(s, "waku_bridge_accepted_total"), total(s, "waku_bridge_produced_total"),
                   total(s, "waku_bridge_dropped_total"))
            still = still + 1 if now == last else 0
            last = now
            time.sleep(1)
        after = scrape(metrics_port)
        bootstrap = f"127.0.0.1:{kafka_port}"
        records, keys, lags = kafka_keys(bootstrap, topic)
        # over every message go-waku published: one not in Kafka is +inf (null where it decides)
        lag = latency_summary([v for k, v in lags.items() if k in hashes], len(hashes), digits=2)
        in_kafka = len(hashes & keys)
        quarantined: dict[str, int] = {}
        stored = 0
        if not args.no_jobs:  # until the store job has stored or quarantined every record
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                stored = len(delta_rows(tmp / "warehouse" / "messages", ["message_hash"]))
                q = delta_rows(tmp / "warehouse" / "quarantine", ["reason"])
                if stored + len(q) >= records:
                    break
                time.sleep(5)
            for r in q:
                quarantined[r["reason"]] = quarantined.get(r["reason"], 0) + 1
        d = lambda name: total(after, name) - total(before, name)  # noqa: E731
        bridge_log = (tmp / "var" / "bridge.log")
        warnings = [line for line in bridge_log.read_text().splitlines()
                    if " WARNING " in line or " ERROR " in line] if bridge_log.exists() else []
        result = {
            "seconds": args.seconds,
            "jobs": not args.no_jobs,
            "go_ok": summary.get("ok"),
            "go_error": summary.get("error"),
            "published": summary.get("published"),
            "publish_s": round(summary.get("publish_ms", 0) / 1000, 1),
            "dropped_to_bridge": summary.get("dropped_to_bridge"),
            "connected_at_end": summary.get("connected_at_end"),
            "disconnects": summary.get("disconnects"),
            "bridge_received": d("waku_bridge_received_total"),
            "bridge_accepted": d("waku_bridge_accepted_total"),
            "bridge_produced": d("waku_bridge_produced_total"),
            "bridge_dropped": d("waku_bridge_dropped_total"),
            "in_kafka": in_kafka,
            "kafka_records": records,
            "lag_p50_s": lag.p50, "lag_p99_s": lag.p99, "lag_max_s": lag.max,
            "stored": stored,
            "quarantined": quarantined,
            "load_avg_1m_mean": round(sum(loads) / len(loads), 1) if loads else None,
            "load_avg_1m_max": round(max(loads), 1) if loads else None,
            "run_s": round(ran_s, 1),
            "bridge_warnings": len(warnings),
            "cores": os.cpu_count(),
        }
        for line in warnings[:20]:
            print("bridge:", line[:300])
        print(json.dumps(result), flush=True)
        ok = (summary.get("connected_at_end") and not summary.get("disconnects")
              and in_kafka >= result["bridge_accepted"] and not result["bridge_dropped"])
        return 0 if ok else 1
    finally:
        if local is not None and local.poll() is None:
            local.send_signal(signal.SIGINT)
            try:
                local.wait(180)
            except subprocess.TimeoutExpired:
                os.killpg(local.pid, signal.SIGKILL)
        if bridge is not None:
            bridge.stop(60)
        if kafka is not None:
            kafka.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
