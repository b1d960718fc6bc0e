"""Where a store job's CPU goes, stage by stage, per 1 KiB record (issue 12).

    .venv/bin/python tests/benchmarks/store_stages.py [--records N] [--repeat R] [--quick]

An embedded broker is filled with N load-generator records (1 KiB payloads, the usual mix), then
one Spark session (`local[2]`, the store job's settings) runs each stage of the store batch on
them as a batch query, cumulatively (each stage includes the ones above it), and measures the
CPU seconds of the Spark JVM and of this process (the driver's Python side) and of the broker
serving the reads. The figure of a stage is the best of R runs; the difference between two
consecutive stages is what the later one adds. It tells how many records per second two cores
could carry at best, whatever the batching: a micro-batch also pays a fixed cost per batch
(planning, commits), which tests/benchmarks/store_ingest.py --profile shows.

Stages:
  kafka_read        Spark's Kafka source, every record materialized (noop sink)
  decode            + the JVM protobuf decoder, flattened columns
  hashes            + digest and message hash (sha-256 column expressions)
  validate          + the rejection reason (the rules of core/validation.py)
  cache_narrow      + the batch cached (uncompressed, as the job does) and its narrow columns
                      collected to the driver as Arrow
  write             + the valid rows written from the cache: one file, sorted by
                      (received_time, digest), Parquet with snappy (the messages write, no commit)
  delta_commit      the same write as a Delta append to `messages` (file statistics, the commit,
                      the new snapshot)
  quarantine        + the refused rows appended to Delta `quarantine` (a second commit): the
                      whole of a store batch's per-record work

The last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.processes import free_port, proc_cpu_s  # noqa: E402 - run as a script: the repository joins sys.path first

TOPIC = "waku.messages"


def spark_jvm_pid() -> int:
    """The Spark JVM this process launched (through spark-submit's scripts: a descendant)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(d))
    todo, seen = [os.getpid()], []
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            seen.append(child)
            todo.append(child)
    for pid in seen:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"org.apache.spark.deploy.SparkSubmit" in cmd:
            return pid
    raise RuntimeError("no Spark JVM among this process's descendants")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="50,000 records, 2 runs a stage")
    args = parser.parse_args()
    if args.quick:
        args.records, args.repeat = 50_000, 2

    from pyspark.sql import functions as F

    from core.config import load_config
    from core.kafka import ensure_topics
    from core.settings import KafkaSettings, WarehouseSettings
    from core.spark_conf import SparkSettings
    from pipeline.spark.kafka_io import read_topic_batch
    from pipeline.spark.records import decode_ingest_records
    from pipeline.spark.session import build_session
    from pipeline.store.tables import ensure_store_tables
    from pipeline.store.validation import Limits, with_rejection_reason
    from pipeline.store.writer import QUARANTINE_COLUMNS, STORED_COLUMNS
    from tools.embedded_kafka import EmbeddedKafka
    from tools.loadgen import LoadGenerator, LoadProfile, produce

    load_start = os.getloadavg()
    tmp = Path(tempfile.mkdtemp(prefix="waku-bench-stages-"))
    broker = EmbeddedKafka(data_dir=tmp / "kafka", port=free_port(), controller_port=free_port(),
                           jar_dir=REPO / ".cache/jars/kafka", heap="-Xmx1g")
    broker.start()
    out: dict = {"records": args.records, "repeat": args.repeat}
    try:
        ensure_topics(broker.bootstrap_servers, {TOPIC: 4})
        produce(broker.bootstrap_servers, TOPIC,
                LoadGenerator(LoadProfile(payload_bytes=1024, seed=42)).batch(args.records))
        config = load_config([f"kafka.bootstrap_servers={broker.bootstrap_servers}", "spark.shuffle_partitions=2",
                              "spark.options=spark.driver.memory=4g"])
        spark = build_session(SparkSettings.from_config(config), "store-stages")
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
        kafka = KafkaSettings.from_config(config)
        jvm = spark_jvm_pid()
        broker_pid = broker._proc.pid
        limits = Limits()
        target = str(tmp / "out")
        warehouse = WarehouseSettings(str(tmp / "wh"), str(tmp / "cp"))
        ensure_store_tables(spark, warehouse)

        def raw():
            return read_topic_batch(spark, kafka, TOPIC)

        def noop(df) -> None:
            df.write.format("noop").mode("overwrite").save()

        def decoded():
            return decode_ingest_records(raw()).drop("digest", "message_hash")

        def checked():
            return (with_rejection_reason(decode_ingest_records(raw()), limits)
                    .withColumn("raw_value", F.when(F.col("reason").isNotNull(), F.col("raw_value"))))

        def cache_narrow(then=None) -> None:
            c = checked().persist()
            c.select("reason", "ephemeral", "kafka_topic", "kafka_partition", "kafka_offset",
                     "message_hash", "received_time").toArrow()
            if then is not None:
                then(c)
            c.unpersist(blocking=True)

        def write(c) -> None:
            (c.where(F.col("reason").isNull() & ~F.col("ephemeral"))
             .withColumn("received_date", F.lit("2026-11-24")).coalesce(1)
             .sortWithinPartitions("received_time", "digest").select(*STORED_COLUMNS)
             .write.format("parquet").mode("overwrite").save(target))

        def write_delta(c) -> None:
            (c.where(F.col("reason").isNull() & ~F.col("ephemeral"))
             .withColumn("received_date", F.lit("2026-11-24")).coalesce(1)
             .sortWithinPartitions("received_time", "digest").select(*STORED_COLUMNS)
             .write.format("delta").mode("append").save(warehouse.table_path("messages")))

        def write_both(c) -> None:
            write_delta(c)
            (c.where(F.col("reason").isNotNull()).withColumn("quarantined_at", F.current_timestamp())
             .select(*QUARANTINE_COLUMNS).write.format("delta").mode("append")
             .save(warehouse.table_path("quarantine")))

        stages = [
            ("kafka_read", lambda: noop(raw())),
            ("decode", lambda: noop(decoded())),
            ("hashes", lambda: noop(decode_ingest_records(raw()))),
            ("validate", lambda: noop(checked())),
            ("cache_narrow", lambda: cache_narrow()),
            ("write", lambda: cache_narrow(write)),
            ("delta_commit", lambda: cache_narrow(write_delta)),
            ("quarantine", lambda: cache_narrow(write_both)),
        ]
        noop(raw())  # JIT and the consumer pool warm up once before anything is measured
        result: dict[str, dict] = {}
        for name, run in stages:
            best = None
            for _ in range(args.repeat):
                c0, b0, w0 = proc_cpu_s(jvm) + time.process_time(), proc_cpu_s(broker_pid), time.monotonic()
                run()
                cpu, broker_cpu = proc_cpu_s(jvm) + time.process_time() - c0, proc_cpu_s(broker_pid) - b0
                wall = time.monotonic() - w0
                if best is None or cpu < best[0]:
                    best = (cpu, broker_cpu, wall)
            cpu, broker_cpu, wall = best
            result[name] = {"job_cpu_us": round(cpu / args.records * 1e6, 1),
                            "broker_cpu_us": round(broker_cpu / args.records * 1e6, 1),
                            "wall_s": round(wall, 2)}
            print(f"{name:14s} job CPU {result[name]['job_cpu_us']:6.1f} µs/record  broker "
                  f"{result[name]['broker_cpu_us']:5.1f} µs/record  wall {wall:.2f} s", flush=True)
        spark.stop()
        names = [n for n, _ in stages]
        out["stages"] = result
        out["added_us"] = {n: round(result[n]["job_cpu_us"] - (result[names[i - 1]]["job_cpu_us"] if i else 0), 1)
                           for i, n in enumerate(names)}
        total = result["quarantine"]["job_cpu_us"] + result["quarantine"]["broker_cpu_us"]
        out["cpu_us_per_record"] = round(total, 1)
        out["two_core_ceiling_per_s"] = round(2e6 / total) if total else None
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    out.update(load_avg_start=[round(x, 2) for x in load_start],
               load_avg_end=[round(x, 2) for x in os.getloadavg()], date=time.strftime("%Y-%m-%d"))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
