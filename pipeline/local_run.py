"""Run the pipeline locally: embedded Kafka (unless external servers are configured), the
pipeline's topics, the store job through ./spark-submit.sh, and a small demo producer, printing
what reaches the Delta store. Ctrl-C stops everything cleanly.

    python -m pipeline.local_run [--duration SECONDS] [--demo-rate N] [--no-demo] [--set k=v]
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline.config import REPO_ROOT, Config, ConfigError, add_config_arguments, config_from_args

log = logging.getLogger("waku.local_run")


def topics(config: Config) -> dict[str, int]:
    t = config["topics"]
    return {t["messages"]: t["messages_partitions"], t["subscriptions"]: t["subscriptions_partitions"]}


def demo_records(count: int, start: int) -> list[tuple[bytes, bytes]]:
    """(key, value) ingest records as a bridge would produce them: keyed by message hash."""
    from pipeline.hashing import message_hash
    from schemas import pipeline_records_pb2 as pr
    from schemas import waku_message_pb2 as wm

    out = []
    for i in range(start, start + count):
        now = time.time()
        msg = wm.WakuMessage(payload=f"hello waku #{i}".encode(), content_topic=f"/demo/1/room-{i % 3}/proto",
                             timestamp=time.time_ns())
        pubsub = "/waku/2/default-waku/proto"
        rec = pr.IngestRecord(pubsub_topic=pubsub, message=msg, received_time=now,
                              source=pr.RELAY, bridge_id="demo")
        key = message_hash(pubsub, msg.payload, msg.content_topic, None, msg.timestamp)
        out.append((key, rec.SerializeToString()))
    return out


def stored_count(config: Config) -> int | None:
    """Rows in the Delta `messages` table, read with the Rust Delta reader (no Spark)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(config.table_path("messages")).to_pyarrow_dataset().count_rows()
    except (TableNotFoundError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="waku-local-run", description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: run until Ctrl-C)")
    parser.add_argument("--demo-rate", type=int, default=5, help="demo messages per second (default 5)")
    parser.add_argument("--no-demo", action="store_true", help="do not produce demo messages")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        config = config_from_args(args)
        return run(config, args)
    except (ConfigError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run(config: Config, args: argparse.Namespace) -> int:
    from kafka import KafkaProducer

    from pipeline.embedded_kafka import EmbeddedKafka, EmbeddedKafkaError

    broker = None
    store_job = None
    producer = None
    stopping = False

    def on_signal(signum, frame):  # noqa: ARG001
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if config.uses_embedded_kafka():
            broker = EmbeddedKafka.from_config(config)
            try:
                broker.start()
                broker.create_topics(topics(config))
            except EmbeddedKafkaError as exc:
                raise RuntimeError(str(exc)) from None
            log.info("embedded Kafka ready at %s (data in %s)", broker.bootstrap_servers, broker.data_dir)
        else:
            log.info("using Kafka at %s (nothing started)", config.bootstrap_servers())
        job_log = Path(config.path("warehouse.checkpoints")).parent / "store-job.log"
        job_log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [str(REPO_ROOT / "spark-submit.sh"), "store"]
        for item in args.overrides:
            cmd += ["--set", item]
        if args.config:
            cmd += ["--config", args.config]
        log.info("starting the store job (log: %s)", job_log)
        store_job = subprocess.Popen(cmd, stdout=job_log.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=REPO_ROOT)
        producer = None if args.no_demo else KafkaProducer(bootstrap_servers=config.bootstrap_servers(), acks="all")
        sent = 0
        began = time.monotonic()
        last_report = 0.0
        while not stopping and (not args.duration or time.monotonic() - began < args.duration):
            if store_job.poll() is not None:
                raise RuntimeError(f"the store job exited with {store_job.returncode}: see {job_log}")
            if producer is not None:
                for key, value in demo_records(args.demo_rate, sent):
                    producer.send(config.get("topics.messages"), key=key, value=value)
                producer.flush()
                sent += args.demo_rate
            if time.monotonic() - last_report >= 5:
                last_report = time.monotonic()
                count = stored_count(config)
                log.info("demo messages produced this run: %d; rows in the Delta store: %s", sent,
                         "table not created yet" if count is None else count)
            time.sleep(1)
        return 0
    finally:
        if producer is not None:
            producer.close()
        if store_job is not None and store_job.poll() is None:
            log.info("stopping the store job")
            os.killpg(store_job.pid, signal.SIGTERM)
            try:
                store_job.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(store_job.pid, signal.SIGKILL)
        if broker is not None:
            log.info("stopping embedded Kafka")
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
