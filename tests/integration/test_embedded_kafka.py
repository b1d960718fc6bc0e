"""The embedded single-node Kafka: produce/consume round trip, clean stop, data surviving a restart
(on other ports), and the "port already in use" error from the API and the CLI."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.embedded_kafka import DEFAULT_JAR_DIR, EmbeddedKafka, EmbeddedKafkaError, port_in_use
from tools.processes import free_port

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
TOPIC = "test.embedded"
PARTITIONS = 3
N_MESSAGES = 100
FAST_JVM = ["-XX:TieredStopAtLevel=1"]  # C1 only: a quicker start for a short-lived test broker

needs_broker = pytest.mark.skipif(
    not any(DEFAULT_JAR_DIR.glob("kafka_2.13-*.jar")), reason="Kafka jars not set up (make setup)"
)


def two_free_ports() -> tuple[int, int]:
    a = free_port()
    b = free_port()
    while b == a:
        b = free_port()
    return a, b


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kafka")


@pytest.fixture(scope="module")
def kafka(data_dir: Path) -> Iterator[EmbeddedKafka]:
    port, controller_port = two_free_ports()
    broker = EmbeddedKafka(data_dir, port=port, controller_port=controller_port, jvm_options=FAST_JVM)
    broker.start()
    print(f"\nembedded Kafka started in {broker.startup_seconds:.1f} s")
    yield broker
    broker.stop()


def produce(bootstrap: str) -> dict[int, list[tuple[int, bytes, bytes]]]:
    """Send N_MESSAGES keyed records; returns partition -> [(offset, key, value)] in send order."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [
            (f"key-{i % 7}".encode(), f"value-{i}".encode(),
             producer.send(TOPIC, key=f"key-{i % 7}".encode(), value=f"value-{i}".encode()))
            for i in range(N_MESSAGES)
        ]
        producer.flush(timeout=30)
        sent: dict[int, list[tuple[int, bytes, bytes]]] = {}
        for key, value, fut in futures:
            meta = fut.get(timeout=30)
            sent.setdefault(meta.partition, []).append((meta.offset, key, value))
    finally:
        producer.close(timeout=10)
    return sent


def consume_all(bootstrap: str, expected: int) -> dict[int, list[tuple[int, bytes, bytes]]]:
    """Read the topic from the beginning (no group) until `expected` records have arrived."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        got: dict[int, list[tuple[int, bytes, bytes]]] = {}
        count = 0
        deadline = time.monotonic() + 30
        while count < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                for rec in records:
                    got.setdefault(tp.partition, []).append((rec.offset, rec.key, rec.value))
                    count += 1
    finally:
        consumer.close()
    return got


SENT: dict[int, list[tuple[int, bytes, bytes]]] = {}


@needs_broker
def test_produce_consume_round_trip(kafka: EmbeddedKafka) -> None:
    kafka.create_topics({TOPIC: PARTITIONS, "test.other": 1})
    kafka.create_topics({TOPIC: PARTITIONS})  # idempotent
    SENT.update(produce(kafka.bootstrap_servers))
    assert sum(len(v) for v in SENT.values()) == N_MESSAGES
    assert len(SENT) > 1, "keys should spread over partitions"
    got = consume_all(kafka.bootstrap_servers, N_MESSAGES)
    assert got == SENT  # same keys, values and order (offsets) in every partition
    # One key always lands on one partition.
    key_partitions: dict[bytes, set[int]] = {}
    for partition, records in got.items():
        for _, key, _ in records:
            key_partitions.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in key_partitions.values())


@needs_broker
def test_stop_then_restart_keeps_data(kafka: EmbeddedKafka, data_dir: Path) -> None:
    if not SENT:  # run on its own: write the data first
        kafka.create_topics({TOPIC: PARTITIONS})
        SENT.update(produce(kafka.bootstrap_servers))
    pid = kafka.pid
    assert pid is not None
    kafka.stop()
    kafka.stop()  # idempotent
    assert not kafka.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not port_in_use(kafka.host, kafka.port)
    assert not port_in_use(kafka.host, kafka.controller_port)
    assert not kafka.pid_file.exists()

    # Same data dir, other ports: the storage is not formatted again and the records are there.
    port, controller_port = two_free_ports()
    with EmbeddedKafka(
        data_dir, port=port, controller_port=controller_port, jvm_options=FAST_JVM
    ) as again:
        print(f"\nembedded Kafka restarted in {again.startup_seconds:.1f} s")
        again.create_topics({TOPIC: PARTITIONS})  # exists already: fine
        assert consume_all(again.bootstrap_servers, N_MESSAGES) == SENT
        restarted_pid = again.pid
    assert restarted_pid is not None and not again.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(restarted_pid, 0)


@needs_broker
def test_port_in_use_fails_fast(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        taken = holder.getsockname()[1]
        broker = EmbeddedKafka(tmp_path / "kafka", port=taken, controller_port=free_port())
        began = time.monotonic()
        with pytest.raises(EmbeddedKafkaError, match="already in use") as info:
            broker.start()
        assert time.monotonic() - began < 2
        assert str(taken) in str(info.value)
        assert "\n" not in str(info.value)
        assert broker.pid is None and not broker.is_running()
        assert not (tmp_path / "kafka" / "kafka.pid").exists()
        assert not (tmp_path / "kafka" / "logs").exists()  # nothing formatted or launched


@needs_broker
def test_cli_port_in_use_exits_2(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "tools.embedded_kafka", "start", "--port", str(taken),
             "--controller-port", str(free_port()), "--data-dir", str(tmp_path / "kafka")],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    error_lines = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    assert "already in use" in error_lines[0] and str(taken) in error_lines[0]
    assert res.stderr.rstrip().endswith(error_lines[0])
