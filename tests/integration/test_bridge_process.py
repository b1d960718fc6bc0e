"""`waku-bridge` as a process: listen lines, a restart keeps the peer id, SIGTERM flushes and
exits 0, the publisher CLI, static peers dialled and re-dialled, and one-line errors (exit 2)
for bad configuration, a taken port and an unreadable key file."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
import trio

from ingest.publisher import Publisher
from tools.processes import REPO_ROOT, free_port, start_bridge, start_publisher

pytestmark = pytest.mark.integration


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    from core.kafka import ensure_topics

    ensure_topics(bootstrap, {name: partitions})


def count_records(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        return sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()


def overrides(kafka: str, topic: str, tmp_path, *extra: str) -> list[str]:
    return [f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}",
            f"bridge.key_file={tmp_path / 'bridge.key'}", "bridge.listen_host=127.0.0.1",
            "bridge.tcp_port=0", "bridge.ws_port=0", *extra]


def metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=timeout)


def test_restart_keeps_peer_id_and_sigterm_flushes(kafka, tmp_path):
    topic = f"test.bridge.proc.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)
    port = free_port()
    log = open(tmp_path / "bridge.log", "w")
    first = start_bridge(overrides(kafka, topic, tmp_path, f"bridge.metrics_port={port}"), log=log)
    try:
        assert len(first.addrs) == 2  # TCP and websocket
        assert any("/ws/p2p/" in a for a in first.addrs)
        assert all(a.endswith("/p2p/" + first.peer_id) for a in first.addrs)
        pub = start_publisher(first.tcp_addr, rate=0, count=300, payload_size=1024)
        out, _ = pub.communicate(timeout=120)
        assert pub.returncode == 0, out
        done = json.loads(out.strip().splitlines()[-1])
        assert done["event"] == "done" and done["published"] == 300
        deadline = time.monotonic() + 30
        while metric(port, "waku_bridge_accepted_total") < 300 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        code = first.stop()
    assert code == 0
    assert "bridge stopped: received 300, accepted 300, produced 300" in (tmp_path / "bridge.log").read_text()
    assert count_records(kafka, topic) == 300

    second = start_bridge(overrides(kafka, topic, tmp_path, "bridge.metrics_port=-1"), log=subprocess.DEVNULL)
    try:
        assert second.peer_id == first.peer_id
    finally:
        assert second.stop() == 0


def test_id_command_matches_the_bridge(tmp_path):
    key = tmp_path / "k"
    a = run_cli("id", "--set", f"bridge.key_file={key}")
    b = run_cli("id", "--set", f"bridge.key_file={key}")
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout.startswith("16Uiu2")  # secp256k1


@pytest.mark.parametrize("setting,message", [
    ("bridge.tcp_port=abc", "error: bridge.tcp_port: expected an integer, got 'abc'"),
    ("bridge.pubsub_topics=/not/a/waku/topic", "error: bridge.pubsub_topics:"),
    ("bridge.static_peers=/ip4/127.0.0.1/tcp/1", "error: bridge.static_peers:"),
])
def test_bad_configuration_is_one_line(setting, message, tmp_path):
    r = run_cli("run", "--set", f"bridge.key_file={tmp_path / 'k'}", "--set", setting)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith(message)
    assert "Traceback" not in r.stderr


def test_port_taken_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_cli("run", "--set", f"bridge.key_file={tmp_path / 'k'}", "--set", "bridge.listen_host=127.0.0.1",
                    "--set", f"bridge.tcp_port={port}", "--set", "bridge.ws_port=-1", "--set", "bridge.metrics_port=-1")
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last == f"error: cannot listen on /ip4/127.0.0.1/tcp/{port}: address already in use"


def test_unreadable_key_file_is_one_line(tmp_path):
    bad = tmp_path / "garbage.key"
    bad.write_bytes(b"\x00garbage")
    r = run_cli("run", "--set", f"bridge.key_file={bad}")
    assert r.returncode == 2
    assert r.stderr.strip().endswith(f"error: key file {bad} holds neither a hex node key nor a libp2p private key")
    r = run_cli("run", "--set", f"bridge.key_file={tmp_path}")
    assert r.returncode == 2
    assert r.stderr.strip().endswith(f"error: key file {tmp_path} is a directory")


def test_publisher_cli_errors(tmp_path):
    r = run_cli("publish", "--peer", "/ip4/127.0.0.1/tcp/1")
    assert r.returncode == 2 and r.stderr.strip().startswith("error: --peer:")
    peer = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWAhj7medGiznMGwnzNG16MwTzHMZcQucyYPiGn1JfQNgM"
    r = run_cli("publish", "--peer", peer, "--wait-s", "5")
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].startswith("error: ")


def test_static_peers_are_dialled_and_redialled(kafka, tmp_path):
    """The bridge dials its static peer, and dials it again after the connection drops."""
    topic = f"test.bridge.static.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, topic)

    async def main() -> None:
        pub = Publisher()
        async with pub.running():
            addr = str(next(a for a in pub.host.get_addrs() if "/ws" not in str(a)))
            bridge = await trio.to_thread.run_sync(lambda: start_bridge(
                overrides(kafka, topic, tmp_path, f"bridge.static_peers={addr}", "bridge.redial_interval_s=0.5",
                          "bridge.metrics_port=-1"), log=subprocess.DEVNULL))
            try:
                await pub.wait_for_mesh(timeout=20)
                await pub.host.disconnect(pub.host.get_connected_peers()[0])
                with trio.fail_after(20):
                    while not pub.host.get_connected_peers():
                        await trio.sleep(0.1)
                await pub.wait_for_mesh(timeout=20)
            finally:
                await trio.to_thread.run_sync(bridge.stop)

    trio.run(main)


def test_sigterm_with_kafka_down_exits_and_counts(tmp_path):
    """Kafka unreachable: the bridge still starts and relays; on SIGTERM it waits
    shutdown_timeout_s, counts what was never acknowledged as dropped (shutdown), exits 0."""
    metrics_port = free_port()
    log = tmp_path / "bridge.log"
    bridge = start_bridge(overrides(f"127.0.0.1:{free_port()}", "waku.messages", tmp_path,
                                    f"bridge.metrics_port={metrics_port}", "bridge.shutdown_timeout_s=1"),
                          log=open(log, "w"))
    try:
        pub = start_publisher(bridge.tcp_addr, rate=0, count=10)
        out, _ = pub.communicate(timeout=60)
        assert pub.returncode == 0, out
        deadline = time.monotonic() + 20
        while metric(metrics_port, "waku_bridge_accepted_total") < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert metric(metrics_port, "waku_bridge_kafka_outstanding") == 10
    finally:
        began = time.monotonic()
        code = bridge.stop(60)
    assert code == 0
    assert time.monotonic() - began < 30
    text = log.read_text()
    assert "10 records not acknowledged within 1 s of shutdown" in text
    assert "accepted 10, produced 0" in text
