"""Fault injection: kill -9 every component under load, restart it, and count what was lost.

    .venv/bin/python tests/benchmarks/faults.py [--topology local|cluster] [--quick] [--seed N] [--rounds R]
                                                [--keep DIR]

Everything runs as its own process on loopback, from a temporary directory (--topology local,
the default):
  - an embedded Kafka broker (one broker: its log survives a kill -9 of the process in the page
    cache; replication is what protects against a machine's loss, see docs/reliability.md);
  - the store, subscriptions and filter Spark jobs through ./spark-submit.sh (local[1] each);
  - bridge A (`waku-bridge run`: relay, lightpush, filter service) and bridge B, the store
    service (`waku-bridge run` with only the store service serving queries);
  - load, each in its own process: a relay publisher (steady rate to A), a lightpush client
    (one stream per request, as the reference clients; a request not answered 200 is retried
    with the same message, up to 5 times), filter subscribers (own peer ids, subscribed to the
    load's content topic and one topic each that they unsubscribe and subscribe again, pinging
    every 2 s and subscribing again when a ping says the subscription is gone), and a store
    walker that follows cursors over the load's topic on B again and again.

--topology cluster is the production topology (docs/deployment.md): SeaweedFS's S3 gateway holds
the tables and checkpoints (s3a://), Kafka is a cluster of 3 KRaft nodes (topics with replication
3 and min.insync.replicas 2: the [kafka] settings' automatic values with several bootstrap
servers), the jobs are submitted to a Spark standalone master with 2 workers (client deploy mode:
a job's driver is its spark-submit process), bridge A and the store service B read and write the
same S3 warehouse; the same load.

After a warm-up, faults hit in turn (local: broker, store job, subscriptions job, filter job,
bridge A, store service B; cluster: the Kafka node leading waku.messages-0, a Spark worker with
its executors, the S3 server, then the same five), each at a random moment of its slot: kill -9
of the process group, a pause, a restart with the same data, checkpoints, keys and ports. A
component that dies by itself is restarted too and reported (`unplanned_restarts`). Each fault's
record says what kept going while it was down (`kept_going`) and when each progress counter
(store and subscriptions commits, relay publishes, lightpush acks, pushes, store walks) first
moved after the restart, in seconds from the kill (`recovered_s`); with --topology cluster the
next fault waits until the counters that fault stops have moved again (RECOVERS). At the end the
load stops and the checks run:

  accepted   distinct messages the bridge acknowledged: every message in Kafka (acks=all) plus
             every lightpush answered 200 (those must be in Kafka too: `lost_in_kafka`)
  stored     of those, how many are in the Delta `messages` table
  lost       accepted - stored (after waiting for the store job to catch up); must be 0
  duplicated rows in `messages` beyond one per message hash; must be 0
  push_duplicates  pushes a subscriber received more than once (filter is best effort: counted)
  subscriptions_match  the Delta `subscriptions` rows of bridge A equal the criteria its last
             answers gave the subscribers
  walks_inexact  store walks with a message twice or fewer messages than an earlier walk;
             final_walk_exact: a last walk through B equals the Delta rows in (receivedTime,
             digest) order

The last line is JSON. Exit status 0 when lost = duplicated = 0, subscriptions match and the
final walk is exact; 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tools.processes import free_port, stop_processes  # noqa: E402 - run as a script: the repository joins sys.path first

CT = "/faults/1/load/proto"
BUCKET = "waku"
KAFKA_NODES = 3
SPARK_WORKERS = 2
# Task slots a worker offers: store 1, subscriptions 1, filter one per partition of waku.messages
# (2 here), so either worker alone can take every executor when the other dies.
SPARK_WORKER_CORES = 4
PUBSUB = "/waku/2/default-waku/proto"
# --quick (CI's run): the jobs' JVMs (drivers and executors) compile with C1 only. In a run of
# minutes on two cores C2's compiling was start-up CPU that never paid back (cluster: ~190 of
# the executors' ~440 CPU-s in their compiler threads). The full run keeps the shipped JVM
# options. The code cache as large as with C2 (C1 alone defaults to 48 MB). The drivers' options
# add to conf/spark-defaults.conf's, as `tools.submit.driver_java_options` does.
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def quick_spark_options() -> str:
    from core.spark_conf import spark_defaults

    driver = f"{spark_defaults().get('spark.driver.extraJavaOptions', '')} {C1_ONLY}".strip()
    return f"spark.executor.extraJavaOptions={C1_ONLY},spark.driver.extraJavaOptions={driver}"
ROLES = ("relay", "lightpush", "subscribers", "walker")


def log(msg: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Load roles (each its own process: `faults.py --role NAME --spec JSON`)
# ---------------------------------------------------------------------------------------------

def _stop_event():
    import trio

    stop = trio.Event()

    async def on_signals() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                stop.set()
                return

    return stop, on_signals


def role_relay(spec: dict) -> None:
    """Publish over relay to bridge A at spec['rate'] msg/s; after losing A, dial it again."""
    import trio

    from core.message import hash_of
    from ingest.publisher import Publisher
    from ingest.settings import parse_peer
    from schemas.waku_message_pb2 import WakuMessage

    out = open(spec["out"], "a", buffering=1)
    stop, on_signals = _stop_event()

    async def main() -> None:
        pub = Publisher()
        async with pub.running([PUBSUB]), trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            seq, interval, nxt = 0, 1.0 / spec["rate"], trio.current_time()
            info = parse_peer(spec["peer"])
            while not stop.is_set():
                if not pub.host.get_network().connections.get(info.peer_id) or not pub.router.mesh.get(PUBSUB):
                    try:
                        await pub.connect(info, timeout=5)
                        await pub.wait_for_mesh(PUBSUB, timeout=5)
                    except Exception:  # noqa: BLE001 - A is down: try again
                        await trio.sleep(0.5)
                        nxt = trio.current_time()
                        continue
                msg = WakuMessage(payload=b"relay-%d-%s" % (seq, os.urandom(6).hex().encode()),
                                  content_topic=CT, timestamp=time.time_ns())
                try:
                    await pub.publish(msg, PUBSUB)
                    out.write(hash_of(PUBSUB, msg).hex() + "\n")
                    seq += 1
                except Exception:  # noqa: BLE001 - A down or its stream reset: the load goes on
                    await trio.sleep(0.2)
                nxt += interval
                await trio.sleep(max(0.0, nxt - trio.current_time()))
            nursery.cancel_scope.cancel()

    trio.run(main)


def role_lightpush(spec: dict) -> None:
    """Lightpush v3 at spec['rate'] requests/s, one stream per request; acked hashes to spec['out']
    (one line each: hash, attempts), given up ones to spec['out'] + '.failed'."""
    import trio
    from libp2p.custom_types import TProtocol

    from core.message import hash_of
    from ingest.framing import FrameReader, frame
    from ingest.host import dial
    from ingest.lightpush import codec
    from ingest.publisher import Publisher
    from ingest.settings import parse_peer
    from schemas import lightpush_pb2 as lp
    from schemas.waku_message_pb2 import WakuMessage

    out = open(spec["out"], "a", buffering=1)
    failed = open(spec["out"] + ".failed", "a", buffering=1)
    stop, on_signals = _stop_event()
    info = parse_peer(spec["peer"])

    async def push(host, msg, rid: str) -> int | None:
        try:
            with trio.fail_after(15):
                if not host.get_network().connections.get(info.peer_id):
                    await dial(host, info, 15)
                stream = await host.new_stream(info.peer_id, [TProtocol(codec.LIGHTPUSH_V3_CODEC)])
                try:
                    await stream.write(frame(codec.v3_request(rid, msg, PUBSUB)))
                    data = await FrameReader(stream, 1 << 20).read_frame()
                finally:
                    try:
                        await stream.close()
                    except Exception:  # noqa: BLE001 - closing a stream the fault may have broken
                        pass
            return None if data is None else lp.LightpushResponse.FromString(data).status_code
        except Exception:  # noqa: BLE001 - A down, stream reset, timeout
            return None

    async def main() -> None:
        client = Publisher()  # a host (relay unused): lightpush needs only streams
        async with client.running([]), trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            seq, interval, nxt = 0, 1.0 / spec["rate"], trio.current_time()
            while not stop.is_set():
                msg = WakuMessage(payload=b"lightpush-%d-%s" % (seq, os.urandom(6).hex().encode()),
                                  content_topic=CT, timestamp=time.time_ns())
                seq += 1
                h = hash_of(PUBSUB, msg).hex()
                for attempt in range(1, 6):
                    status = await push(client.host, msg, f"{seq}-{attempt}")
                    if status == 200:
                        out.write(f"{h} {attempt}\n")
                        break
                    await trio.sleep(0.5 * attempt)
                else:
                    failed.write(h + "\n")
                nxt = max(nxt + interval, trio.current_time() - 1.0)
                await trio.sleep(max(0.0, nxt - trio.current_time()))
            nursery.cancel_scope.cancel()

    trio.run(main)


def role_subscribers(spec: dict) -> None:
    """spec['count'] filter clients on bridge A. Pushes to spec['out'] ("client hash" lines);
    each client's criteria after its last answered request to spec['state'] at the end."""
    import trio

    from core.message import hash_of
    from ingest.filter.client import FilterClient

    out = open(spec["out"], "a", buffering=1)
    stop, on_signals = _stop_event()
    frozen = trio.Event()
    rng = random.Random(spec["seed"])
    clients: list[FilterClient] = []
    stats = {"resubscribed": 0, "request_errors": 0}
    error_kinds: dict[str, int] = {}

    def note_error(exc: BaseException, where: str) -> None:
        stats["request_errors"] += 1
        kind = f"{where}: {type(exc).__name__}: {str(exc)[:120]}"
        error_kinds[kind] = error_kinds.get(kind, 0) + 1
        if error_kinds[kind] == 1:
            print(f"subscribers: {kind}", file=sys.stderr, flush=True)

    async def drop_connection(c: FilterClient) -> None:
        if c.service is not None:
            try:
                with trio.move_on_after(5):
                    await c.host.disconnect(c.service)
            except Exception:  # noqa: BLE001 - the connection may be broken already
                pass
            c.forget_closed(c.service)  # a half-closed connection must not be reused

    async def ensure(c: FilterClient, topics: set[str]) -> None:
        """Subscribed to exactly `topics` as far as A's answers go (retries until it is)."""
        while not stop.is_set():
            try:
                if c.service is None or not c.host.get_network().connections.get(c.service):
                    await c.connect(spec["peer"], timeout=5)
                r = await c.ping(timeout=5)
                if r is not None and r.status_code == 404 and c.criteria:  # A forgot us (restart)
                    stats["resubscribed"] += 1
                    c.criteria.clear()
                have = {ct for (_, ct) in c.criteria}
                if have - topics:
                    r = await c.unsubscribe(PUBSUB, sorted(have - topics))
                    if r.status_code == 404:  # A lost them (restart): nothing to undo there
                        for ct in have - topics:
                            c.criteria.pop((PUBSUB, ct), None)
                if topics - {ct for (_, ct) in c.criteria}:
                    await c.subscribe(PUBSUB, sorted(topics))
                if {ct for (_, ct) in c.criteria} == topics:
                    return
            except Exception as exc:  # noqa: BLE001 - A down or restarting: dial it again
                note_error(exc, "ensure")
                await drop_connection(c)
            await trio.sleep(0.5)

    async def run_client(i: int, c: FilterClient) -> None:
        extra = f"/faults/1/extra-{i}/proto"
        want = {CT, extra}
        async with c.running():
            await ensure(c, want)
            async with trio.open_nursery() as nursery:
                async def read_pushes() -> None:
                    async for p in c.pushes():
                        out.write(f"{i} {hash_of(p.pubsub_topic or PUBSUB, p.message).hex()}\n")
                nursery.start_soon(read_pushes)
                while not stop.is_set():
                    await trio.sleep(2.0)
                    if stop.is_set():
                        break
                    if rng.random() < 0.2 and not frozen.is_set():  # change the extra topic
                        want = {CT} if extra in want else {CT, extra}
                        await ensure(c, want)
                        continue
                    try:
                        r = await c.ping(timeout=5)
                        if r is not None and r.status_code != 200:
                            stats["resubscribed"] += 1
                            c.criteria.clear()
                            await ensure(c, want)
                    except Exception as exc:  # noqa: BLE001 - A down or restarting: dial it again
                        note_error(exc, "ping")
                        await drop_connection(c)
                        await ensure(c, want)
                nursery.cancel_scope.cancel()

    def write_state() -> None:
        state = {"clients": [{"peer": c.peer_id.to_base58(), "criteria": sorted(ct for (_, ct) in c.criteria)}
                             for c in clients], **stats, "error_kinds": error_kinds}
        tmp_state = Path(spec["state"] + ".tmp")
        tmp_state.write_text(json.dumps(state))
        tmp_state.replace(spec["state"])

    async def on_freeze() -> None:
        """SIGUSR1: stop changing subscriptions but stay subscribed, keep pinging and reading
        pushes (a client that left would be expired by A as unreachable, which is A's right,
        and the table compared would not be what A answered these clients); the state file is
        written now and every second after."""
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                frozen.set()
                break
        while True:
            write_state()
            await trio.sleep(1.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            nursery.start_soon(on_freeze)
            for i in range(spec["count"]):
                c = FilterClient()
                clients.append(c)
                nursery.start_soon(run_client, i, c)
            await stop.wait()
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
        write_state()

    trio.run(main)


def role_walker(spec: dict) -> None:
    """Follow cursors over CT on store service B, again and again; one JSON line per walk."""
    import trio

    from core.message import hash_of
    from core.store_page import StoreQuery
    from ingest.store.client import StoreClient

    out = open(spec["out"], "a", buffering=1)
    stop, on_signals = _stop_event()

    async def walk(client: StoreClient, peer) -> list[str]:
        query, hashes = StoreQuery(pubsub_topic=PUBSUB, content_topics=(CT,), page_size=100), []
        for _ in range(100_000):
            page = await client.query(peer, query)
            hashes += [hash_of(PUBSUB, m).hex() for m in page.waku_messages]
            if page.cursor is None:
                return hashes
            query = query.with_cursor(page.cursor)
        raise RuntimeError("walk did not end")

    async def main() -> None:
        async with StoreClient.running(timeout=15) as client, trio.open_nursery() as nursery:
            nursery.start_soon(on_signals)
            best = 0
            while not stop.is_set():
                try:
                    with trio.fail_after(60):
                        peer = await client.connect(spec["peer"])
                        hashes = await walk(client, peer)
                    dup = len(hashes) - len(set(hashes))
                    shrunk = len(hashes) < best
                    best = max(best, len(hashes))
                    out.write(json.dumps({"rows": len(hashes), "duplicates": dup, "shrunk": shrunk}) + "\n")
                    if spec.get("final"):
                        Path(spec["final"]).write_text("\n".join(hashes))
                        break
                except Exception as exc:  # noqa: BLE001 - B down or restarting
                    out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:200]}) + "\n")
                    if spec.get("final"):
                        await trio.sleep(1.0)
                        continue
                await trio.sleep(spec.get("pause", 1.0))
            nursery.cancel_scope.cancel()

    trio.run(main)


# ---------------------------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------------------------

@dataclass
class Component:
    """A supervised child: `start()` returns its process; kill -9 hits its process group."""
    name: str
    start: Callable[[], Any]
    proc: Any = None
    planned_kill: bool = False
    unplanned: int = 0
    kills: int = 0

    @property
    def pid(self) -> int | None:
        p = self.proc
        return None if p is None else (p.pid if hasattr(p, "pid") else None)

    def launch(self) -> None:
        self.proc = self.start()
        self.planned_kill = False

    def kill9(self) -> None:
        pid = self.pid
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(30)
            except Exception:  # noqa: BLE001 - killed with SIGKILL: its exit is not waited for further
                pass
        self.kills += 1
        self.planned_kill = True

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None


@dataclass
class Run:
    tmp: Path
    seed: int
    quick: bool
    topology: str = "local"
    kafka_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    a_port: int = field(default_factory=free_port)
    b_port: int = field(default_factory=free_port)
    a_metrics: int = field(default_factory=free_port)
    components: dict[str, Component] = field(default_factory=dict)
    loads: dict[str, subprocess.Popen] = field(default_factory=dict)
    broker: Any = None
    # --topology cluster: the S3 server (tools.object_store.SeaweedS3), the Kafka cluster
    # (tools.kafka_cluster.KafkaCluster) and the Spark standalone cluster (tools.spark_cluster)
    s3: Any = None
    kafka: Any = None
    spark: Any = None
    progress: Any = None  # Progress, once the faults begin

    @property
    def cluster(self) -> bool:
        return self.topology == "cluster"

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap_servers if self.kafka is not None else f"127.0.0.1:{self.kafka_port}"

    def warehouse_overrides(self) -> list[str]:
        if self.cluster:
            return self.s3.overrides(BUCKET)  # tables and checkpoints on s3a://
        return [f"warehouse.root={self.tmp / 'warehouse'}", f"warehouse.checkpoints={self.tmp / 'checkpoints'}"]

    def table(self, name: str) -> str:
        return f"s3a://{BUCKET}/waku/warehouse/{name}" if self.cluster else str(self.tmp / "warehouse" / name)

    def checkpoint(self, job: str) -> str:
        return f"s3a://{BUCKET}/waku/checkpoints/{job}" if self.cluster else str(self.tmp / "checkpoints" / job)

    def storage_options(self) -> dict[str, str] | None:
        return self.s3.settings.storage_options() if self.cluster else None

    def _fs(self, uri: str) -> tuple[Any, str]:
        """Arrow's file system of a warehouse location, and the path in it."""
        from pyarrow import fs

        if uri.startswith("s3a://"):
            # short timeouts: the S3 server may be the component that is down
            return self.s3.settings.arrow_filesystem(connect_timeout=2, request_timeout=5), uri.split("://", 1)[1]
        return fs.LocalFileSystem(), uri

    def list_names(self, uri: str) -> list[str]:
        """The names in a directory of the warehouse (none when it does not exist)."""
        from pyarrow import fs

        filesystem, path = self._fs(uri)
        try:
            infos = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return [i.base_name for i in infos]

    def read_text(self, uri: str) -> str:
        filesystem, path = self._fs(uri)
        with filesystem.open_input_stream(path) as f:
            return f.read().decode()

    def overrides(self) -> list[str]:
        return [
            f"kafka.bootstrap_servers={self.bootstrap}",
            *self.warehouse_overrides(),
            f"spark.master={self.spark.url if self.cluster else 'local[1]'}", "spark.shuffle_partitions=2",
            "store.trigger_seconds=1.0", "filter.subscriptions_trigger_seconds=0.5",
            "topics.messages_partitions=2", "topics.subscriptions_partitions=2", "topics.push_partitions=1",
            # the jobs' Prometheus endpoints on free ports (not the defaults another run may hold)
            "job_metrics.store_port=0", "job_metrics.subscriptions_port=0", "job_metrics.filter_port=0",
            # the real-time warm-up only shortens the first epoch boundary's stall (latency, not
            # what this run checks); it would add ~11 s to each filter job start
            "filter.realtime_warm_up_epochs=0",
            # likewise the subscriptions job's warm-up (a throw-away MERGE: minutes of the
            # cluster's start on two cores), and its batches wait at most 15 s for 1,000 events
            # (not 120: the end of the run waits for the last events to be applied)
            "filter.subscriptions_warm_up=false", "filter.subscriptions_max_trigger_delay_s=15",
            # the store job's batches at this run's rates (20-50 msg/s) every 10 s, not 30: each
            # check of the store after a fault waits for the next batch
            "store.max_trigger_delay_s=10",
        ] + ([f"spark.options={quick_spark_options()}"] if self.quick else [])

    def bridge_overrides(self, name: str, port: int) -> list[str]:
        common = self.overrides() + [
            f"bridge.key_file={self.tmp / name / 'key'}", "bridge.listen_host=127.0.0.1",
            f"bridge.tcp_port={port}", "bridge.ws_port=-1", f"bridge.pubsub_topics={PUBSUB}",
            "bridge.producer_delivery_timeout_s=120", "bridge.backpressure_timeout_s=30",
        ]
        if name == "bridge":
            return common + [f"bridge.metrics_port={self.a_metrics}", "store_service.enabled=false",
                             "filter.enabled=true", "bridge.lightpush_per_peer_per_s=1000",
                             "filter.push_rate_per_peer=1000", "filter.push_burst_per_peer=1000",
                             "filter.max_requests_per_peer_per_minute=1000"]
        return common + ["bridge.metrics_port=-1", "store_service.enabled=true", "store_service.refresh_interval_s=1.0",
                         "filter.enabled=false", "bridge.lightpush_enabled=false",
                         "store_service.max_queries_per_peer_per_s=1000"]

    # -- components ------------------------------------------------------------------------

    def start_broker(self) -> Any:
        from tools.embedded_kafka import EmbeddedKafka

        self.broker = EmbeddedKafka(data_dir=self.tmp / "kafka", port=self.kafka_port,
                                    controller_port=self.controller_port, jar_dir=REPO_ROOT / ".cache/jars/kafka")
        self.broker.start()
        return self.broker._proc

    def start_job(self, job: str) -> subprocess.Popen:
        args = [a for item in self.overrides() for a in ("--set", item)]
        if self.cluster:  # submitted to the standalone master; the driver is this spark-submit
            from core.config import load_config
            from tools.local_run import cluster_job_args

            args = cluster_job_args(job, self.spark.url, load_config(self.overrides())) + args
        logf = (self.tmp / "logs" / f"{job}.log").open("ab")
        return subprocess.Popen([str(REPO_ROOT / "spark-submit.sh"), job, *args], stdout=logf,
                                stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True)

    def start_bridge(self, name: str) -> subprocess.Popen:
        from tools.processes import start_bridge

        port = self.a_port if name == "bridge" else self.b_port
        logf = (self.tmp / "logs" / f"{name}.log").open("a")
        bridge = start_bridge(self.bridge_overrides(name, port), log=logf, timeout=120)
        addr = bridge.tcp_addr
        setattr(self, f"{name}_addr", addr.replace("0.0.0.0", "127.0.0.1"))
        return bridge.proc

    def restart_kafka_node(self, i: int) -> Any:
        self.kafka.restart(i)
        return self.kafka.nodes[i]._proc

    def restart_s3(self) -> Any:
        self.s3.start()  # the same port, internal ports and data dir
        return self.s3.proc

    def start_load(self, role: str, spec: dict) -> None:
        logf = (self.tmp / "logs" / f"{role}.log").open("ab")
        self.loads[role] = subprocess.Popen(
            [sys.executable, __file__, "--role", role, "--spec", json.dumps(spec)],
            stdout=logf, stderr=subprocess.STDOUT, cwd=REPO_ROOT, start_new_session=True)

    def supervise(self) -> None:
        """Restart anything that died by itself (a supervisor's job: systemd, Kubernetes); follow
        the recovery of the faults so far."""
        if self.progress is not None:
            self.progress.track()
        for c in self.components.values():
            if c.exited() and not c.planned_kill:
                c.unplanned += 1
                log(f"{c.name} exited by itself with {c.proc.returncode}: restarting")
                c.launch()


def setup_cluster(run: Run) -> dict[str, Component]:
    """The S3 server, the 3-node Kafka cluster (topics: replication 3, min.insync.replicas 2) and
    the Spark master with 2 workers (started beside the other two), each node a component."""
    from concurrent.futures import ThreadPoolExecutor

    from tools.kafka_cluster import KafkaCluster
    from tools.object_store import SeaweedS3
    from tools.spark_cluster import StandaloneCluster

    run.spark = StandaloneCluster(run.tmp / "spark", workers=SPARK_WORKERS, worker_cores=SPARK_WORKER_CORES,
                                  worker_memory="2g")
    with ThreadPoolExecutor(1) as pool:
        spark_started = pool.submit(run.spark.start)
        run.s3 = SeaweedS3(run.tmp / "s3")
        (run.tmp / "s3").mkdir(parents=True, exist_ok=True)
        run.s3.start()
        run.s3.create_bucket(BUCKET)
        run.kafka = KafkaCluster(run.tmp / "kafka", brokers=KAFKA_NODES)
        run.kafka.start()
        run.kafka.create_topics({"waku.messages": 2, "waku.subscriptions": 2})
        spark_started.result()
    log(f"S3 on {run.s3.endpoint}, Kafka on {run.bootstrap}, Spark master {run.spark.url}")
    comps: dict[str, Component] = {}
    for i in range(KAFKA_NODES):
        comps[f"kafka node {i}"] = Component(f"kafka node {i}", partial(run.restart_kafka_node, i),
                                             proc=run.kafka.nodes[i]._proc)
    for i in range(SPARK_WORKERS):
        comps[f"spark worker {i}"] = Component(f"spark worker {i}", partial(run.spark.restart_worker, i),
                                               proc=run.spark._procs[f"worker-{i}"])
    comps["s3"] = Component("s3", run.restart_s3, proc=run.s3.proc)
    return comps


def setup_components(run: Run) -> None:
    for d in ("logs", "bridge", "store-service"):
        (run.tmp / d).mkdir(parents=True, exist_ok=True)
    comps = setup_cluster(run) if run.cluster else {"kafka": Component("kafka", run.start_broker)}
    comps |= {
        "store job": Component("store job", lambda: run.start_job("store")),
        "subscriptions job": Component("subscriptions job", lambda: run.start_job("subscriptions")),
        "filter job": Component("filter job", lambda: run.start_job("filter")),
        "bridge": Component("bridge", lambda: run.start_bridge("bridge")),
        "store service": Component("store service", lambda: run.start_bridge("store-service")),
    }
    run.components = comps
    if not run.cluster:
        comps["kafka"].launch()
        from core.kafka import ensure_topics

        ensure_topics(run.bootstrap, {"waku.messages": 2, "waku.subscriptions": 2})
    for name in ("store job", "subscriptions job", "filter job", "bridge", "store service"):
        comps[name].launch()


def delta_rows(path: Path | str, columns: list[str], storage_options: dict[str, str] | None = None
               ) -> list[dict] | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        return DeltaTable(str(path), storage_options=storage_options).to_pyarrow_table(columns=columns).to_pylist()
    except (TableNotFoundError, OSError):
        return None
    except DeltaError:  # an object store that does not answer (the S3 server is down)
        if storage_options is None:
            raise
        return None


def wait_until(what: str, check: Callable[[], bool], timeout: float, run: Run,
               progress: Callable[[], object] | None = None, cap: float = 1800.0) -> bool:
    """Until `check()`; gives up after `timeout` s, or, with `progress`, after `timeout` s in
    which its value did not change (at most `cap` s in all): a busy machine is waited for."""
    now = time.monotonic()
    deadline, hard, seen = now + timeout, now + cap, None
    while time.monotonic() < min(deadline, hard):
        run.supervise()
        if progress is not None:
            try:
                value = progress()
            except Exception:  # noqa: BLE001 - e.g. a file being replaced: no progress seen
                value = seen
            if value != seen:
                seen, deadline = value, time.monotonic() + timeout
        try:
            if check():
                return True
        except Exception as exc:  # noqa: BLE001 - a check may fail while components restart: logged, retried
            log(f"waiting for {what}: {type(exc).__name__}: {exc}")
        time.sleep(1.0)
    log(f"gave up waiting for {what} after {timeout:.0f} s")
    return False


def pause(seconds: float, run: Run) -> None:
    """Sleep, supervising."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        run.supervise()
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def kafka_messages(bootstrap: str) -> tuple[set[str], int]:
    """Message hashes of every record in waku.messages, and the record count."""
    from kafka import KafkaConsumer, TopicPartition

    from core.message import hash_of
    from schemas import pipeline_records_pb2 as pr

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    parts = [TopicPartition("waku.messages", p) for p in consumer.partitions_for_topic("waku.messages") or ()]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    end = consumer.end_offsets(parts)
    hashes, n = set(), 0
    while any(consumer.position(p) < end[p] for p in parts):
        for batch in consumer.poll(1000).values():
            for rec in batch:
                v = pr.IngestRecord.FromString(rec.value)
                hashes.add(hash_of(v.pubsub_topic, v.message).hex())
                n += 1
    consumer.close()
    return hashes, n


def topic_end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
    end = {tp.partition: off for tp, off in consumer.end_offsets(parts).items()}
    consumer.close()
    return end


class Offsets(dict):
    """Partition -> offset, compared partition by partition (>= : at or past every one)."""

    def __ge__(self, other: dict) -> bool:  # type: ignore[override]
        return all(self.get(p, 0) >= off for p, off in other.items())


def batch_ids(run: Run, checkpoint: str, kind: str) -> list[int]:
    """The batch ids in a streaming checkpoint's offsets/ or commits/ (local or on S3)."""
    return [int(n) for n in run.list_names(f"{checkpoint}/{kind}") if n.isdigit()]


def committed_offsets(run: Run, checkpoint: str, topic: str) -> Offsets:
    """The end offsets of the last batch a streaming query committed (its checkpoint's
    offsets/<id> for the highest commits/<id>)."""
    commits = batch_ids(run, checkpoint, "commits")
    if not commits:
        return Offsets()
    last = run.read_text(f"{checkpoint}/offsets/{max(commits)}").strip().splitlines()[-1]
    return Offsets({int(p): off for p, off in json.loads(last).get(topic, {}).items()})


def read_json(path: Path) -> dict:
    """A load process's state file, or {} before it wrote one."""
    return json.loads(path.read_text()) if path.exists() else {}


def stop_loads(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to each load process, then up to 30 s for them to finish their files, else kill."""
    stop_processes(procs, 30)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def fault_order(topology: str, quick: bool) -> list[str]:
    """The kinds of fault of one round, in order ("kafka broker": the node leading
    waku.messages-0 then; "spark worker": worker 0 in odd rounds, 1 in even ones)."""
    if topology == "local":
        return ["kafka", "store job", "subscriptions job", "filter job", "bridge", "store service"]
    if quick:  # the driver first: its restart (minutes on 2 cores) overlaps the other faults
        return ["store job", "kafka broker", "spark worker", "s3", "bridge"]
    return ["kafka broker", "spark worker", "s3", "store job", "subscriptions job", "filter job", "bridge",
            "store service"]


def victim(run: Run, kind: str, round_: int) -> Component:
    if kind == "kafka broker":
        leader = run.kafka.replicas(["waku.messages"])[("waku.messages", 0)][0]
        return run.components[f"kafka node {leader - 1}"]  # node ids are index + 1
    if kind == "spark worker":
        return run.components[f"spark worker {round_ % SPARK_WORKERS}"]
    return run.components[kind]


# The counters of Progress that each kind of fault stops and that must move again after it.
RECOVERS = {
    "kafka": ("store commits", "pushes", "lightpush acks"),
    "kafka broker": ("store commits", "pushes", "lightpush acks"),
    "spark worker": ("store commits", "pushes"),
    "s3": ("store commits", "walks"),
    "store job": ("store commits",),
    "subscriptions job": ("subscriptions commits",),
    "filter job": ("pushes",),
    "bridge": ("relay published", "lightpush acks", "pushes"),
    "store service": ("walks",),
}


class Progress:
    """Counters that advance while each part of the path works: the load's files (relay
    publishes, lightpush acknowledgements, pushes, store walks answered) and the last batch the
    store and subscriptions jobs committed (their checkpoints, local or on S3). A counter that
    cannot be read now (the S3 server is down) keeps its last value. Sampled at every
    supervision (about once a second): each restarted fault's `recovered_s` gets, per counter,
    the seconds from its kill to the counter's first advance after the restart (also while later
    faults run: a slow recovery does not hold the next fault back)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.values: dict[str, int] = {}
        self.open: list[tuple[dict[str, Any], dict[str, int], float]] = []  # fault, at restart, killed at
        self.sample()

    def follow(self, fault: dict[str, Any], at_restart: dict[str, int], killed: float) -> None:
        fault["recovered_s"] = {}
        self.open.append((fault, at_restart, killed))

    def track(self) -> None:
        if not self.open:
            return
        now_values, now = self.sample(), time.monotonic()
        for fault, at_restart, killed in self.open:
            for k, v in now_values.items():
                if v > at_restart.get(k, v):
                    fault["recovered_s"].setdefault(k, round(now - killed, 1))
        self.open = [o for o in self.open if len(o[0]["recovered_s"]) < len(now_values)]

    def sample(self) -> dict[str, int]:
        tmp = self.run.tmp

        def size(name: str) -> int:
            return (tmp / name).stat().st_size if (tmp / name).exists() else 0

        walks = tmp / "walks.txt"
        self.values.update({"relay published": size("relay.txt"), "lightpush acks": size("lightpush.txt"),
                            "pushes": size("pushes.txt"),
                            "walks": walks.read_text().count('"rows"') if walks.exists() else 0})
        for key, job in (("store commits", "store"), ("subscriptions commits", "subscriptions")):
            try:
                self.values[key] = max(batch_ids(self.run, self.run.checkpoint(job), "commits"), default=-1)
            except OSError:
                pass
        return dict(self.values)

    def advanced(self, since: dict[str, int]) -> set[str]:
        now = self.sample()
        return {k for k, v in now.items() if v > since.get(k, v)}


def recovery_summary(faults: list[dict]) -> dict[str, dict[str, float | None]]:
    """Per kind of fault, the longest time from a kill to the first advance after the restart of
    each of its RECOVERS counters (None: one did not recover). Sets each fault's `not_recovered`."""
    out: dict[str, dict[str, float | None]] = {}
    for f in faults:
        kind = f["kind"]
        f["not_recovered"] = [k for k in RECOVERS[kind] if k not in f["recovered_s"]]
        for k in RECOVERS[kind]:
            v = f["recovered_s"].get(k)
            slot = out.setdefault(kind, {})
            prev = slot.get(k, 0.0)
            slot[k] = None if v is None or prev is None else max(prev, v)
    return out


def _terminated(signum: int, frame: Any) -> None:
    log("SIGTERM: stopping everything this run started")
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", choices=("local", "cluster"), default="local",
                        help="local: one broker, local-mode jobs, a local warehouse (default); cluster: S3 "
                             "server, 3 Kafka brokers, a Spark master and 2 workers (docs/reliability.md)")
    parser.add_argument("--quick", action="store_true", help="one fault per component, low load (CI)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rounds", type=int, help="fault rounds (each hits every component: 6 local, 8 cluster; "
                                                  "cluster --quick: 5); default 2, quick 1")
    parser.add_argument("--faults", type=int, help="stop after this many faults (default: every fault of every round)")
    parser.add_argument("--slot", type=float, help="seconds per fault (default 30, quick 20)")
    parser.add_argument("--relay-rate", type=float, help="relay msg/s (default 50, quick 20)")
    parser.add_argument("--lightpush-rate", type=float, help="lightpush requests/s (default 10, quick 5)")
    parser.add_argument("--subscribers", type=int, help="filter clients (default 8, quick 3)")
    parser.add_argument("--keep", help="work in this directory and keep it (logs, tables)")
    parser.add_argument("--role", choices=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        {"relay": role_relay, "lightpush": role_lightpush, "subscribers": role_subscribers,
         "walker": role_walker}[args.role](json.loads(args.spec))
        return 0
    # SIGTERM (a test's timeout, a supervisor) ends the run through its `finally`, which stops
    # every process it started: they run in sessions of their own and would outlive it.
    signal.signal(signal.SIGTERM, _terminated)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    rounds = args.rounds or (1 if args.quick else 2)
    slot = args.slot or (20.0 if args.quick else 30.0)
    relay_rate = args.relay_rate or (20.0 if args.quick else 50.0)
    lp_rate = args.lightpush_rate or (5.0 if args.quick else 10.0)
    n_subs = args.subscribers or (3 if args.quick else 8)
    order = fault_order(args.topology, args.quick)
    log(f"seed {seed}; topology {args.topology}; {rounds} round(s) of {len(order)} faults, {slot:.0f} s each; "
        f"relay {relay_rate:g}/s, lightpush {lp_rate:g}/s, {n_subs} subscribers")
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="waku-faults-"))
    tmp.mkdir(parents=True, exist_ok=True)
    run = Run(tmp, seed, args.quick, args.topology)
    result: dict[str, Any] = {"benchmark": "faults", "topology": args.topology, "seed": seed, "quick": args.quick}
    began = time.monotonic()
    try:
        setup_components(run)
        msgs_path, subs_path, so = run.table("messages"), run.table("subscriptions"), run.storage_options()
        wait_until("the store and subscriptions tables", lambda: delta_rows(msgs_path, ["digest"], so) is not None
                   and delta_rows(subs_path, ["peer_id"], so) is not None, 600 if run.cluster else 240, run)
        a, b = run.bridge_addr, run.__dict__["store-service_addr"]
        run.start_load("subscribers", {"peer": a, "count": n_subs, "seed": seed, "out": str(tmp / "pushes.txt"),
                                       "state": str(tmp / "subscribers.json")})
        run.start_load("relay", {"peer": a, "rate": relay_rate, "out": str(tmp / "relay.txt")})
        run.start_load("lightpush", {"peer": a, "rate": lp_rate, "out": str(tmp / "lightpush.txt")})
        run.start_load("walker", {"peer": b, "out": str(tmp / "walks.txt"), "pause": 1.0})
        # Faults start once the whole path flows: every subscriber has had a push (so the
        # subscriptions and filter jobs have run a batch) and a store walk found rows.
        def flowing() -> bool:
            pushes = tmp / "pushes.txt"
            clients = {ln.split()[0] for ln in pushes.read_text().splitlines()} if pushes.exists() else set()
            walks = tmp / "walks.txt"
            rows = any('"rows": 0' not in ln and '"rows"' in ln for ln in walks.read_text().splitlines()) \
                if walks.exists() else False
            # the cluster's jobs start slowly: the faults begin once the store job has committed too
            committed = not run.cluster or bool(batch_ids(run, run.checkpoint("store"), "commits"))
            return len(clients) == n_subs and rows and committed

        flows = wait_until("pushes to every subscriber and rows in store walks", flowing, 600, run)
        startup = time.monotonic() - began
        log(f"flowing after {startup:.0f} s; warm-up {slot:.0f} s")
        pause(slot, run)
        faults: list[dict] = []
        progress = run.progress = Progress(run)
        for r, kind in [(r, kind) for r in range(rounds) for kind in order][:args.faults]:
            c = victim(run, kind, r)
            at = rng.uniform(0.1, 0.5) * slot
            pause(at, run)
            down = rng.uniform(1.0, 5.0)
            log(f"round {r + 1}: kill -9 {c.name} (pid {c.pid}); restart in {down:.1f} s")
            before = progress.sample()
            killed = time.monotonic()
            c.kill9()
            kept_going: set[str] = set()
            while time.monotonic() - killed < down:  # what goes on without it
                kept_going |= progress.advanced(before)
                time.sleep(0.5)
            t0 = time.monotonic()
            c.launch()
            fault: dict[str, Any] = {"kind": kind, "component": c.name, "down_s": round(t0 - killed, 1),
                                     "restart_s": round(time.monotonic() - t0, 1)}
            if c.name.startswith("kafka node"):  # its replicas catch up from the others
                try:
                    fault["in_sync_s"] = round(run.kafka.wait_in_sync(["waku.messages", "waku.subscriptions"],
                                                                      300), 1)
                except Exception as exc:  # noqa: BLE001 - EmbeddedKafkaError: reported, the run goes on
                    log(f"{c.name}: {exc}")
                    fault["in_sync_s"] = None
            fault["kept_going"] = sorted(kept_going)
            progress.follow(fault, progress.sample(), killed)
            log(f"round {r + 1}: {c.name}: {fault}")
            faults.append(fault)
            pause(slot - at, run)
        pushes_before = len(lines(tmp / "pushes.txt")) // 2
        pushes_resumed = wait_until("pushes after the last fault",
                                    lambda: len(lines(tmp / "pushes.txt")) // 2 > pushes_before, 300, run)
        log("faults done; stopping the load (the subscribers stay, frozen, until the table is compared)")
        run.loads["subscribers"].send_signal(signal.SIGUSR1)
        stop_loads([run.loads[role] for role in ("relay", "lightpush", "walker")])
        # Every acknowledged message is in Kafka; wait until the store job has all of them.
        lp_acked = {ln for ln in lines(tmp / "lightpush.txt")[0::2]}
        lp_failed = set(lines(tmp / "lightpush.txt.failed"))
        relay_published = set(lines(tmp / "relay.txt"))
        in_kafka, kafka_records = kafka_messages(run.bootstrap)
        accepted = in_kafka | lp_acked
        stored_rows: list[dict] = []

        def caught_up() -> bool:
            nonlocal stored_rows
            stored_rows = delta_rows(msgs_path, ["message_hash", "received_time", "digest", "content_topic"], so) or []
            have = {r["message_hash"].hex() for r in stored_rows}
            return accepted <= have

        store_checkpoint = run.checkpoint("store")

        def store_progress() -> tuple[int, int, int]:
            # A restarted job on a loaded machine may take minutes to start: its log grows, then
            # it plans (offsets/) and commits (commits/) batches.
            log_file = tmp / "logs" / "store.log"
            return (max(batch_ids(run, store_checkpoint, "offsets"), default=-1),
                    max(batch_ids(run, store_checkpoint, "commits"), default=-1),
                    log_file.stat().st_size if log_file.exists() else 0)

        wait_until("the store job to store every accepted message", caught_up, 180, run, progress=store_progress)
        hashes = [r["message_hash"].hex() for r in stored_rows]
        stored = accepted & set(hashes)
        # The subscriptions table against the subscribers' own record of A's answers (the
        # frozen subscribers rewrite it every second).
        a_id = run.bridge_addr.rsplit("/p2p/", 1)[1]
        have_subs: set = set()
        want: set = set()

        def subs_match() -> bool:
            nonlocal have_subs, want
            state = read_json(tmp / "subscribers.json")
            want = {(c["peer"], ct) for c in state.get("clients", []) for ct in c["criteria"]}
            rows = delta_rows(subs_path, ["peer_id", "content_topic", "bridge_id"], so) or []
            have_subs = {(r["peer_id"], r["content_topic"]) for r in rows if r["bridge_id"] == a_id}
            return have_subs == want

        # The subscriptions job must first apply everything in waku.subscriptions (under load
        # its batches take minutes on two cores); then the table must equal the answers.
        end = topic_end_offsets(run.bootstrap, "waku.subscriptions")
        caught = wait_until("the subscriptions job to apply every event",
                            lambda: committed_offsets(run, run.checkpoint("subscriptions"),
                                                      "waku.subscriptions") >= end,
                            900, run)
        subscriptions_match = wait_until("the subscriptions table to match", subs_match, 60, run)
        stop_loads([run.loads["subscribers"]])
        state = read_json(tmp / "subscribers.json")
        # Pushes: per subscriber, a message twice is a duplicate.
        pushes_txt = tmp / "pushes.txt"
        pushes = [ln.split() for ln in pushes_txt.read_text().splitlines()] if pushes_txt.exists() else []
        per_client: dict[str, list[str]] = {}
        for client, h in pushes:
            per_client.setdefault(client, []).append(h)
        push_dups = sum(len(v) - len(set(v)) for v in per_client.values())
        # Every subscriber is on CT throughout (but while A restarts): the share of accepted
        # messages each received (best effort: pushes for a peer whose bridge is down are lost).
        coverage = [len(set(v) & accepted) / max(1, len(accepted)) for v in per_client.values()]
        # Store walks during the faults, and a final one through B against Delta's order.
        walks_txt = tmp / "walks.txt"
        walks = [json.loads(ln) for ln in walks_txt.read_text().splitlines()] if walks_txt.exists() else []
        ok_walks = [w for w in walks if "rows" in w]
        inexact = sum(1 for w in ok_walks if w["duplicates"] or w["shrunk"])
        time.sleep(3.0)  # B refreshes its snapshot every second
        final_path = tmp / "final_walk.txt"
        run.start_load("walker", {"peer": b, "out": str(tmp / "final_walk.jsonl"), "final": str(final_path)})
        run.loads["walker"].wait(120)
        final = final_path.read_text().split() if final_path.exists() else []
        expected = [r["message_hash"].hex() for r in sorted(
            (r for r in stored_rows if r["content_topic"] == CT), key=lambda r: (r["received_time"], r["digest"]))]
        result.update({
            "faults": len(faults),
            "fault_log": faults,
            "recovery_s": recovery_summary(faults),
            "pushes_resumed": pushes_resumed,
            "unplanned_restarts": {c.name: c.unplanned for c in run.components.values() if c.unplanned},
            "startup_s": round(startup, 1),
            "flowing_before_faults": flows,
            "relay_published": len(relay_published),
            "lightpush_acked": len(lp_acked),
            "lightpush_given_up": len(lp_failed - lp_acked),
            "kafka_records": kafka_records,
            "accepted": len(accepted),
            "stored": len(stored),
            "lost": len(accepted - stored),
            "lost_in_kafka": len(lp_acked - in_kafka),
            "duplicated": len(hashes) - len(set(hashes)),
            "relay_not_accepted": len(relay_published - in_kafka),
            "pushes": len(pushes),
            "push_duplicates": push_dups,
            "push_coverage_min": round(min(coverage, default=0.0), 3),
            "push_coverage_max": round(max(coverage, default=0.0), 3),
            "subscribers_resubscribed": state.get("resubscribed"),
            "subscriptions_match": subscriptions_match,
            "subscriptions_job_caught_up": caught,
            "subscriptions_expected": len(want),
            "subscriptions_in_table": len(have_subs),
            "walks": len(ok_walks),
            "walk_errors": len(walks) - len(ok_walks),
            "walks_inexact": inexact,
            "final_walk_exact": final == expected,
            "final_walk_rows": len(final),
            "seconds": round(time.monotonic() - began, 1),
            "work_dir": str(tmp),
        })
    finally:
        for p in run.loads.values():
            if p.poll() is None:
                p.kill()
        for name in ("bridge", "store service", "filter job", "subscriptions job", "store job"):
            c = run.components.get(name)
            if c is not None and c.proc is not None and c.proc.poll() is None:
                try:
                    os.killpg(c.pid, signal.SIGTERM)
                    c.proc.wait(30)
                except Exception:  # noqa: BLE001 - not stopped cleanly: killed instead
                    c.kill9()
        if run.broker is not None:
            run.broker.stop()
        for stop in (run.kafka, run.spark, run.s3):
            if stop is not None:
                try:
                    stop.stop()
                except Exception as exc:  # noqa: BLE001 - the rest is stopped all the same
                    log(f"stopping {type(stop).__name__}: {exc}")
    for key in ("faults", "accepted", "stored", "lost", "duplicated", "push_duplicates", "subscriptions_match",
                "walks", "walks_inexact", "final_walk_exact", "unplanned_restarts", "recovery_s", "pushes_resumed"):
        log(f"{key}: {result.get(key)}")
    print(json.dumps(result))
    (tmp / "result.json").write_text(json.dumps(result, indent=1))  # beside the logs (--keep)
    ok = (result.get("lost") == 0 and result.get("duplicated") == 0 and result.get("lost_in_kafka") == 0
          and result.get("subscriptions_match") and result.get("final_walk_exact") and result.get("walks_inexact") == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
