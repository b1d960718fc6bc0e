"""Two bridges on one 3-broker Kafka cluster (tools/kafka_cluster.py: KRaft nodes as processes).

One cluster for the module (topics with replication factor 3, min.insync.replicas 2; every writer
acks=all and idempotent); the store, subscriptions and filter jobs as streaming queries in the
shared SparkSession; bridges A and B as `waku-bridge run` processes (two peer ids, two data dirs,
B a relay peer of A); a py-libp2p relay peer feeds A; the filter subscriber, the store queries and
the lightpush client are go-waku v0.10.0 (tests/interop/go).

- a message relayed into A is pushed to a filter subscriber of B, once, and found by a store
  query on either bridge;
- a lightpush on B is stored once (both bridges produce it: B from lightpush, A from relay);
- kill -9 of a broker under a small relay load: the bridges and jobs go on without a restart,
  nothing is lost or duplicated (the Delta table, the topic and the pushes against what was sent).
"""
from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from core.config import Config, load_config
from core.message import hash_of
from ingest.publisher import Publisher
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage
from tests.conftest import BATCH_AT_EVERY_TRIGGER
from tests.integration.test_filter_service import Net, streaming_progress, wait_until
from tests.interop.conftest import CLUSTER, PUBSUB_TOPIC, SHARDS, go_client
from tools.kafka_cluster import KafkaCluster
from tools.processes import BridgeProcess, start_bridge

pytestmark = pytest.mark.integration


def hx(h: bytes) -> str:
    return "0x" + h.hex()


def unhex(h: str) -> bytes:
    return bytes.fromhex(h[2:])


def ct(name: str) -> str:
    return f"/kcluster/1/{name}-{uuid.uuid4().hex[:6]}/proto"


@dataclass
class Env:
    cluster: KafkaCluster
    cfg: Config
    a: BridgeProcess
    b: BridgeProcess
    logs: tuple[Path, Path]
    net: Net
    relay_peer: Publisher
    spark: object
    queries: dict

    def go(self, command: str, bridge: BridgeProcess, content_topic: str, *args: str):
        return go_client(command, "--peer", bridge.tcp_addr, "--cluster-id", str(CLUSTER), "--pubsub-topic",
                         PUBSUB_TOPIC, "--content-topic", content_topic, "--timeout", "90", *args)

    def publish(self, n: int, content_topic: str, rate: float = 0.0) -> list[tuple[bytes, float]]:
        """n messages over relay into bridge A; (message hash, time published) each."""
        sent: list[tuple[bytes, float]] = []

        async def go() -> None:
            for i in range(n):
                msg = WakuMessage(payload=f"kc-{i}".encode(), content_topic=content_topic, timestamp=time.time_ns())
                await self.relay_peer.publish(msg, PUBSUB_TOPIC)
                sent.append((hash_of(PUBSUB_TOPIC, msg), time.time()))
                if rate:
                    await trio.sleep(1.0 / rate)
        self.net.run(go)
        return sent

    def stored(self) -> collections.Counter[bytes]:
        """Rows of the Delta messages table per message hash."""
        from deltalake import DeltaTable

        try:
            t = DeltaTable(f"{self.cfg.path('warehouse.root')}/messages").to_pyarrow_table(columns=["message_hash"])
        except Exception:  # noqa: BLE001 - not created yet
            return collections.Counter()
        return collections.Counter(bytes(h) for h in t["message_hash"].to_pylist())

    def records(self) -> list:
        """Every record of the messages topic: (key, IngestRecord, broker append time in s)."""
        from confluent_kafka import Consumer, TopicPartition

        topic = self.cfg.get("topics.messages")
        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap_servers, "group.id": "kc-test",
                             "enable.auto.commit": False, "log_level": 0})
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
            ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
            consumer.assign(parts)
            out, seen = [], dict.fromkeys(ends, 0)
            deadline = time.monotonic() + 60
            while any(seen[p] < ends[p] for p in ends) and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                seen[msg.partition()] = msg.offset() + 1
                out.append((msg.key(), pr.IngestRecord.FromString(msg.value()), msg.timestamp()[1] / 1000))
            return out
        finally:
            consumer.close()

    def served(self, bridge: BridgeProcess, content_topic: str) -> int:
        """Messages of the content topic the bridge's store answers (our client; cheap to poll)."""
        from ingest.store import codec_v3
        from ingest.store.client import StoreClient

        async def count() -> int:
            async with StoreClient.running(timeout=10) as client:
                peer = await client.connect(bridge.tcp_addr)
                total, cursor = 0, None
                while True:
                    resp = await client.query_v3(peer, codec_v3.request(
                        uuid.uuid4().hex, pubsub_topic=PUBSUB_TOPIC, content_topics=[content_topic], limit=100,
                        include_data=False, cursor=cursor))
                    total += len(resp.messages)
                    cursor = resp.pagination_cursor or None
                    if not cursor:
                        return total
        return trio.run(count)

    def subscribed(self, content_topic: str) -> bool:
        from deltalake import DeltaTable

        try:
            t = DeltaTable(self.cfg.path("warehouse.root") + "/subscriptions").to_pyarrow_table(
                columns=["content_topic"])
        except Exception:  # noqa: BLE001 - not created yet
            return False
        return t["content_topic"].to_pylist().count(content_topic) == 1

    def wait(self, predicate, what: str, timeout: float = 90.0) -> None:
        """Until `predicate()`, failing after `timeout` s in which no streaming query moved (the
        jobs are slow on a busy machine, not stuck)."""
        wait_until(predicate, timeout, what, progress=lambda: streaming_progress(self.spark))

    def check_running(self) -> None:
        for name, b in (("A", self.a), ("B", self.b)):
            assert b.proc.poll() is None, f"bridge {name} exited {b.proc.returncode}"
        for name, q in self.queries.items():
            assert q.isActive, f"the {name} query stopped: {q.exception()}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[KafkaCluster]:
    began = time.monotonic()
    with KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), brokers=3) as c:
        print(f"\n3-broker Kafka cluster ready in {time.monotonic() - began:.1f} s on {c.bootstrap_servers}")
        yield c


@pytest.fixture(scope="module")
def env(cluster: KafkaCluster, spark, tmp_path_factory) -> Iterator[Env]:
    from pipeline.filter.criteria import close_indexes
    from pipeline.filter.matching import start_filter_query
    from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
    from pipeline.filter.subscriptions import SubscriptionsJob
    from pipeline.store.job import start_store_query
    from pipeline.store.settings import StoreJobSettings

    root = tmp_path_factory.mktemp("two-bridges")
    tag = uuid.uuid4().hex[:8]
    common = [
        f"kafka.bootstrap_servers={cluster.bootstrap_servers}",
        f"topics.messages=kc.{tag}.messages", f"topics.subscriptions=kc.{tag}.subscriptions",
        f"topics.push_prefix=kc.{tag}.push.",
        f"warehouse.root={root / 'warehouse'}", f"warehouse.checkpoints={root / 'checkpoints'}",
        "spark.master=local[2]", "spark.shuffle_partitions=2",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        f"bridge.cluster_id={CLUSTER}", "rln.enabled=false", f"bridge.num_shards_in_cluster={SHARDS}",
        "bridge.pubsub_topics=",
        "bridge.all_shards=true", "bridge.redial_interval_s=2",
        "filter.trigger_seconds=0.2", "filter.subscriptions_trigger_seconds=0.2",
        *BATCH_AT_EVERY_TRIGGER,  # the tests wait for the tables
        "filter.trigger=microbatch",  # one local session runs every job: real-time mode would hold every slot
        "filter.max_requests_per_peer_per_minute=1000",
        "store.trigger_seconds=0.5", "store.starting_offsets=earliest",
        "store_service.refresh_interval_s=0.5",
    ]
    cfg = load_config(common, environ={})
    kafka = cfg.get("kafka.bootstrap_servers")
    assert kafka == cluster.bootstrap_servers
    cluster.create_topics({cfg.get("topics.messages"): 2, cfg.get("topics.subscriptions"): 2})
    queries = {"store": start_store_query(spark, StoreJobSettings.from_config(cfg), query_name=f"kc_store_{tag}")}
    subs = SubscriptionsJob(spark, SubscriptionsJobSettings.from_config(cfg), query_name=f"kc_subs_{tag}")
    subs.start()
    queries["filter"] = start_filter_query(spark, FilterJobSettings.from_config(cfg), query_name=f"kc_filter_{tag}")
    logs = (root / "bridge-a.log", root / "bridge-b.log")
    (root / "a").mkdir()
    (root / "b").mkdir()
    a = start_bridge([*common, f"bridge.key_file={root / 'a' / 'key'}"], log=logs[0].open("a"),
                     env={"WAKU_CONFIG": ""})
    b = start_bridge([*common, f"bridge.key_file={root / 'b' / 'key'}", f"bridge.static_peers={a.tcp_addr}"],
                     log=logs[1].open("a"), env={"WAKU_CONFIG": ""})
    relay_peer = Publisher()
    net = Net()

    async def setup(nursery: trio.Nursery) -> None:
        async def keep(task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with relay_peer.running([PUBSUB_TOPIC]):
                await relay_peer.connect(a.tcp_addr)
                await relay_peer.wait_for_mesh(PUBSUB_TOPIC)
                task_status.started()
                await trio.sleep_forever()
        await nursery.start(keep)

    net.start(setup)
    env = Env(cluster, cfg, a, b, logs, net, relay_peer, spark, queries)
    try:
        for log in logs:
            wait_until(lambda log=log: "filter: serving" in log.read_text(), 180, f"filter served ({log.name})")
        wait_until(lambda: queries["filter"].lastProgress is not None, 180, "the filter query's first batch")
        wait_until(lambda: queries["store"].lastProgress is not None, 180, "the store query's first batch")
        yield env
    finally:
        codes = (a.stop(), b.stop())
        net.stop()
        queries["filter"].stop()
        close_indexes(spark)  # its Kafka follower thread lives in the shared JVM
        subs.stop()
        queries["store"].stop()
        print(f"bridges exited {codes}; logs in {root}")


def test_relayed_into_a_pushed_by_b_and_stored_on_both(env: Env):
    assert env.a.peer_id != env.b.peer_id
    state = env.cluster.replicas([env.cfg.get("topics.messages"), env.cfg.get("topics.subscriptions"),
                                  f"{env.cfg.get('topics.push_prefix')}{env.b.peer_id}"])
    assert state and all(len(reps) == 3 and set(isr) == set(reps) for _, reps, isr in state.values()), state
    topic = ct("relay-a-filter-b")
    n = 20
    sub = env.go("filter", env.b, topic, "--seconds", "400", "--count", str(n))
    sub.wait_event("ready")
    env.wait(lambda: env.subscribed(topic), "go-waku's subscription (on B) in Delta")
    sent = [h for h, _ in env.publish(n, topic, rate=10)]
    summary = sub.finish(timeout=420)
    assert summary["ok"], summary
    assert summary["received"] == n and summary["duplicates"] == 0
    assert sorted(summary["hashes"]) == sorted(hx(h) for h in sent)
    env.wait(lambda: set(sent) <= set(env.stored()), "the messages in the Delta store")
    stored = env.stored()
    assert all(stored[h] == 1 for h in sent)
    for bridge in (env.a, env.b):
        env.wait(lambda bridge=bridge: env.served(bridge, topic) == n, "the messages served")
        got = env.go("store", bridge, topic, "--page-size", "7", "--forward", "--skip-ratelimit").finish()
        assert got["ok"] and got["status"] == 200 and got["hash_mismatches"] == 0, got
        assert got["hashes"] == [hx(h) for h in sent]


def test_lightpush_on_b_is_stored_once(env: Env):
    topic = ct("lightpush-b")
    summary = env.go("lightpush", env.b, topic, "--count", "10").finish()
    assert summary["ok"] and summary["pushed_ok"] == 10, summary
    pushed = {unhex(h) for h in summary["hashes"]}
    env.wait(lambda: pushed <= set(env.stored()), "the lightpushed messages in the Delta store")
    stored = env.stored()
    assert {h: stored[h] for h in pushed} == dict.fromkeys(pushed, 1)
    by_bridge = collections.defaultdict(list)
    for key, rec, _ in env.records():
        if bytes(key) in pushed:
            by_bridge[rec.bridge_id].append(rec.source)
    # B produced each from lightpush, A each from relay (B relayed it to A): two records, one row.
    assert sorted(by_bridge[env.b.peer_id]) == [pr.LIGHTPUSH] * 10
    assert sorted(by_bridge[env.a.peer_id]) == [pr.RELAY] * 10


def test_kill_9_a_broker_under_relay_load_loses_nothing(env: Env):
    messages = env.cfg.get("topics.messages")
    topic = ct("broker-kill")
    n, rate = 150, 10.0
    sub = env.go("filter", env.b, topic, "--seconds", "500", "--count", str(n))
    sub.wait_event("ready")
    env.wait(lambda: env.subscribed(topic), "go-waku's subscription (on B) in Delta")
    # The leader of the messages topic's partition 0: both bridges and the store job lose it.
    leader = env.cluster.replicas([messages])[(messages, 0)][0]
    victim = leader - 1  # node ids are index + 1
    sent: list[tuple[bytes, float]] = []
    killed_at = 0.0

    async def load_and_kill() -> None:
        nonlocal killed_at
        async with trio.open_nursery() as nursery:
            async def kill_later() -> None:
                nonlocal killed_at
                await trio.sleep(3.0)
                await trio.to_thread.run_sync(env.cluster.kill, victim)
                killed_at = time.time()
            nursery.start_soon(kill_later)
            for i in range(n):
                msg = WakuMessage(payload=f"kill-{i}".encode(), content_topic=topic, timestamp=time.time_ns())
                await env.relay_peer.publish(msg, PUBSUB_TOPIC)
                sent.append((hash_of(PUBSUB_TOPIC, msg), time.time()))
                await trio.sleep(1.0 / rate)

    began = time.monotonic()
    env.net.run(load_and_kill)
    hashes = [h for h, _ in sent]
    env.wait(lambda: set(hashes) <= set(env.stored()), "every message in the Delta store after the kill")
    stored_s = time.monotonic() - began
    env.check_running()  # nothing restarted: the same bridge processes and queries
    stored = env.stored()
    assert [h for h in hashes if stored[h] != 1] == []
    summary = sub.finish(timeout=520)
    assert summary["ok"], summary
    assert summary["received"] == n and summary["duplicates"] == 0
    assert sorted(summary["hashes"]) == sorted(hx(h) for h in hashes)
    # The topic: each message once per bridge (idempotent producers: no duplicate from a retry).
    per = collections.Counter()
    appended: dict[bytes, float] = {}
    for key, rec, ts in env.records():
        k = bytes(key)
        if k in stored and rec.message.content_topic == topic:
            per[(k, rec.bridge_id)] += 1
            if rec.bridge_id == env.a.peer_id:
                appended[k] = ts
    assert {h for h, _ in per} == set(hashes)
    assert [k for k, c in per.items() if c != 1] == []
    for bridge in (env.a, env.b):
        env.wait(lambda bridge=bridge: env.served(bridge, topic) == n, "the messages served after the kill")
    got = env.go("store", env.a, topic, "--page-size", "100", "--skip-ratelimit").finish()
    assert got["ok"] and sorted(got["hashes"]) == sorted(hx(h) for h in hashes), got
    # How long the kill stalled the writes: the longest wait from publish to the broker's append.
    after = [appended[h] - t for h, t in sent if t >= killed_at]
    before = [appended[h] - t for h, t in sent if t < killed_at]
    restart_s = env.cluster.restart(victim)
    in_sync_s = env.cluster.wait_in_sync([messages, env.cfg.get("topics.subscriptions")])
    print(f"\nkill -9 of node {victim + 1} (leader of {messages}-0) under {rate:.0f} msg/s relay: publish -> "
          f"append max {max(before):.2f} s before, {max(after):.2f} s after the kill; all {n} stored (once) "
          f"{stored_s:.0f} s after the load began; restart {restart_s:.1f} s, replicas in sync "
          f"{in_sync_s:.1f} s later")
