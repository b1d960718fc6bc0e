"""Run the pipeline locally: embedded Kafka (unless external servers are configured), the
pipeline's topics, the store, subscriptions and filter jobs through ./spark-submit.sh (only the
store job with --store-only), the ingest bridge (waku-bridge), a
small demo publisher that publishes over Waku relay to the bridge, and the ops dashboard
(tools/dashboard.py, http://127.0.0.1:8050/), printing what reaches the Delta store. Ctrl-C stops
everything cleanly.

    python -m tools.local_run [--duration SECONDS] [--demo-rate N] [--no-demo] [--no-dashboard] [--store-only]
                              [--topology local|cluster] [--cluster-dir DIR] [--set k=v]

`--topology cluster` runs the production topology on this machine instead (docs/deployment.md):
SeaweedFS's S3 gateway holding the tables and checkpoints (s3a://waku/...), a Kafka cluster of 3
KRaft brokers (replication 3, min.insync.replicas 2), a Spark standalone master and 2 workers
running the three streaming jobs, two bridges (B relays with A), the dashboard reading
job_metrics from S3. State and logs under --cluster-dir (var/cluster).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from core.config import REPO_ROOT, Config, ConfigError, add_config_arguments, config_from_args, load_config
from tools.processes import stop_processes

log = logging.getLogger("waku.local_run")


def topics(config: Config) -> dict[str, int]:
    t = config["topics"]
    return {t["messages"]: t["messages_partitions"], t["subscriptions"]: t["subscriptions_partitions"]}


class StoredCount:
    """Rows in the Delta `messages` table, read with the Rust Delta reader (no Spark). The table
    is opened once and brought up to date by its new commits; its rows are counted again only
    when it has a new version (a count reads every data file's footer). None: no table yet."""

    def __init__(self, config: Config) -> None:
        from core.settings import ObjectStoreSettings, is_s3

        self.path = config.table_path("messages")
        self.options = ObjectStoreSettings.from_config(config).storage_options() if is_s3(self.path) else None
        self._table: Any = None
        self._version: int | None = None
        self._count: int | None = None

    def __call__(self) -> int | None:
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError  # TableNotFoundError is one

        try:
            if self._table is None:
                self._table = DeltaTable(self.path, storage_options=self.options)
            else:
                self._table.update_incremental()
            version = self._table.version()
            if version != self._version:
                self._count, self._version = self._table.to_pyarrow_dataset().count_rows(), version
            return self._count
        except (DeltaError, OSError):
            self._table = self._version = self._count = None  # opened again next time
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
    parser.add_argument("--topology", choices=["local", "cluster"], default="local",
                        help="local: one broker, Spark in local mode, a local warehouse (default); cluster: "
                             "S3 server, 3 Kafka brokers, a Spark master and 2 workers, 2 bridges (docs/deployment.md)")
    parser.add_argument("--logs", help="--topology local: the jobs' and the bridge's logs (default: beside the "
                        "checkpoints; var/logs when they are on object storage)")
    parser.add_argument("--cluster-dir", default=str(REPO_ROOT / "var" / "cluster"),
                        help="--topology cluster: its state and logs (default var/cluster)")
    args = parser.parse_args(argv)
    args.with_filter = not args.store_only
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        if args.topology == "cluster":
            return run_cluster(args)
        config = config_from_args(args)
        return run(config, args)
    except (ConfigError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _stop_on_signals() -> threading.Event:
    """Set by SIGTERM or SIGINT (Ctrl-C): the run loop ends and everything is stopped in order."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    return stop


def spark_jobs(one_driver: bool) -> list[str]:
    """The Spark jobs of a full stack: the three live queries a driver each, or `live` (one
    driver: spark.one_driver)."""
    return ["live"] if one_driver else ["store", "subscriptions", "filter"]


def _submit(job: str, args: list[str], logs: Path) -> subprocess.Popen:
    """`./spark-submit.sh job args...` in its own process group, its output in logs/<job>-job.log."""
    return subprocess.Popen([str(REPO_ROOT / "spark-submit.sh"), job, *args],
                            stdout=(logs / f"{job}-job.log").open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=REPO_ROOT)


def _stop_jobs(jobs: dict[str, subprocess.Popen]) -> None:
    """SIGTERM to every running job's process group, then up to 60 s before SIGKILL."""
    for job, proc in jobs.items():
        if proc.poll() is None:
            log.info("stopping the %s job", job)
    stop_processes(jobs.values(), 60, group=True)


def _watch(config: Config, procs: dict[str, subprocess.Popen], logs: Path, stop: threading.Event,
           duration: float | None, began: float | None = None) -> None:
    """Until `stop` or `duration` s: a process that exits is an error; every 5 s the rows in the
    Delta store are logged (with `began`, also when the first ones arrived)."""
    run_began = time.monotonic()
    last_report, first_rows = 0.0, False
    stored_count = StoredCount(config)
    while not stop.is_set() and (not duration or time.monotonic() - run_began < duration):
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"the {name} exited with {proc.returncode}: see {logs}")
        if time.monotonic() - last_report >= 5:
            last_report = time.monotonic()
            count = stored_count()
            if count and not first_rows and began is not None:
                first_rows = True
                log.info("first rows in the Delta store %.0f s after the start", time.monotonic() - began)
            log.info("rows in the Delta store: %s", "table not created yet" if count is None else count)
        stop.wait(0.5)


def local_logs(config: Config, given: str | None) -> Path:
    """Where a local run's logs go: `given`, else beside the checkpoints, which on object storage
    (s3a://) are no directory of this machine: then var/logs."""
    from core.settings import is_s3

    if given:
        return Path(given)
    checkpoints = config.path("warehouse.checkpoints")
    return REPO_ROOT / "var" / "logs" if is_s3(checkpoints) else Path(checkpoints).parent


def run(config: Config, args: argparse.Namespace) -> int:
    from tools.embedded_kafka import EmbeddedKafka, EmbeddedKafkaError
    from tools.processes import start_bridge, start_publisher

    broker = None
    jobs: dict[str, subprocess.Popen] = {}
    bridge = None
    publisher = None
    dashboard = None
    stop = _stop_on_signals()
    logs = local_logs(config, args.logs)
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
        live = spark_jobs(bool(config.get("spark.one_driver")))
        for job in live if args.with_filter else ["store"]:
            log.info("starting the %s job (log: %s)", job, logs / f"{job}-job.log")
            jobs[job] = _submit(job, job_args, logs)
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
        _watch(config, {**{f"{j} job": p for j, p in jobs.items()}, "bridge": bridge.proc}, logs, stop,
               args.duration)
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
        _stop_jobs(jobs)
        if broker is not None:
            log.info("stopping embedded Kafka")
            broker.stop()


# -- --topology cluster -------------------------------------------------------------------------

CLUSTER_WORKERS = 2
# Task slots: store 1, subscriptions 1, filter one per partition of waku.messages (real-time mode).
CLUSTER_WORKER_CORES = 3
CLUSTER_WORKER_MEMORY = "2g"
EXECUTOR_MEMORY = "512m"


def cluster_job_args(job: str, master: str, config: Config) -> list[str]:
    """spark-submit options of a job on the standalone cluster: small executors, its share of
    the workers' cores, and no task before every executor asked for has registered (the filter
    job checks its real-time task slots at its start). Delta's snapshot state is rebuilt in as
    many partitions as the job has cores (at least 2), not Delta's 50: on one core each of the
    50 tasks generated its code again, minutes of a job's start on this machine."""
    cores = config["topics"]["messages_partitions"] if job == "filter" else 1
    return ["--master", master, "--executor-memory", EXECUTOR_MEMORY, "--total-executor-cores", str(cores),
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
            "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
            "--conf", f"spark.databricks.delta.snapshotPartitions={max(2, cores)}"]


def run_cluster(args: argparse.Namespace) -> int:
    """The production topology on this machine (docs/deployment.md); Ctrl-C stops it all."""
    from concurrent.futures import ThreadPoolExecutor

    from tools.kafka_cluster import KafkaCluster
    from tools.object_store import ObjectStoreError, SeaweedS3
    from tools.processes import BridgeProcess, start_bridge, start_publisher
    from tools.spark_cluster import StandaloneCluster

    stop = _stop_on_signals()
    root = Path(args.cluster_dir).resolve()
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        spark_cluster = StandaloneCluster(root / "spark", workers=CLUSTER_WORKERS, worker_cores=CLUSTER_WORKER_CORES,
                                          worker_memory=CLUSTER_WORKER_MEMORY)
        pool = stack.enter_context(ThreadPoolExecutor(1))
        spark_started = pool.submit(spark_cluster.start)  # its JVMs start beside S3's and Kafka's

        def stop_spark() -> None:
            with contextlib.suppress(Exception):
                spark_started.result()
            log.info("stopping the Spark cluster")
            spark_cluster.stop()
        stack.callback(stop_spark)
        s3 = SeaweedS3(root / "s3")
        try:
            s3.start()
        except ObjectStoreError as exc:
            raise RuntimeError(str(exc)) from None
        stack.callback(s3.stop)
        s3.create_bucket("waku")
        log.info("S3 (SeaweedFS) on %s, tables and checkpoints in s3a://waku/waku/ (%.0f s)", s3.endpoint,
                 time.monotonic() - began)
        kafka = KafkaCluster(root / "kafka", brokers=3)
        kafka.start()
        stack.callback(kafka.stop)
        cluster_sets = [*s3.overrides("waku"), f"kafka.bootstrap_servers={kafka.bootstrap_servers}"]
        sets = [*cluster_sets, *args.overrides]  # a --set of the command line wins
        config = load_config(sets, args.config)
        kafka.create_topics(topics(config))
        log.info("Kafka cluster of 3 brokers on %s (%.0f s)", kafka.bootstrap_servers, time.monotonic() - began)
        spark_started.result()
        log.info("Spark master %s with %d workers (web UI %s) (%.0f s)", spark_cluster.url, CLUSTER_WORKERS,
                 spark_cluster.webui, time.monotonic() - began)
        config_args = [a for item in sets for a in ("--set", item)] + (["--config", args.config] if args.config else [])
        jobs: dict[str, subprocess.Popen] = {}
        stack.callback(_stop_jobs, jobs)
        for job in ["store", "subscriptions", "filter"]:
            log.info("submitting the %s job to %s (log: %s)", job, spark_cluster.url, logs / f"{job}-job.log")
            jobs[job] = _submit(job, [*cluster_job_args(job, spark_cluster.url, config), *config_args], logs)
        bridges: dict[str, BridgeProcess] = {}
        b_metrics = config["bridge"]["metrics_port"] + 1
        for name, extra in (("a", []),
                            # B: its own ports (A's + 1, any TCP port), relaying with A: a message
                            # published to either reaches both
                            ("b", ["bridge.tcp_port=0", "bridge.ws_port=-1", f"bridge.metrics_port={b_metrics}",
                                   f"rest.port={config['rest']['port'] + 1}"])):
            if name == "b":
                extra.append(f"bridge.static_peers={bridges['a'].tcp_addr}")
            log.info("starting bridge %s (log: %s)", name.upper(), logs / f"bridge-{name}.log")
            key = root / f"bridge-{name}" / "key"
            bridge = start_bridge([*cluster_sets, "rest.enabled=true", *args.overrides, f"bridge.key_file={key}",
                                   *extra], config_file=args.config,
                                  log=(logs / f"bridge-{name}.log").open("a"), timeout=120)
            stack.callback(bridge.stop)
            bridges[name] = bridge
            log.info("bridge %s: %s; REST %s", name.upper(), bridge.tcp_addr, bridge.wait_rest_url())
        procs: list[subprocess.Popen] = []
        if not args.no_dashboard:
            dashboard = start_dashboard([*config_args, "--set", f"dashboard.targets=bridge_b=http://127.0.0.1:{b_metrics}"
                                         "/metrics"], logs / "dashboard.log")
            procs.append(dashboard)
            log.info("ops dashboard on http://%s:%s/ (log: %s)", _local(config.get("dashboard.host")),
                     config.get("dashboard.port"), logs / "dashboard.log")
        if not args.no_demo:
            log.info("starting a demo publisher: %d msg/s over relay to bridge A", args.demo_rate)
            procs.append(start_publisher(bridges["a"].tcp_addr, rate=args.demo_rate, count=0, log=subprocess.DEVNULL))

        def stop_procs() -> None:
            for proc in procs:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
        stack.callback(stop_procs)
        log.info("cluster topology started in %.0f s; history: .venv/bin/waku-store query --peer %s "
                 "--direction backward --limit 20", time.monotonic() - began, bridges["b"].tcp_addr)
        _watch(config, {**{f"{j} job": p for j, p in jobs.items()},
                        **{f"bridge {n.upper()}": b.proc for n, b in bridges.items()}}, logs, stop, args.duration,
               began=began)
        log.info("stopping the cluster topology")
    return 0


if __name__ == "__main__":
    sys.exit(main())
