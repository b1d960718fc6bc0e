"""The interop environment: a bridge process as an operator runs it (cluster 1, every shard,
tcp + websocket, filter, store v3, lightpush), the store, subscriptions and filter jobs as
streaming queries in the shared SparkSession, and a py-libp2p relay peer feeding the bridge;
the clients under test are the reference ones, go-waku and js-waku, run as processes
(tests/interop/go, tests/interop/js; built by the set-up)."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import trio

from core.config import REPO_ROOT, Config, load_config
from core.topics import autoshard
from ingest.publisher import Publisher
from schemas.waku_message_pb2 import WakuMessage
from tests.conftest import BATCH_AT_EVERY_TRIGGER, free_port
from tests.integration.test_filter_service import Net, wait_until
from tools.processes import BridgeProcess, start_bridge

CLUSTER = 1
SHARDS = 8
CONTENT_TOPIC = "/interop/1/test/proto"
PUBSUB_TOPIC = f"/waku/2/rs/{CLUSTER}/{autoshard(CONTENT_TOPIC, SHARDS)}"

GO_BIN = REPO_ROOT / ".cache" / "interop" / "wakuinterop"
JS_DIR = REPO_ROOT / "tests" / "interop" / "js"
NODE_BIN = JS_DIR / "node_modules" / ".bin" / "node"


@dataclass
class ClientRun:
    """A reference client's process: its JSON lines as they come, the last one the summary."""
    name: str
    proc: subprocess.Popen
    events: list[dict] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def wait_event(self, kind: str, timeout: float = 90.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events):
                if e.get("event") == kind:
                    return e
            if self.proc.poll() is not None:
                time.sleep(0.3)  # the reader threads drain what is left
                for e in list(self.events):
                    if e.get("event") == kind:
                        return e
                raise AssertionError(f"{self.name} exited {self.proc.returncode} before {kind!r}: {self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no {kind!r} within {timeout:.0f} s: {self.tail()}")

    def finish(self, timeout: float = 180.0) -> dict:
        """Wait for the exit; the summary (the last JSON line)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.name} did not finish within {timeout:.0f} s: {self.tail()}") from None
        for reader in self.readers:  # what it printed last (a relay-publish summary: megabytes) is read
            reader.join(60)
        if not self.events:
            raise AssertionError(f"{self.name} printed nothing (exit {self.proc.returncode}): {self.tail()}")
        return self.events[-1]

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]

    def tail(self) -> str:
        return " | ".join(self.stderr[-15:])


def run_client(name: str, argv: list[str]) -> ClientRun:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                            start_new_session=True)
    run = ClientRun(name, proc)

    def out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    run.events.append(json.loads(line))
                except json.JSONDecodeError:
                    run.stderr.append(f"(unparsed) {line}")

    def err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            run.stderr.append(line.rstrip())

    run.readers = [threading.Thread(target=out, daemon=True), threading.Thread(target=err, daemon=True)]
    for reader in run.readers:
        reader.start()
    return run


def go_client(*args: str) -> ClientRun:
    if not GO_BIN.exists():
        pytest.fail(f"{GO_BIN} missing: the set-up builds it (bash tests/interop/go/build.sh)")
    return run_client("go-waku", [str(GO_BIN), *args])


def js_client(*args: str) -> ClientRun:
    if not NODE_BIN.exists():
        pytest.fail(f"{NODE_BIN} missing: the set-up installs it (bash tests/interop/js/install.sh)")
    return run_client("js-waku", [str(NODE_BIN), str(JS_DIR / "interop.mjs"), *args])


@dataclass
class Interop:
    cfg: Config
    bridge: BridgeProcess
    net: Net
    relay_peer: Publisher
    spark: object
    messages_topic: str
    ws_addr: str

    @property
    def tcp_addr(self) -> str:
        return self.bridge.tcp_addr

    def publish(self, n: int, prefix: str, rate: float = 0.0, content_topic: str = CONTENT_TOPIC) -> list[bytes]:
        """Publish n messages over relay through the bridge from the py-libp2p relay peer;
        their message hashes."""
        from core.message import hash_of

        hashes: list[bytes] = []

        async def go() -> None:
            for i in range(n):
                msg = WakuMessage(payload=f"{prefix}-{i}".encode(), content_topic=content_topic,
                                  timestamp=time.time_ns())
                await self.relay_peer.publish(msg, PUBSUB_TOPIC)
                hashes.append(hash_of(PUBSUB_TOPIC, msg))
                if rate:
                    await trio.sleep(1.0 / rate)
        self.net.run(go)
        return hashes

    def stored_hashes(self) -> set[bytes]:
        from deltalake import DeltaTable

        path = f"{self.cfg.path('warehouse.root')}/messages"
        try:
            t = DeltaTable(path).to_pyarrow_table(columns=["message_hash"])
        except Exception:  # noqa: BLE001 - not created yet
            return set()
        return {bytes(h) for h in t["message_hash"].to_pylist()}

    def wait_served(self, content_topic: str, n: int, timeout: float = 120.0) -> None:
        """Until the bridge's store service answers n messages of the content topic (its
        reader follows the Delta table: a commit is served within a refresh interval)."""
        from ingest.store import codec_v3
        from ingest.store.client import StoreClient

        async def count() -> int:
            async with StoreClient.running(timeout=10) as client:
                peer = await client.connect(self.tcp_addr)
                resp = await client.query_v3(peer, codec_v3.request(
                    uuid.uuid4().hex, pubsub_topic=PUBSUB_TOPIC, content_topics=[content_topic], limit=100,
                    include_data=False))
                return len(resp.messages)

        wait_until(lambda: trio.run(count) >= n, timeout, f"{n} messages of {content_topic} served by the bridge")

    def kafka_records(self) -> list:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(self.messages_topic, bootstrap_servers=self.cfg.bootstrap_servers(),
                                 auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
                                 consumer_timeout_ms=2000)
        try:
            return list(consumer)
        finally:
            consumer.close()


@pytest.fixture(scope="session")
def interop(config: Config, kafka: str, spark, tmp_path_factory) -> Iterator[Interop]:
    from core.kafka import ensure_topics
    from pipeline.filter.matching import start_filter_query
    from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
    from pipeline.filter.subscriptions import SubscriptionsJob
    from pipeline.store.job import start_store_query
    from pipeline.store.settings import StoreJobSettings

    root = tmp_path_factory.mktemp("interop")
    tag = uuid.uuid4().hex[:8]
    ws_port = free_port()
    overrides = [
        f"kafka.bootstrap_servers={kafka}",
        f"topics.messages=interop.{tag}.messages", f"topics.subscriptions=interop.{tag}.subscriptions",
        f"topics.push_prefix=interop.{tag}.push.",
        f"warehouse.root={root / 'warehouse'}", f"warehouse.checkpoints={root / 'checkpoints'}",
        "spark.master=local[2]", "spark.shuffle_partitions=2",
        f"bridge.key_file={root / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
        f"bridge.ws_port={ws_port}", "bridge.metrics_port=-1",
        f"bridge.cluster_id={CLUSTER}", "rln.enabled=false", f"bridge.num_shards_in_cluster={SHARDS}",
        "bridge.pubsub_topics=",
        "bridge.all_shards=true",
        "filter.trigger_seconds=0.2", "filter.subscriptions_trigger_seconds=0.2",
        *BATCH_AT_EVERY_TRIGGER,  # the tests wait for the tables
        "filter.trigger=microbatch",  # one local session runs every job: real-time mode would hold every slot
        "filter.max_requests_per_peer_per_minute=1000",
        "store.trigger_seconds=0.5", "store.starting_offsets=earliest",
        "store_service.refresh_interval_s=0.5",
    ]
    cfg = load_config(overrides, environ={})
    messages_topic = cfg.get("topics.messages")
    ensure_topics(kafka, {messages_topic: 2, cfg.get("topics.subscriptions"): 2})
    store_query = start_store_query(spark, StoreJobSettings.from_config(cfg), query_name=f"interop_store_{tag}")
    subs = SubscriptionsJob(spark, SubscriptionsJobSettings.from_config(cfg), query_name=f"interop_subs_{tag}")
    subs.start()
    filter_query = start_filter_query(spark, FilterJobSettings.from_config(cfg), query_name=f"interop_filter_{tag}")
    log = (root / "bridge.log").open("a")
    bridge = start_bridge(overrides, log=log, env={"WAKU_CONFIG": ""})
    ws_addr = next(a for a in bridge.addrs if "/ws/" in a)
    relay_peer = Publisher()
    net = Net()

    async def setup(nursery: trio.Nursery) -> None:
        async def keep(task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with relay_peer.running([PUBSUB_TOPIC]):
                await relay_peer.connect(bridge.tcp_addr)
                await relay_peer.wait_for_mesh(PUBSUB_TOPIC)
                task_status.started()
                await trio.sleep_forever()
        await nursery.start(keep)

    net.start(setup)
    # The bridge mounts filter once Kafka acknowledged its restart record (a fresh broker's
    # idempotent-producer set-up can take seconds): clients dial after that.
    wait_until(lambda: "filter: serving" in (root / "bridge.log").read_text(), 180, "the bridge's filter service")
    wait_until(lambda: filter_query.lastProgress is not None, 180, "the filter query's first batch")
    wait_until(lambda: store_query.lastProgress is not None, 180, "the store query's first batch")
    env = Interop(cfg, bridge, net, relay_peer, spark, messages_topic, ws_addr)
    try:
        yield env
    finally:
        code = bridge.stop()
        net.stop()
        filter_query.stop()
        from pipeline.filter.criteria import close_indexes

        close_indexes(spark)  # its Kafka follower thread lives in the shared JVM
        subs.stop()
        store_query.stop()
        log.close()
        print(f"interop bridge exited {code}; its log: {root / 'bridge.log'}")
        os.environ.get("WAKU_INTEROP_KEEP_LOG") and print((root / "bridge.log").read_text()[-5000:])
