"""The filter service end to end with real libp2p hosts, the embedded Kafka broker and Spark.

Two bridges in one trio loop (a background thread): A (generous limits) and B (strict limits,
short TTL and unreachable timeout). A relay publisher feeds A; the subscriptions job and the
filter job run as streaming queries in the shared SparkSession; filter clients subscribe over
/vac/waku/filter-subscribe/2.0.0-beta1 (and v00) and receive MessagePush over filter-push.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import trio

from core.config import Config, load_config
from ingest.filter.client import FilterClient
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.publisher import Publisher
from ingest.relay.codec import DEFAULT_PUBSUB_TOPIC
from ingest.settings import BridgeSettings
from schemas.waku_message_pb2 import WakuMessage
from tests.conftest import BATCH_AT_EVERY_TRIGGER
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

SHARD = "/waku/2/rs/1/3"
PT = DEFAULT_PUBSUB_TOPIC


def ct(name: str) -> str:
    return f"/filter-test/1/{name}/proto"


class Net:
    """A trio loop in a thread holding bridges, a publisher and clients; `run` calls into it."""

    def __init__(self) -> None:
        self.token: trio.lowlevel.TrioToken | None = None
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        self.nursery: trio.Nursery | None = None

    def start(self, setup) -> None:
        async def main() -> None:
            self.token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                await setup(nursery)
                self.ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        def runner() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # noqa: BLE001
                self.error = exc
                self.ready.set()

        self._thread = threading.Thread(target=runner, daemon=True)
        self._thread.start()
        self.ready.wait(120)
        if self.error:
            raise self.error

    def run(self, afn, *args):
        return trio.from_thread.run(afn, *args, trio_token=self.token)

    async def start_client(self, client: FilterClient) -> None:
        async def keep(task_status=trio.TASK_STATUS_IGNORED) -> None:
            with trio.CancelScope() as scope:
                client.scope = scope  # cancel to stop the client's host
                async with client.running():
                    task_status.started()
                    await trio.sleep_forever()
        await self.nursery.start(keep)

    def stop(self) -> None:
        if self.token is not None and self._stop is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        if self._thread:
            self._thread.join(60)


def streaming_progress(spark) -> tuple:
    """What the session's streaming queries have done so far (changes with every batch planned
    or committed): a progress value for `wait_until`."""
    out = []
    for q in spark.streams.active:
        last = q.lastProgress
        out.append((q.name, last["batchId"] if last else None, q.status["message"]))
    return tuple(sorted(out, key=str))


@pytest.fixture(scope="module")
def env(config: Config, kafka: str, spark, tmp_path_factory) -> Iterator[dict]:
    from pipeline.filter.matching import start_filter_query
    from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
    from pipeline.filter.subscriptions import SubscriptionsJob
    from tests.integration.test_bridge import create_topic

    root = tmp_path_factory.mktemp("filter")
    tag = uuid.uuid4().hex[:8]
    common = [
        f"kafka.bootstrap_servers={kafka}",
        f"topics.messages=test.filter.{tag}.messages",
        f"topics.subscriptions=test.filter.{tag}.subscriptions",
        f"topics.push_prefix=test.filter.{tag}.push.",
        f"warehouse.root={root / 'warehouse'}", f"warehouse.checkpoints={root / 'checkpoints'}",
        "spark.master=local[2]", "spark.shuffle_partitions=2",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        f"bridge.pubsub_topics={PT},{SHARD}",
        "filter.trigger_seconds=0.2", "filter.subscriptions_trigger_seconds=0.2",
        *BATCH_AT_EVERY_TRIGGER,  # the test waits on the table
        # One shared local[2] session runs the subscriptions job too: real-time mode would hold
        # every task slot (it is tested through ./spark-submit.sh in test_filter_realtime.py).
        "filter.trigger=microbatch",
    ]
    cfg_a = load_config([*common, f"bridge.key_file={root / 'a.key'}",
                         "filter.max_requests_per_peer_per_minute=1000"], environ={})
    cfg_b = load_config([*common, f"bridge.key_file={root / 'b.key'}", "filter.max_peers=1",
                         "filter.stream_idle_timeout_s=1.5",
                         "filter.max_criteria_per_peer=3", "filter.max_requests_per_peer_per_minute=6",
                         "filter.subscription_ttl_s=4", "filter.unreachable_timeout_s=1"], environ={})
    create_topic(kafka, cfg_a.get("topics.messages"), 2)
    metrics_a, metrics_b = BridgeMetrics(), BridgeMetrics()
    devnull = open("/dev/null", "w")
    bridge_a = Bridge(BridgeSettings.from_config(cfg_a), metrics=metrics_a, out=devnull)
    bridge_b = Bridge(BridgeSettings.from_config(cfg_b), metrics=metrics_b, out=devnull)
    publisher = Publisher()
    net = Net()

    async def setup(nursery: trio.Nursery) -> None:
        await nursery.start(bridge_a.run)
        await nursery.start(bridge_b.run)
        with trio.fail_after(60):
            await bridge_a.filter.ready.wait()
            await bridge_b.filter.ready.wait()

        async def keep_publisher(task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with publisher.running([PT, SHARD]):
                await publisher.connect(addr(bridge_a))
                await publisher.wait_for_mesh(PT)
                await publisher.wait_for_mesh(SHARD)
                task_status.started()
                await trio.sleep_forever()
        await nursery.start(keep_publisher)

    net.start(setup)
    subs_job = SubscriptionsJob(spark, SubscriptionsJobSettings.from_config(cfg_a),
                                query_name=f"filter_test_subs_{tag}")
    subs_job.start()
    filter_query = start_filter_query(spark, FilterJobSettings.from_config(cfg_a),
                                      query_name=f"filter_test_filter_{tag}")
    # "latest" offsets are fixed at the first batch: wait for it before publishing.
    wait_until(lambda: filter_query.lastProgress is not None, 120, "the filter query's first batch")
    try:
        yield {"net": net, "a": bridge_a, "b": bridge_b, "publisher": publisher, "spark": spark,
               "subs": subs_job, "filter": filter_query, "cfg": cfg_a}
    finally:
        filter_query.stop()
        from pipeline.filter.criteria import close_indexes

        close_indexes(spark)  # its Kafka follower thread lives in the shared JVM
        subs_job.stop()
        for b in (bridge_a, bridge_b):
            trio.from_thread.run_sync(b.stop, trio_token=net.token)
        net.stop()
        devnull.close()


def addr(bridge: Bridge) -> str:
    return str(bridge.addrs[0])


def new_client(env, bridge: Bridge, **kw) -> FilterClient:
    client = FilterClient(**kw)
    env["net"].run(env["net"].start_client, client)
    env["net"].run(client.connect, addr(bridge))
    return client


def table_rows(env, peer: str) -> set[tuple[str, str]]:
    df = env["spark"].read.format("delta").load(env["subs"].path).where(f"peer_id = '{peer}'")
    return {(r.pubsub_topic, r.content_topic) for r in df.collect()}


def wait_rows(env, peer: str, expected: set[tuple[str, str]], timeout: float = 60.0) -> None:
    wait_until(lambda: table_rows(env, peer) == expected, timeout, f"subscriptions of {peer} = {expected}")


def publish(env, items: list[tuple[str, str, bytes, bool]]) -> None:
    """(pubsub topic, content topic, payload, ephemeral) each published over relay to bridge A."""
    pub = env["publisher"]

    async def go() -> None:
        for topic, content_topic, payload, eph in items:
            msg = WakuMessage(payload=payload, content_topic=content_topic, timestamp=time.time_ns())
            if eph:
                msg.ephemeral = True
            await pub.publish(msg, topic)
    env["net"].run(go)


def collect(env, client: FilterClient, expected: int, timeout: float = 60.0, settle: float = 2.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(got) < expected:
        got += env["net"].run(_drain, client)
        time.sleep(0.1)
    time.sleep(settle)
    got += env["net"].run(_drain, client)
    return got


async def _drain(client: FilterClient) -> list:
    return client.received_nowait()


def test_subscribe_receives_exactly_the_matching_messages(env):
    client = new_client(env, env["a"])
    peer = client.peer_id.to_base58()
    resp = env["net"].run(client.subscribe, PT, [ct("a"), ct("b")])
    assert (resp.status_code, resp.status_desc) == (200, "OK")
    wait_rows(env, peer, {(PT, ct("a")), (PT, ct("b"))})
    publish(env, [(PT, ct("a"), b"a1", False), (PT, ct("b"), b"b1", False), (PT, ct("c"), b"c1", False),
                  (SHARD, ct("a"), b"shard-a1", False), (PT, ct("a"), b"eph-a1", True)])
    got = collect(env, client, 3)
    assert sorted(p.message.payload for p in got) == [b"a1", b"b1", b"eph-a1"]
    assert all(p.pubsub_topic == PT and p.protocol == "v2" for p in got)
    assert client.rejected == 0

    # UNSUBSCRIBE one content topic: only the other keeps coming (the bridge drops at once).
    resp = env["net"].run(client.unsubscribe, PT, [ct("b")])
    assert resp.status_code == 200
    publish(env, [(PT, ct("a"), b"a2", False), (PT, ct("b"), b"b2", False)])
    got = collect(env, client, 1)
    assert [p.message.payload for p in got] == [b"a2"]
    wait_rows(env, peer, {(PT, ct("a"))})

    # PING 200, UNSUBSCRIBE_ALL, then PING 404 and nothing more pushed.
    assert env["net"].run(client.ping).status_code == 200
    assert env["net"].run(client.unsubscribe_all).status_code == 200
    resp = env["net"].run(client.ping)
    assert (resp.status_code, resp.status_desc) == (404, "NOT_FOUND: peer has no subscriptions")
    publish(env, [(PT, ct("a"), b"a3", False)])
    assert collect(env, client, 1, timeout=4, settle=0) == []
    wait_rows(env, peer, set())


def test_invalid_requests(env):
    client = new_client(env, env["a"])
    run = env["net"].run
    assert run(client.request, 1, None, [ct("x")]).status_code == 400          # no pubsub topic
    assert run(client.request, 1, PT, []).status_code == 400                   # no content topics
    r = run(client.request, 1, PT, [ct(f"t{i}") for i in range(101)])          # > 100 content topics
    assert (r.status_code, r.status_desc) == (400, "BAD_REQUEST: exceeds maximum content topics: 100")  # nwaku's text
    r = run(client.request, 1, PT, [ct(f"t{i}") for i in range(10_000)])       # ~140 KB: still answered
    assert (r.status_code, r.status_desc) == (400, "BAD_REQUEST: exceeds maximum content topics: 100")
    assert run(client.request, 2, PT, [ct("x")]).status_code == 404            # unsubscribe, nothing held
    assert run(client.unsubscribe_all).status_code == 404
    assert run(client.request, 9, PT, [ct("x")]).status_code == 400            # unknown type
    # Without request_id: not answered, and not applied.
    assert run(client.request, 1, PT, [ct("x")], "") is None
    assert run(client.ping).status_code == 404
    r = run(client.request, 1, PT, [ct(f"t{i}") for i in range(100)])          # exactly 100: fine
    assert r.status_code == 200, r.status_desc
    assert run(client.unsubscribe_all).status_code == 200


def test_limits_ttl_and_unreachable_on_strict_bridge(env):
    b = env["b"]
    run = env["net"].run
    first = new_client(env, b)
    assert run(first.subscribe, PT, [ct("l1"), ct("l2"), ct("l3")]).status_code == 200
    r = run(first.subscribe, PT, [ct("l4")])
    assert r.status_code == 503 and "criteria limit" in r.status_desc        # 3 criteria per peer
    second = new_client(env, b)
    r = run(second.subscribe, PT, [ct("l1")])
    assert r.status_code == 503 and "peer limit" in r.status_desc            # 1 peer served
    # rate limit: 6 requests a minute; first has used 2
    answers = [run(first.ping) for _ in range(5)]
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 429], answers
    assert "filter request rejected due rate limit exceeded" in answers[-1].status_desc  # nwaku's text
    # TTL 4 s without refresh: the bridge expires the peer and produces EXPIRE (row leaves Delta).
    peer = first.peer_id.to_base58()
    wait_until(lambda: b.filter.metrics.value("waku_filter_expired_peers_total", reason="ttl") >= 1, 20, "TTL expiry")
    wait_rows(env, peer, set())
    # Unreachable for 1 s (connection closed): expired with reason "unreachable" (the ping just
    # before makes the TTL, 4 s, come later).
    third = new_client(env, b)
    assert run(third.subscribe, PT, [ct("u1")]).status_code == 200
    assert run(third.ping).status_code == 200

    async def hang_up() -> None:  # the client goes away: hang up, then stop its host (no re-dial)
        await third.host.disconnect(b.peer_id)
        third.scope.cancel()
    run(hang_up)
    wait_until(lambda: b.filter.metrics.value("waku_filter_expired_peers_total", reason="unreachable") >= 1, 20,
               "unreachable expiry")
    assert not b.filter.view.has(third.peer_id.to_base58())


def test_legacy_v00_client_receives_filter_rpc_pushes(env):
    client = new_client(env, env["a"])
    run = env["net"].run
    rid = run(client.subscribe_v00, PT, [ct("old1"), ct("old2")])
    rid_single = run(client.subscribe_v00, "", [ct("old3")], True, True)  # no topic: default; one-topic shape
    peer = client.peer_id.to_base58()
    wait_rows(env, peer, {(PT, ct("old1")), (PT, ct("old2")), (PT, ct("old3"))})
    publish(env, [(PT, ct("old1"), b"o1", False), (PT, ct("old3"), b"o3", False), (PT, ct("new"), b"n", False)])
    got = collect(env, client, 2)
    assert sorted((p.message.payload, p.request_id, p.protocol) for p in got) == [
        (b"o1", rid, "v00"), (b"o3", rid_single, "v00")]
    run(client.subscribe_v00, PT, [ct("old1"), ct("old2")], False)
    wait_rows(env, peer, {(PT, ct("old3"))})


def test_filter_job_matches_against_the_resident_index_not_delta(env):
    from pipeline.filter.criteria import index_stats
    from pipeline.filter.matching import join_strategy

    # No join with a Delta scan: the criteria are the executor's index, changed by the events.
    assert join_strategy(env["filter"]) in ("none yet", "unknown")
    plan = env["filter"]._jsq.streamingQuery().lastExecution().executedPlan().toString()
    assert "waku_criteria_fanout" in plan or "CriteriaFanout" in plan, plan
    stats = index_stats(env["spark"])
    assert stats and max(s["events"] for s in stats) > 0 and not any(s["error"] for s in stats), stats
    # what the filter job's Prometheus endpoint adds
    from prometheus_client import CollectorRegistry, generate_latest

    from pipeline.filter.criteria import IndexCollector

    registry = CollectorRegistry()
    registry.register(IndexCollector(env["spark"]))
    text = generate_latest(registry).decode()
    for name in ("waku_filter_index_criteria", "waku_filter_index_events_total", "waku_filter_index_lookups_total",
                 "waku_filter_index_errors 0.0"):
        assert name in text, text


def test_a_new_subscription_is_matched_within_a_second_of_its_ok(env):
    """The bridge answers 200 once Kafka has the event; the index follows that topic, so the
    first message published a second later is pushed (here: the index has it well before)."""
    from pipeline.filter.criteria import index_stats

    client = new_client(env, env["a"])
    before = max(s["events"] for s in index_stats(env["spark"]))
    t0 = time.monotonic()
    assert env["net"].run(client.subscribe, PT, [ct("live1s")]).status_code == 200
    wait_until(lambda: max(s["events"] for s in index_stats(env["spark"])) > before, 1.0,
               "the index to apply the subscription within 1 s of its 200")
    applied_ms = (time.monotonic() - t0) * 1000
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))
    publish(env, [(PT, ct("live1s"), b"one second later", False)])
    got = collect(env, client, 1, timeout=30, settle=0.5)
    print(f"index applied the subscription {applied_ms:.0f} ms after the 200 OK")
    assert [p.message.payload for p in got] == [b"one second later"]


def test_waku_bridge_filter_cli_prints_pushes(env):
    import json
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "ingest.cli", "filter", "--peer", addr(env["a"]),
                             "--content-topic", ct("cli"), "--count", "1", "--wait-s", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        assert first == {"event": "subscribed", "status_code": 200, "status_desc": "OK"}
        spark = env["spark"]
        wait_until(lambda: spark.read.format("delta").load(env["subs"].path)
                   .where(f"content_topic = '{ct('cli')}'").count() == 1, 60, "the CLI's subscription in Delta")
        publish(env, [(PT, ct("other"), b"no", False), (PT, ct("cli"), b"hello cli", False)])
        push = json.loads(proc.stdout.readline())
        assert (push["event"], push["payload"], push["content_topic"], push["pubsub_topic"]) == (
            "push", "hello cli", ct("cli"), PT)
        assert json.loads(proc.stdout.readline()) == {"event": "done", "pushes": 1, "rejected": 0}
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_silent_filter_streams_are_closed(env):
    """A filter-subscribe stream that sends nothing is closed after stream_idle_timeout_s (1.5 s
    on bridge B); one that keeps sending requests stays open."""
    from libp2p.custom_types import TProtocol

    from ingest.filter.codec import FILTER_SUBSCRIBE_CODEC
    from ingest.framing import FrameReader

    client = new_client(env, env["b"])

    async def silent() -> float:
        stream = await client.host.new_stream(env["b"].host.get_id(), [TProtocol(FILTER_SUBSCRIBE_CODEC)])
        began = trio.current_time()
        with trio.fail_after(10):
            assert await FrameReader(stream, 1 << 16).read_frame() is None  # closed by the bridge
        return trio.current_time() - began

    took = env["net"].run(silent)
    assert 1.0 <= took < 5.0, took
