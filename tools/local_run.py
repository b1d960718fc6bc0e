"""Run the pipeline locally: embedded Kafka (unless external servers are configured), the
pipeline's topics, the store, subscriptions and filter jobs through ./spark-submit.sh (only the
store job with --store-only), the ingest bridge (waku-bridge), a
small demo publisher that publishes over Waku relay to the bridge, and the ops dashboard
(tools/dashboard.py, http://127.0.0.1:8050/), printing what reaches the Delta store. Ctrl-C stops
everything cleanly.

    python -m tools.local_run [--duration SECONDS] [--demo-rate N] [--no-demo] [--no-dashboard] [--store-only]
                              [--set k=v]
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

from core.config import REPO_ROOT, Config, ConfigError, add_config_arguments, config_from_args

log = logging.getLogger("waku.local_run")


def topics(config: Config) -> dict[str, int]:
    t = config["topics"]
    return {t["messages"]: t["messages_partitions"], t["subscriptions"]: t["subscriptions_partitions"]}


def stored_count(config: Config) -> int | None:
    """Rows in the Delta `messages` table, read with the Rust Delta reader (no Spark)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(config.table_path("messages")).to_pyarrow_dataset().count_rows()
    except (TableNotFoundError, OSError):
        return None


def start_dashboard(job_args: list[str], log_path: Path) -> subprocess.Popen:
    """The ops dashboard as a child process, with the same configuration as the jobs."""
    return subprocess.Popen([sys.executable, "-m", "tools.dashboard", *job_args], cwd=REPO_ROOT,
                            stdout=log_path.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


def _local(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="waku-local-run", description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    parser.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: run until Ctrl-C)")
    parser.add_argument("--demo-rate", type=int, default=5,
                        help="demo messages per second published over relay (default 5)")
    parser.add_argument("--no-demo", action="store_true", help="do not start the demo publisher")
    parser.add_argument("--no-dashboard", action="store_true", help="do not start the ops dashboard")
    parser.add_argument("--store-only", action="store_true",
                        help="run only the store job (default: the store, subscriptions and filter jobs, "
                             "three Spark applications)")
    parser.add_argument("--with-filter", action="store_true", help=argparse.SUPPRESS)  # the default now
    args = parser.parse_args(argv)
    args.with_filter = not args.store_only
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        config = config_from_args(args)
        return run(config, args)
    except (ConfigError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def run(config: Config, args: argparse.Namespace) -> int:
    from tools.embedded_kafka import EmbeddedKafka, EmbeddedKafkaError
    from tools.processes import start_bridge, start_publisher

    broker = None
    jobs: dict[str, subprocess.Popen] = {}
    bridge = None
    publisher = None
    dashboard = None
    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logs = Path(config.path("warehouse.checkpoints")).parent
    logs.mkdir(parents=True, exist_ok=True)
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
        job_args = [a for item in args.overrides for a in ("--set", item)]
        if args.config:
            job_args += ["--config", args.config]
        for job in ["store"] + (["subscriptions", "filter"] if args.with_filter else []):
            log.info("starting the %s job (log: %s)", job, logs / f"{job}-job.log")
            jobs[job] = subprocess.Popen([str(REPO_ROOT / "spark-submit.sh"), job, *job_args],
                                         stdout=(logs / f"{job}-job.log").open("ab"), stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=REPO_ROOT)
        log.info("starting the bridge (log: %s)", logs / "bridge.log")
        # The REST API on (nwaku's default port 8645; a --set rest.* wins).
        bridge = start_bridge(["rest.enabled=true", *args.overrides], config_file=args.config,
                              log=(logs / "bridge.log").open("a"))
        for addr in bridge.addrs:
            log.info("bridge listening on %s", addr)
        rest = bridge.wait_rest_url()
        if rest:
            log.info("REST API on %s: curl %s/health; curl '%s/store/v3/messages?includeData=true&pageSize=5"
                     "&ascending=false'", rest, rest, rest)
        log.info("history: .venv/bin/waku-store query --peer %s --direction backward --limit 20", bridge.tcp_addr)
        if args.with_filter:
            log.info("filter: .venv/bin/waku-bridge filter --peer %s --content-topic <topic>", bridge.tcp_addr)
        if not args.no_dashboard:
            # Only the endpoints of the jobs started here are scraped.
            off = [] if args.with_filter else ["--set", "job_metrics.subscriptions_port=-1",
                                               "--set", "job_metrics.filter_port=-1"]
            dashboard = start_dashboard(job_args + off, logs / "dashboard.log")
            log.info("ops dashboard on http://%s:%s/ (log: %s)", _local(config.get("dashboard.host")),
                     config.get("dashboard.port"), logs / "dashboard.log")
        if not args.no_demo:
            log.info("starting a demo publisher: %d msg/s over relay to %s", args.demo_rate, bridge.tcp_addr)
            publisher = start_publisher(bridge.tcp_addr, rate=args.demo_rate, count=0, log=subprocess.DEVNULL)
        began = time.monotonic()
        last_report = 0.0
        while not stopping and (not args.duration or time.monotonic() - began < args.duration):
            for name, proc in [*((f"{j} job", p) for j, p in jobs.items()), ("bridge", bridge.proc)]:
                if proc.poll() is not None:
                    raise RuntimeError(f"the {name} exited with {proc.returncode}: see {logs}")
            if time.monotonic() - last_report >= 5:
                last_report = time.monotonic()
                count = stored_count(config)
                log.info("rows in the Delta store: %s", "table not created yet" if count is None else count)
            time.sleep(0.5)
        return 0
    finally:
        if dashboard is not None and dashboard.poll() is None:
            dashboard.terminate()
            dashboard.wait(10)
        if publisher is not None and publisher.poll() is None:
            publisher.terminate()
            publisher.wait(10)
        if bridge is not None:
            log.info("stopping the bridge (flushes its Kafka producer)")
            bridge.stop()
        for job, proc in jobs.items():
            if proc.poll() is None:
                log.info("stopping the %s job", job)
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        if broker is not None:
            log.info("stopping embedded Kafka")
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
