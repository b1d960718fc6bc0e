"""The jobs on a Spark cluster (docs/cluster.md): submitted with ./spark-submit.sh to a standalone
cluster (a master and two workers of the pip-installed pyspark, tools/spark_cluster.py) and to
`local-cluster[2,1,1024]`, their tasks run in executor JVMs, not in the driver, and the store
table is the one local mode writes from the same Kafka records.

Proof that executors did the work: each cluster application writes a Spark event log; its
TaskEnd events name the executor of every task ("driver" in local mode), and on the standalone
cluster the master's JSON lists the application and the workers' work dirs hold one directory
per executor JVM they launched for it.

Cheap on purpose (2 cores, other jobs running): workers of 1 core and 1 GiB, executors of
512 MiB, a few hundred records, the store job in available-now mode, the streaming jobs stopped
after their first useful batch; every process is stopped in `finally`.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from core.config import REPO_ROOT
from core.kafka import ensure_topics
from core.records import decode_push, ingest_key, ingest_value, push_targets, subscription_event
from schemas import pipeline_records_pb2 as pr
from schemas import waku_message_pb2 as wm
from tests.conftest import BATCH_AT_EVERY_TRIGGER
from tools.loadgen import Generated, LoadGenerator, LoadProfile, produce
from tools.spark_cluster import StandaloneCluster

pytestmark = pytest.mark.integration

PUBSUB = "/waku/2/rs/0/1"
JOB_TIMEOUT_S = 420  # one spark-submit, start to finish, on a loaded 2-core machine
CLUSTER_CONF = {
    "spark.ui.enabled": "false",
    # Delta's snapshot state on 2 partitions, not 50: a few tasks per commit on 2 cores.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Schedule only once every executor registered (at most 30 s), so tasks spread over both.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.eventLog.compress": "false",
}


# -- helpers ---------------------------------------------------------------------------------


class Submitted:
    """One ./spark-submit.sh process (its own process group), its log and its event log dir."""

    def __init__(self, name: str, job: str, master: str, root: Path, sets: dict[str, str],
                 spark_args: tuple[str, ...] = (), job_args: tuple[str, ...] = ()) -> None:
        self.name = name
        self.events = root / "events" / name
        self.events.mkdir(parents=True)
        self.log_path = root / "logs" / f"{name}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = [str(REPO_ROOT / "spark-submit.sh"), job, "--master", master]
        if not master.startswith("local["):
            args += ["--executor-memory", "512m"]
            conf = {**CLUSTER_CONF, "spark.eventLog.enabled": "true", "spark.eventLog.dir": self.events.as_uri()}
        else:
            conf = {"spark.ui.enabled": "false"}
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        args += [*spark_args, *job_args]
        for key, value in sets.items():
            args += ["--set", f"{key}={value}"]
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env,
                                         start_new_session=True)
        self.began = time.monotonic()
        self.ended: float | None = None
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()

    @property
    def seconds(self) -> float:
        """From submission to exit (or to now while it runs)."""
        return (self.ended or time.monotonic()) - self.began

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def wait(self, timeout: float = JOB_TIMEOUT_S) -> None:
        """Wait for a batch run (available-now) to finish with 0."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"{self.name} did not finish in {timeout:.0f} s:\n{self.log_tail()}")
        assert rc == 0, f"{self.name} exited {rc}:\n{self.log_tail()}"

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM the submission (the driver stops its SparkContext: the application ends and
        its executors go), SIGKILL after `timeout`."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of its group left behind
        except ProcessLookupError:
            pass

    def work(self) -> tuple[str | None, dict[str, str], Counter]:
        """From the event log: (application id, executor id -> host of every executor added,
        tasks finished per executor id)."""
        app_id, executors, tasks = None, {}, Counter()
        # Spark 4 rolls event logs: eventlog_v2_<app id>/events_<n>_<app id> files.
        logs = [p for p in self.events.rglob("*") if p.is_file() and not p.name.startswith(("appstatus", "."))]
        for path in sorted(logs):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue  # the last line of a log still being written
                kind = ev.get("Event")
                if kind == "SparkListenerApplicationStart":
                    app_id = ev.get("App ID")
                elif kind == "SparkListenerExecutorAdded":
                    executors[ev["Executor ID"]] = ev["Executor Info"]["Host"]
                elif kind == "SparkListenerTaskEnd":
                    tasks[ev["Task Info"]["Executor ID"]] += 1
        return app_id, executors, tasks


def stored(warehouse: Path) -> set[tuple[bytes, bytes, float]]:
    """(message_hash, digest, received_time) of every row of Delta `messages`."""
    from deltalake import DeltaTable

    t = DeltaTable(str(warehouse / "messages")).to_pyarrow_table(columns=["message_hash", "digest", "received_time"])
    return set(zip(t.column("message_hash").to_pylist(), t.column("digest").to_pylist(),
                   t.column("received_time").to_pylist(), strict=True))


def rows_of(path: Path, columns: list[str]) -> list[dict]:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path)).to_pyarrow_table(columns=columns).to_pylist()
    except (TableNotFoundError, OSError):
        return []


def wait_for(what: str, check, timeout: float, jobs: list[Submitted]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in jobs:
            assert job.running(), f"{job.name} exited {job.proc.returncode}:\n{job.log_tail()}"
        result = check()
        if result:
            return result
        time.sleep(1.0)
    tails = "\n".join(f"--- {j.name}\n{j.log_tail(1500)}" for j in jobs)
    pytest.fail(f"no {what} within {timeout:.0f} s\n{tails}")


def assert_executors_did_the_work(job: Submitted, executors_expected: int) -> str:
    app_id, executors, tasks = job.work()
    assert app_id, f"{job.name}: no event log in {job.events}"
    assert executors_expected <= len(executors), f"{job.name}: executors {executors}"
    assert tasks, f"{job.name}: no task finished"
    assert "driver" not in tasks, f"{job.name}: tasks ran in the driver: {tasks}"
    assert set(tasks) <= set(executors), f"{job.name}: tasks {tasks}, executors {executors}"
    busy = [e for e, n in tasks.items() if n > 0]
    assert len(busy) >= executors_expected, f"{job.name}: tasks per executor {tasks}"
    return app_id


class ClusterStarter:
    """Starts the standalone cluster in a thread, so its JVMs come up while local mode runs."""

    def __init__(self, root: Path) -> None:
        self.cluster = StandaloneCluster(root, workers=2, worker_cores=1, worker_memory="1g")
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._start, daemon=True)
        self.thread.start()

    def _start(self) -> None:
        began = time.monotonic()
        try:
            self.cluster.start(timeout=240)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread, which reports it
            self.error = exc
        self.seconds = time.monotonic() - began

    def ready(self) -> StandaloneCluster:
        self.thread.join(300)
        if self.error is not None:
            raise self.error
        assert not self.thread.is_alive(), "the standalone cluster did not start in 300 s"
        return self.cluster


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    starter = ClusterStarter(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield starter
    finally:
        starter.thread.join(300)
        starter.cluster.stop()
        TIMINGS["standalone cluster start"] = starter.seconds


TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def report_timings():
    began = time.monotonic()
    yield
    TIMINGS["module"] = time.monotonic() - began
    print("\ncluster timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in TIMINGS.items()))


class StoreRuns:
    """The store job's input in Kafka, and its local-mode (reference) and local-cluster runs,
    started at once in the background: they need no standalone cluster, so they overlap with
    the cluster's start and the subscriptions and filter test."""

    def __init__(self, root: Path, kafka: str) -> None:
        self.root, self.kafka = root, kafka
        self.topic = f"waku.messages.{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka, {self.topic: 2})
        self.gen = LoadGenerator(LoadProfile(content_topics=20, duplicate_share=0.1, ephemeral_share=0.05,
                                             invalid_share=0.05, seed=13))
        produce(kafka, self.topic, self.gen.batch(300))
        self.jobs: list[Submitted] = []
        self.local = self.submit("local", "local[1]")
        self.local_cluster = self.submit("local-cluster", "local-cluster[2,1,1024]")

    def sets(self, name: str) -> dict[str, str]:
        return {"kafka.bootstrap_servers": self.kafka, "topics.messages": self.topic,
                "warehouse.root": str(self.root / name / "wh"), "warehouse.checkpoints": str(self.root / name / "cp"),
                "spark.shuffle_partitions": "2", "job_metrics.store_port": "-1"}

    def submit(self, name: str, master: str) -> Submitted:
        job = Submitted(f"store-{name}", "store", master, self.root, self.sets(name), job_args=("--available-now",))
        self.jobs.append(job)
        return job

    def stop(self) -> None:
        for job in self.jobs:
            job.stop()
            TIMINGS[job.name] = job.seconds


@pytest.fixture(scope="module")
def store_runs(standalone, kafka, tmp_path_factory):
    runs = StoreRuns(tmp_path_factory.mktemp("store"), kafka)
    try:
        yield runs
    finally:
        runs.stop()


# -- tests -----------------------------------------------------------------------------------


def test_subscriptions_and_filter_jobs_on_the_standalone_cluster(standalone, store_runs, kafka, tmp_path):
    """(store_runs: requested here so the store job's local runs go on meanwhile.)"""
    cluster = standalone.ready()
    uid = uuid.uuid4().hex[:8]
    messages, subscriptions, bridge = f"waku.messages.{uid}", f"waku.subscriptions.{uid}", "B1"
    prefix = f"waku.push.{uid}."
    ensure_topics(kafka, {messages: 2, subscriptions: 2, prefix + bridge: 1})
    sets = {"kafka.bootstrap_servers": kafka, "topics.messages": messages, "topics.subscriptions": subscriptions,
            "topics.push_prefix": prefix, "warehouse.root": str(tmp_path / "wh"),
            "warehouse.checkpoints": str(tmp_path / "cp"), "spark.shuffle_partitions": "2",
            "filter.starting_offsets": "earliest", "filter.trigger_seconds": "1.0",
            # one core per application here; real-time mode needs one per messages partition
            "filter.trigger": "microbatch",
            "filter.subscriptions_trigger_seconds": "1.0", "filter.subscription_ttl_s": "3600",
            # the test waits for the table
            **dict(item.split("=", 1) for item in BATCH_AT_EVERY_TRIGGER),
            "job_metrics.subscriptions_port": "-1", "job_metrics.filter_port": "-1"}
    content_topic = f"/cluster-test/1/{uid}/proto"
    jobs: list[Submitted] = []
    try:
        # One core each: both applications run at once, an executor on each worker.
        one_core = ("--total-executor-cores", "1")
        subs = Submitted("subscriptions-standalone", "subscriptions", cluster.url, tmp_path, sets, spark_args=one_core)
        jobs.append(subs)
        filt = Submitted("filter-standalone", "filter", cluster.url, tmp_path, sets, spark_args=one_core)
        jobs.append(filt)
        key, value = subscription_event("peerA", bridge, pr.SUBSCRIBE, time.time(), PUBSUB, [content_topic],
                                        request_id="r1", protocol="v2")
        produce(kafka, subscriptions, [Generated(key, value)])
        rows = wait_for("subscription row", lambda: rows_of(tmp_path / "wh" / "subscriptions",
                                                             ["peer_id", "content_topic"]), JOB_TIMEOUT_S, jobs)
        assert rows == [{"peer_id": "peerA", "content_topic": content_topic}]
        TIMINGS["subscriptions: first row"] = subs.seconds

        # The message goes in once the subscription is in Delta: the filter's next batch matches it.
        msg = wm.WakuMessage(payload=b"on a cluster", content_topic=content_topic, timestamp=time.time_ns())
        produce(kafka, messages, [Generated(ingest_key(PUBSUB, msg),
                                            ingest_value(PUBSUB, msg.SerializeToString(), time.time(), bridge))])
        push = wait_for("push record", lambda: _first_record(kafka, prefix + bridge), JOB_TIMEOUT_S, jobs)
        TIMINGS["filter: first push"] = filt.seconds
        record = decode_push(push)
        assert record is not None
        assert [peer for peer, _, _ in push_targets(record)] == ["peerA"]
        assert (record.pubsub_topic, record.message_hash) == (PUBSUB, ingest_key(PUBSUB, msg))
        assert record.message == msg
        active = {a["name"]: a for a in cluster.state().get("activeapps", [])}
        assert {"waku-subscriptions", "waku-filter"} <= set(active), active
    finally:
        for job in jobs:
            job.stop()
    for job in jobs:
        assert_executors_did_the_work(job, 1)


def test_store_job_on_standalone_and_local_cluster_writes_the_local_table(standalone, store_runs):
    store_runs.local.wait()
    store_runs.local_cluster.wait()
    cluster = standalone.ready()
    sa = store_runs.submit("standalone", cluster.url)
    sa.wait()
    lc = store_runs.local_cluster

    # Executors in their own JVMs ran the tasks, and the standalone cluster saw the application.
    assert_executors_did_the_work(lc, 2)
    app_id = assert_executors_did_the_work(sa, 2)
    state = cluster.state()
    apps = {a["id"]: a for a in state.get("completedapps", []) + state.get("activeapps", [])}
    assert app_id in apps and apps[app_id]["name"] == "waku-store", apps
    executor_dirs = cluster.executor_dirs(app_id)
    assert len(executor_dirs) == 2, executor_dirs
    assert {d.parent.parent.parent.name for d in executor_dirs} == {"worker-0", "worker-1"}, executor_dirs
    for d in executor_dirs:  # each executor JVM's own log: it ran tasks
        assert "Finished task" in (d / "stderr").read_text(errors="replace"), d

    # The same Kafka records give the same table in every mode.
    reference = stored(store_runs.root / "local" / "wh")
    assert {row[0] for row in reference} == set(store_runs.gen.truth.stored)
    assert stored(store_runs.root / "standalone" / "wh") == reference
    assert stored(store_runs.root / "local-cluster" / "wh") == reference


def _first_record(bootstrap: str, topic: str) -> bytes | None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        for record in consumer:
            return record.value
        return None
    finally:
        consumer.close()
