"""The bridge's Kafka producer against the real broker: bounded buffering while Kafka is
unreachable (backpressure, then counted drops), delivery of everything buffered once Kafka is
back, and a close that flushes."""
from __future__ import annotations

import logging
import socket
import threading
import time
import uuid

import pytest
import trio

from ingest.kafka_producer import IngestProducer, ProducerSettings, ProducerStats

pytestmark = pytest.mark.integration


def create_topic(bootstrap: str, name: str) -> None:
    from core.kafka import ensure_topics

    ensure_topics(bootstrap, {name: 2})


def count_records(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()


class Proxy:
    """A TCP forwarder: 'Kafka' at its port is down until start() (bootstrap goes through it)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split(",")[0].rsplit(":", 1)
        self.upstream = (host, int(port))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def start(self) -> None:
        self.sock.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


class Stats:
    def __init__(self) -> None:
        self.produced = 0
        self.dropped: dict[str, int] = {}
        self.latencies: list[float] = []

    def producer_stats(self) -> ProducerStats:
        def dropped(reason: str, n: int) -> None:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

        def produced(n: int) -> None:
            self.produced += n

        return ProducerStats(produced=produced, dropped=dropped, ack_latency=self.latencies.append)


def test_kafka_down_buffers_with_backpressure_then_delivers(kafka, caplog):
    """At the bound a relay record (`put`) waits for room as long as Kafka is away and is never
    dropped; an acknowledged one (`put_acked`, a client waits for the answer) is refused after
    backpressure_timeout_s, counted as kafka_backlog."""
    caplog.set_level(logging.WARNING, logger="ingest.kafka")
    topic = f"test.bridge.down.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)
    proxy = Proxy(kafka)
    stats = Stats()
    settings = ProducerSettings(bootstrap_servers=f"127.0.0.1:{proxy.port}", topic=topic, max_outstanding=40,
                                backpressure_timeout_s=0.5, delivery_timeout_ms=20_000, close_timeout_s=30)

    async def main() -> None:
        async with IngestProducer(settings, stats.producer_stats()) as producer:
            for i in range(40):
                assert await producer.put(b"k%d" % i, b"v%d" % i, time.perf_counter())
            assert producer.outstanding == 40
            began = time.monotonic()
            assert not await producer.put_acked(b"late", b"x", time.perf_counter(), 10)  # waited, then refused
            assert time.monotonic() - began >= 0.5
            began = time.monotonic()
            assert not await producer.put_acked(b"later", b"x", time.perf_counter(), 10)  # no wait while overflowing
            assert time.monotonic() - began < 0.1
            assert stats.dropped == {"kafka_backlog": 2}
            handed: list[bool] = []
            async with trio.open_nursery() as nursery:
                async def relay_put() -> None:
                    handed.append(await producer.put(b"held", b"y", time.perf_counter()))
                nursery.start_soon(relay_put)
                await trio.sleep(1.0)
                assert handed == []  # still waiting for room: not dropped
                proxy.start()  # Kafka is back
            assert handed == [True]
            with trio.fail_after(60):
                await producer.wait_idle()
            assert stats.produced == 41
            assert await producer.put(b"after", b"y", time.perf_counter())

    try:
        trio.run(main)
    finally:
        proxy.close()
    assert stats.produced == 42 and stats.dropped == {"kafka_backlog": 2}
    assert count_records(kafka, topic) == 42
    logs = caplog.text
    assert "relay paused until Kafka catches up" in logs
    assert "record refused" in logs and "[1 dropped for kafka_backlog so far]" in logs


def test_close_flushes_everything(kafka):
    topic = f"test.bridge.flush.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)
    stats = Stats()
    settings = ProducerSettings(bootstrap_servers=kafka, topic=topic, linger_ms=200)

    async def main() -> None:
        async with IngestProducer(settings, stats.producer_stats()) as producer:
            for i in range(2000):
                await producer.put(b"k%d" % i, b"v" * 1000, time.perf_counter())
            assert producer.outstanding > 0  # leaving the block closes, which waits for every ack

    trio.run(main)
    assert stats.produced == 2000 and stats.dropped == {}
    assert len(stats.latencies) == 2000
    assert count_records(kafka, topic) == 2000


def test_relay_backpressure_while_kafka_is_down_loses_nothing(kafka, tmp_path):
    """With Kafka unreachable and a bound of 20 records, the bridge stops reading the relay
    (the publisher's messages wait in flow control) and, once Kafka is back, produces all."""
    from ingest.publisher import Publisher
    from schemas.waku_message_pb2 import WakuMessage
    from tests.integration.test_bridge import local_bridge

    topic = f"test.bridge.bp.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)
    proxy = Proxy(kafka)
    bridge, metrics = local_bridge(f"127.0.0.1:{proxy.port}", topic, tmp_path,
                                   "bridge.producer_max_outstanding=20", "bridge.backpressure_timeout_s=60")
    n = 300

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            pub = Publisher()
            async with pub.running():
                await pub.connect(str(bridge.addrs[0]))
                await pub.wait_for_mesh()
                for i in range(n):
                    await pub.publish(WakuMessage(payload=b"%d" % i * 100, content_topic="/t/1/bp/proto"))
                with trio.fail_after(60):  # the producer fills up to its cap, then holds the rest back
                    while bridge.producer.outstanding < 20:
                        await trio.sleep(0.01)
                assert metrics.value("waku_bridge_accepted_total") < n  # held back, not dropped
                assert bridge.producer.outstanding == 20
                proxy.start()
                with trio.fail_after(60):
                    while metrics.value("waku_bridge_produced_total") < n:
                        await trio.sleep(0.1)
            bridge.stop()

    try:
        trio.run(main)
    finally:
        proxy.close()
    assert metrics.value("waku_bridge_dropped_total", reason="kafka_backlog") == 0
    assert count_records(kafka, topic) == n
