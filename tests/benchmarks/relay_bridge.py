"""Relay throughput benchmark: one relay publisher process -> one bridge process -> Kafka.

    .venv/bin/python tests/benchmarks/relay_bridge.py [--quick] [--messages N] [--payload-bytes B]

Starts its own embedded Kafka (free ports, temp dir) and a `waku-bridge run` process, then
runs `waku-bridge publish` processes on loopback:

1. warm-up (not counted);
2. flat out: N messages of B random bytes (default 1 KiB) as fast as the publisher goes; the
   rate is N / (first publish -> the bridge's produced counter reaching N), read from its
   metrics endpoint;
3. paced: a fixed rate below the flat-out one, for the latency at a steady load.

Afterwards it reads the Kafka topic back: `lost` is messages published but not in Kafka
(distinct keys), `duplicates` records beyond one per key. Latencies are the bridge's own
arrival-to-Kafka-acknowledgement histogram (waku_bridge_ack_latency_seconds: inside the bridge,
not publisher to Kafka), read by tests/benchmarks/stats.py's nearest rank as the upper bound of
the bucket holding the percentile, over every message published in the phase (one not
acknowledged as +inf: null where it decides). The last line is JSON. Everything stops by
itself: bounded waits, loopback only.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks.stats import histogram_percentile  # noqa: E402
from tools.embedded_kafka import EmbeddedKafka  # noqa: E402
from tools.processes import free_port, start_bridge, start_publisher  # noqa: E402

TOPIC = "waku.messages"


def scrape(port: int, timeout: float = 5.0) -> dict[str, float]:
    """A bridge's Prometheus samples by name (labels included)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def histogram(sample: dict[str, float]) -> list[tuple[float, float]]:
    """[(upper bound, cumulative count)] of the ack latency histogram."""
    out = []
    for name, v in sample.items():
        m = re.fullmatch(r'waku_bridge_ack_latency_seconds_bucket\{le="([^"]+)"\}', name)
        if m:
            out.append((float(m.group(1)), v))
    return sorted(out)


def ack_percentile(before: dict[str, float], after: dict[str, float], p: float, offered: int) -> float | None:
    """The p-th percentile (seconds; stats.histogram_percentile: nearest rank, a bucket's upper
    bound) of the latencies observed between two scrapes, over `offered` messages: those not
    acknowledged in between count as +inf (None where the percentile falls on one)."""
    b = dict(histogram(before))
    return histogram_percentile([(le, c - b.get(le, 0.0)) for le, c in histogram(after)], p, offered)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def publish(addr: str, count: int, payload: int, rate: float, metrics_port: int, target: float,
            timeout: float) -> dict[str, float]:
    """Run one publisher process; wait until the bridge has produced `target` records in total."""
    pub = start_publisher(addr, rate=rate, count=count, payload_size=payload, log=subprocess.DEVNULL)
    assert pub.stdout is not None
    began = None
    deadline = time.monotonic() + timeout
    while began is None and time.monotonic() < deadline:
        line = pub.stdout.readline()
        if not line:
            break
        event = json.loads(line)
        if event.get("event") == "publishing":
            began = event["time"]
    if began is None:
        pub.kill()
        raise RuntimeError("the publisher did not start publishing")
    produced = 0.0
    while time.monotonic() < deadline:
        produced = scrape(metrics_port).get("waku_bridge_produced_total", 0.0)
        if produced >= target:
            break
        time.sleep(0.05)
    ended = time.time()
    try:
        out, _ = pub.communicate(timeout=max(5.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pub.kill()
        out, _ = pub.communicate()
    done = [json.loads(line) for line in out.splitlines() if '"done"' in line]
    published = done[-1]["published"] if done else count
    return {"began": began, "ended": ended, "seconds": ended - began, "published": published,
            "produced": produced, "publisher_rate": done[-1]["messages_per_s"] if done else None}


def read_back(bootstrap: str) -> tuple[int, int]:
    """(records, distinct keys) in the topic."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=16 * 1024 * 1024)
    try:
        parts = [TopicPartition(TOPIC, p) for p in consumer.partitions_for_topic(TOPIC)]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        end = consumer.end_offsets(parts)
        keys: set[bytes] = set()
        records = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(consumer.position(p) < end[p] for p in parts):
            for recs in consumer.poll(timeout_ms=500, max_records=100_000).values():
                records += len(recs)
                keys.update(r.key for r in recs)
        return records, len(keys)
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--messages", type=int, help="messages in the flat-out run")
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--paced-rate", type=float, default=1000.0, help="messages/s of the paced run")
    args = parser.parse_args()
    n = args.messages or (5_000 if args.quick else 40_000)
    warmup = 1_000 if args.quick else 3_000
    paced_n = int(args.paced_rate * (3 if args.quick else 10))

    tmp = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    kafka = EmbeddedKafka(tmp / "kafka", port=free_port(), controller_port=free_port())
    bridge = None
    try:
        print(f"starting Kafka on {kafka.bootstrap_servers} ...", flush=True)
        kafka.start()
        kafka.create_topics({TOPIC: 4})
        metrics_port = free_port()
        bridge = start_bridge([
            f"kafka.bootstrap_servers={kafka.bootstrap_servers}", f"topics.messages={TOPIC}",
            f"bridge.key_file={tmp / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
            "bridge.ws_port=-1", f"bridge.metrics_port={metrics_port}",
        ], log=open(tmp / "bridge.log", "w"))
        addr = bridge.tcp_addr
        print(f"bridge {bridge.peer_id} at {addr}", flush=True)

        publish(addr, warmup, args.payload_bytes, 0, metrics_port, warmup, 120)
        print(f"warm-up: {warmup} messages", flush=True)

        before = scrape(metrics_port)
        cpu0 = cpu_seconds(bridge.proc.pid)
        flat = publish(addr, n, args.payload_bytes, 0, metrics_port, warmup + n, 300)
        cpu1 = cpu_seconds(bridge.proc.pid)
        after = scrape(metrics_port)
        rate = flat["produced"] - before.get("waku_bridge_produced_total", 0)
        rate = rate / flat["seconds"] if flat["seconds"] > 0 else 0.0
        print(f"flat out: {n} x {args.payload_bytes} B in {flat['seconds']:.2f} s = {rate:.0f} msg/s "
              f"(publisher {flat['publisher_rate']} msg/s; bridge CPU {100 * (cpu1 - cpu0) / flat['seconds']:.0f}% "
              "of one core)", flush=True)

        paced_before = scrape(metrics_port)
        paced = publish(addr, paced_n, args.payload_bytes, args.paced_rate, metrics_port, warmup + n + paced_n, 300)
        paced_after = scrape(metrics_port)
        print(f"paced: {paced_n} messages at {args.paced_rate:.0f}/s in {paced['seconds']:.2f} s", flush=True)

        time.sleep(0.5)
        final = scrape(metrics_port)
        records, distinct = read_back(kafka.bootstrap_servers)
        expected = warmup + n + paced_n
        dropped = sum(v for k, v in final.items() if k.startswith("waku_bridge_dropped_total"))
        rejected = sum(v for k, v in final.items() if k.startswith("waku_bridge_rejected_total"))
        ms = lambda s: None if s is None else round(s * 1000, 1)  # noqa: E731
        result = {
            "messages_per_s": round(rate, 1),
            "lost": expected - distinct,
            "latency_p50_ms": ms(ack_percentile(before, after, 50, n)),
            "latency_p99_ms": ms(ack_percentile(before, after, 99, n)),
            "paced_rate": args.paced_rate,
            "paced_latency_p50_ms": ms(ack_percentile(paced_before, paced_after, 50, paced_n)),
            "paced_latency_p99_ms": ms(ack_percentile(paced_before, paced_after, 99, paced_n)),
            "messages": n,
            "payload_bytes": args.payload_bytes,
            "published_total": expected,
            "kafka_records": records,
            "duplicates": records - distinct,
            "dropped": dropped,
            "rejected": rejected,
            "bridge_cpu_percent": round(100 * (cpu1 - cpu0) / flat["seconds"], 1),
            "publisher_messages_per_s": flat["publisher_rate"],
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "quick": args.quick,
        }
        print(json.dumps(result), flush=True)
        return 0 if result["lost"] == 0 else 1
    finally:
        if bridge is not None:
            bridge.stop(60)
        kafka.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
