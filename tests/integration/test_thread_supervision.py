"""Background threads of the bridge that die are counted and started again, never left dead
while the bridge keeps answering: the filter push topic's consumer (else SUBSCRIBE answers 200
and nothing is pushed) goes on from the record after the last one it handed over. Real Kafka
(the shared embedded broker)."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
import trio

from ingest.filter.pusher import PushConsumer
from tests.integration.test_bridge import create_topic

pytestmark = pytest.mark.integration


def test_push_consumer_killed_is_restarted_and_misses_nothing(kafka: str):
    from kafka import KafkaProducer

    topic = f"test.supervision.{uuid.uuid4().hex[:8]}.push"
    create_topic(kafka, topic, 2)
    got: list[bytes] = []
    lock = threading.Lock()

    def deliver(values: list[bytes]) -> None:
        with lock:
            got.extend(values)

    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")

    def produce(values: list[bytes]) -> None:
        for i, v in enumerate(values):
            producer.send(topic, v, key=str(i).encode())
        producer.flush()

    async def main() -> None:
        consumer = PushConsumer(kafka, topic, {}, deliver, trio.lowlevel.current_trio_token())
        consumer.start()
        try:
            await trio.to_thread.run_sync(consumer.ready.wait, 60.0)
            assert consumer.ready.is_set()
            await trio.to_thread.run_sync(produce, [b"a1", b"a2", b"a3"])
            await _until(lambda: len(got) >= 3)
            # Kill the loop: taking the next batch in fails once (the batch is not handed over).
            take = consumer._values
            failed = []

            def fail_once(messages):
                if not failed:
                    failed.append(True)
                    raise RuntimeError("killed by the test")
                return take(messages)

            consumer._values = fail_once
            await trio.to_thread.run_sync(produce, [b"b1", b"b2", b"b3"])
            await _until(lambda: consumer.failures >= 1)
            await trio.to_thread.run_sync(produce, [b"c1"])
            await _until(lambda: len(got) >= 7)
            await trio.sleep(1.0)
            assert consumer.failures == 1, consumer.failed
            with lock:
                assert sorted(got) == [b"a1", b"a2", b"a3", b"b1", b"b2", b"b3", b"c1"]
        finally:
            consumer.stop()
            await trio.to_thread.run_sync(consumer.join, 10.0)

    async def _until(predicate, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "timed out"
            await trio.sleep(0.05)

    try:
        trio.run(main)
    finally:
        producer.close()


def test_a_dead_filter_producer_stops_the_bridge(kafka: str, tmp_path, monkeypatch):
    """The filter service's Kafka producer thread dies: the bridge stops with an error (a
    non-zero exit for `waku-bridge run`) instead of answering every SUBSCRIBE 503 forever."""
    from core.config import load_config
    from ingest import kafka_producer
    from ingest.filter import service as filter_service
    from ingest.metrics import BridgeMetrics
    from ingest.node import Bridge, BridgeError
    from ingest.settings import BridgeSettings

    class DyingProducer(kafka_producer.IngestProducer):
        def _feed_loop(self) -> None:
            time.sleep(0.5)
            raise RuntimeError("feeder killed by the test")

    monkeypatch.setattr(filter_service, "IngestProducer", DyingProducer)
    tag = uuid.uuid4().hex[:8]
    cfg = load_config([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages=test.supervision.{tag}.messages",
        f"topics.subscriptions=test.supervision.{tag}.subscriptions",
        f"topics.push_prefix=test.supervision.{tag}.push.", f"bridge.key_file={tmp_path / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        "store_service.enabled=false",
    ], environ={})
    create_topic(kafka, cfg.get("topics.messages"), 1)
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=BridgeMetrics(), out=open("/dev/null", "w"))

    async def main() -> None:
        with trio.fail_after(300):
            await bridge.run()

    with pytest.raises(BaseException) as info:  # the BridgeError comes inside trio's exception group
        trio.run(main)
    assert any(isinstance(e, BridgeError) and "filter service's kafka producer failed" in str(e)
               for e in _leaves(info.value)), info.value


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def _thread_bridge(kafka: str, tmp_path):
    from tests.integration.test_bridge import local_bridge

    tag = uuid.uuid4().hex[:8]
    create_topic(kafka, f"test.threads.{tag}.messages", 1)
    bridge, _metrics = local_bridge(
        kafka, f"test.threads.{tag}.messages", tmp_path, f"topics.subscriptions=test.threads.{tag}.subscriptions",
        f"topics.push_prefix=test.threads.{tag}.push.", f"warehouse.root={tmp_path / 'warehouse'}",
        f"warehouse.checkpoints={tmp_path / 'checkpoints'}", "store_service.refresh_interval_s=0.1")
    return bridge


def test_each_background_thread_killed_is_counted_shown_and_started_again(kafka: str, tmp_path):
    """Each of the bridge's restartable threads (filter push consumer, store tail, store reader's
    follower), killed by an exception raised inside it (SystemExit), is started again, counted in
    waku_bridge_thread_failures{thread} and reported by health_problems() (the REST API's
    /health) until a minute has passed."""
    from tests.unit.test_thread_deaths import kill

    bridge = _thread_bridge(kafka, tmp_path)
    names = ("push-consumer", "store-tail", "store-reader-follow")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            await _until(lambda: {t.name for t in bridge.threads()} >= set(names))  # the filter starts after
            assert bridge.health_problems() == []
            for name in names:
                await _until(lambda n=name: _state(bridge, n).alive)
                kill(name, SystemExit)  # a BaseException: no library's `except Exception` swallows it
                await _until(lambda n=name: _state(bridge, n).failures == 1 and _state(bridge, n).alive,
                             lambda n=name: f"{_state(bridge, n)}")
                await _until(lambda n=name: bridge.metrics.value("waku_bridge_thread_failures", thread=n) == 1)
                assert bridge.metrics.value("waku_bridge_thread_alive", thread=name) == 1
                assert any(name in p and "started again" in p for p in bridge.health_problems())
            bridge.stop()

    async def _until(predicate, describe=lambda: "", timeout: float = 120.0) -> None:
        deadline = trio.current_time() + timeout
        while not predicate():
            assert trio.current_time() < deadline, f"timed out: {describe()}"
            await trio.sleep(0.05)

    trio.run(main)


def test_a_thread_that_ends_while_the_bridge_runs_stops_the_bridge(kafka: str, tmp_path):
    """A background thread that ends (here the push consumer, told to stop under the running
    bridge) stops the bridge with an error naming it (a non-zero exit for `waku-bridge run`): it
    never answers SUBSCRIBE 200 with nothing to push."""
    from ingest.node import BridgeError

    bridge = _thread_bridge(kafka, tmp_path)

    async def main() -> None:
        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                await nursery.start(bridge.run)
                while not any(t.name == "push-consumer" and t.alive for t in bridge.threads()):
                    await trio.sleep(0.05)
                assert bridge.filter is not None and bridge.filter.consumer is not None
                bridge.filter.consumer.stop()
                await trio.sleep_forever()

    with pytest.raises(BaseException) as info:
        trio.run(main)
    assert any(isinstance(e, BridgeError) and "push-consumer died" in str(e) for e in _leaves(info.value)), info.value


def _state(bridge, name: str):
    return next(t for t in bridge.threads() if t.name == name)


def test_a_killed_relay_feeder_stops_the_bridge(kafka: str, tmp_path):
    """The relay producer's feeder (Kafka's delivery reports, the records' acknowledgements)
    killed inside the running bridge: the bridge stops with an error naming the producer (a
    non-zero exit), never keeps reading peers whose messages nobody acknowledges."""
    import ctypes

    from ingest.node import BridgeError
    from tests.integration.test_bridge import local_bridge

    topic = f"test.threads.{uuid.uuid4().hex[:8]}.messages"
    create_topic(kafka, topic, 1)
    bridge, _metrics = local_bridge(kafka, topic, tmp_path, "store_service.enabled=false", "filter.enabled=false")

    async def main() -> None:
        with trio.fail_after(300):
            async with trio.open_nursery() as nursery:
                await nursery.start(bridge.run)
                thread = bridge.producer._thread
                assert thread is not None and thread.is_alive()
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(SystemExit))
                await trio.sleep_forever()

    with pytest.raises(BaseException) as info:
        trio.run(main)
    assert any(isinstance(e, BridgeError) and "kafka producer failed" in str(e)
               for e in _leaves(info.value)), info.value
