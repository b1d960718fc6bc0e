"""Store ingest benchmark: Kafka -> store job -> committed Delta rows.

    python tests/benchmarks/store_ingest.py [--quick]

1. Throughput: N ingest records with 1 KiB payloads (plus the load generator's usual share of
   duplicates, ephemeral and invalid records) are put in Kafka first; the store query then
   catches up (available-now trigger) on Spark local[2]. messages_per_s = records / wall time
   from query start to the last commit.
2. Latency: a producer offers records at a steady rate while the store query runs with its
   processing-time trigger; a watcher follows the Delta log and stamps each committed row with
   the time its commit became visible. Latency = visible time - Kafka append time.

Starts its own embedded Kafka on free ports in a temporary directory and stops everything at
the end. The last line is JSON.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from core.config import load_config  # noqa: E402
from tools.embedded_kafka import EmbeddedKafka  # noqa: E402
from tools.loadgen import LoadGenerator, LoadProfile, producer  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def produce_all(bootstrap: str, topic: str, count: int) -> float:
    gen = LoadGenerator(LoadProfile(payload_bytes=1024, seed=42))
    p = producer(bootstrap)
    began = time.monotonic()
    for _ in range(count):
        r = gen.next()
        p.send(topic, key=r.key, value=r.value)
    p.flush()
    p.close()
    return count / (time.monotonic() - began)


class DeltaWatcher(threading.Thread):
    """Follows the Delta log of `messages`; records (visible_time - kafka append time) per row."""

    def __init__(self, path: str, interval_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.path, self.interval_s = path, interval_s
        self.latencies: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        import pyarrow.parquet as pq

        version = 0
        while not self.stop_event.is_set():
            log = Path(self.path) / "_delta_log" / f"{version:020d}.json"
            if not log.exists():
                time.sleep(self.interval_s)
                continue
            seen = time.time()
            for f in self._added_files(version):
                col = pq.read_table(os.path.join(self.path, f), columns=["kafka_timestamp"]).column(0)
                for ts in col.to_pylist():
                    if ts is not None:  # Spark stores UTC wall time; pyarrow returns it naive
                        ts = ts if ts.tzinfo else ts.replace(tzinfo=dt.timezone.utc)
                        self.latencies.append(seen - ts.timestamp())
            version += 1

    def _added_files(self, version: int) -> list[str]:
        log = Path(self.path) / "_delta_log" / f"{version:020d}.json"
        out = []
        for line in log.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                out.append(action["add"]["path"])
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--rate", type=float, default=10_000.0, help="offered load of the latency run")
    parser.add_argument("--seconds", type=float, default=None, help="length of the latency run")
    args = parser.parse_args()
    records = args.records or (100_000 if args.quick else 1_000_000)
    seconds = args.seconds or (20.0 if args.quick else 60.0)

    tmp = Path(tempfile.mkdtemp(prefix="waku-bench-store-"))
    port, controller = free_port(), free_port()
    broker = EmbeddedKafka(tmp / "kafka", port=port, controller_port=controller, heap="-Xmx1g")
    broker.start()
    bootstrap = broker.bootstrap_servers
    results: dict[str, object] = {}
    try:
        broker.create_topics({"bench.throughput": 4, "bench.latency": 4})
        print(f"producing {records} records (1 KiB payloads) ...", flush=True)
        results["produce_per_s"] = round(produce_all(bootstrap, "bench.throughput", records))
        print(f"  produced at {results['produce_per_s']}/s", flush=True)

        from core.settings import WarehouseSettings
        from core.spark_conf import SparkSettings
        from pipeline.spark.session import build_session
        from pipeline.store.settings import StoreJobSettings
        from pipeline.store.job import start_store_query
        from pipeline.store.tables import ensure_store_tables

        def cfg(topic: str, name: str, extra: list[str] = ()):  # type: ignore[assignment]
            return load_config([f"kafka.bootstrap_servers={bootstrap}", f"topics.messages={topic}",
                                f"warehouse.root={tmp / name / 'wh'}",
                                f"warehouse.checkpoints={tmp / name / 'cp'}",
                                "spark.master=local[2]", "spark.shuffle_partitions=4", *extra])

        c1 = cfg("bench.throughput", "throughput")
        spark = build_session(SparkSettings.from_config(c1), "bench-store")
        ensure_store_tables(spark, WarehouseSettings.from_config(c1))
        print("store job catching up (available-now) ...", flush=True)
        began = time.monotonic()
        q = start_store_query(spark, StoreJobSettings.from_config(c1), available_now=True)
        q.awaitTermination()
        took = time.monotonic() - began
        stored = spark.read.format("delta").load(c1.table_path("messages")).count()
        results.update(messages_per_s=round(records / took), throughput_records=records,
                       throughput_stored_rows=stored, throughput_seconds=round(took, 1))
        print(f"  {records} records in {took:.1f}s: {records / took:.0f}/s ({stored} rows stored)", flush=True)

        c2 = cfg("bench.latency", "latency", ["store.trigger_seconds=0.5", "store.starting_offsets=latest"])
        ensure_store_tables(spark, WarehouseSettings.from_config(c2))
        watcher = DeltaWatcher(c2.table_path("messages"))
        watcher.start()
        q = start_store_query(spark, StoreJobSettings.from_config(c2), query_name="store_latency")
        while not q.recentProgress:  # the query has made its first (empty) batch
            time.sleep(0.2)
        print(f"offering {args.rate:.0f} msg/s for {seconds:.0f}s ...", flush=True)
        gen = LoadGenerator(LoadProfile(payload_bytes=1024, seed=7))
        p = producer(bootstrap, linger_ms=2)
        sent = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            due = start + sent / args.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            r = gen.next()
            p.send("bench.latency", key=r.key, value=r.value)
            sent += 1
        p.flush()
        offered = sent / (time.monotonic() - start)
        time.sleep(10)  # let the last batches commit
        q.stop()
        watcher.stop_event.set()
        watcher.join(10)
        lat = watcher.latencies
        results.update(offered_rate=round(offered), latency_rows=len(lat),
                       latency_p50_s=round(percentile(lat, 50), 3), latency_p99_s=round(percentile(lat, 99), 3))
        print(f"  offered {offered:.0f}/s; {len(lat)} rows seen; latency p50 {results['latency_p50_s']}s "
              f"p99 {results['latency_p99_s']}s", flush=True)
        spark.stop()
    finally:
        broker.stop()
    results.update(cores=os.cpu_count(), python=platform.python_version(), quick=args.quick,
                   date=time.strftime("%Y-%m-%d"))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
