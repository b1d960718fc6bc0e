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
            # Kill the loop: its Kafka consumer closed under it makes the next poll fail.
            consumer._consumer.close()
            await _until(lambda: consumer.failures >= 1)
            await trio.to_thread.run_sync(produce, [b"b1", b"b2", b"b3"])
            await _until(lambda: len(got) >= 6)
            await trio.sleep(1.0)
            assert consumer.failures == 1, consumer.failed
            with lock:
                assert sorted(got) == [b"a1", b"a2", b"a3", b"b1", b"b2", b"b3"]
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
