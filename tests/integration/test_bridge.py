"""The ingest bridge with real libp2p hosts and the real (embedded) Kafka broker.

In one process: a bridge and two relay publishers (TCP+yamux on /vac/waku/relay/2.0.0,
websocket+mplex on the -beta2 id). Every valid message reaches Kafka exactly once with the
right key and fields; duplicates are not produced again; signed, authored, oversized,
undecodable, empty-content-topic and long-meta messages are rejected and counted, and the
bridge keeps serving."""
from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX

from core.config import Config, load_config
from core.records import ingest_key
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.publisher import Publisher
from ingest.relay.codec import DEFAULT_PUBSUB_TOPIC, RELAY_CODEC_BETA2
from ingest.settings import BridgeSettings
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage

pytestmark = pytest.mark.integration

SHARD = "/waku/2/rs/1/3"
CT = "/bridge-test/1/chat/proto"


def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    from core.kafka import ensure_topics

    ensure_topics(bootstrap, {name: partitions})


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list:
    """Every record of `topic` (waits until `expected` are there, then 1 s more for extras)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None, consumer_timeout_ms=1000)
    records: list = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=500)
            for recs in batch.values():
                records.extend(recs)
            if len(records) >= expected and not batch:
                break
    finally:
        consumer.close()
    return records


@pytest.fixture
def kafka_topic(kafka: str) -> Iterator[str]:
    name = f"test.bridge.{uuid.uuid4().hex[:8]}"
    create_topic(kafka, name)
    yield name


def local_bridge(bootstrap: str, topic: str, tmp_path, *extra: str) -> tuple[Bridge, BridgeMetrics]:
    """A bridge in this process producing to `topic`: TCP on 127.0.0.1 (any free port), no
    websocket, no metrics endpoint, its key in tmp_path; `extra`: more `section.key=value`."""
    cfg = load_config([
        f"kafka.bootstrap_servers={bootstrap}", f"topics.messages={topic}", f"bridge.key_file={tmp_path / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1", *extra,
    ], environ={})
    metrics = BridgeMetrics()
    return Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open(os.devnull, "w")), metrics


def bridge_config(config: Config, kafka: str, topic: str, tmp_path, *extra: str) -> Config:
    return load_config([
        f"kafka.bootstrap_servers={kafka}",
        f"topics.messages={topic}",
        f"bridge.key_file={tmp_path / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=0", "bridge.metrics_port=-1",
        f"bridge.pubsub_topics={DEFAULT_PUBSUB_TOPIC},{SHARD}",
        *extra,
    ], environ={})


def signed(kp, data: bytes, topic: str) -> rpc_pb2.Message:
    """A message signed the way py-libp2p's default (StrictSign) pubsub signs."""
    msg = rpc_pb2.Message(data=data, topicIDs=[topic], from_id=ID.from_pubkey(kp.public_key).to_bytes(),
                          seqno=(1).to_bytes(8, "big"))
    msg.signature = kp.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
    msg.key = kp.public_key.serialize()
    return msg


async def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.05)


def test_relay_messages_reach_kafka_exactly_once(config, kafka, kafka_topic, tmp_path):
    cfg = bridge_config(config, kafka, kafka_topic, tmp_path)
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))
    n_a, n_b = 150, 100
    sent: dict[bytes, tuple[str, WakuMessage]] = {}
    window: dict[str, float] = {}

    def msg(i: int, who: str) -> WakuMessage:
        return WakuMessage(payload=f"{who}-{i}".encode() * 20, content_topic=CT, timestamp=time.time_ns(),
                           meta=b"m%d" % i if i % 2 else None, version=i % 3)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            tcp = next(str(a) for a in bridge.addrs if "/ws" not in str(a))
            ws = next(str(a) for a in bridge.addrs if "/ws" in str(a))
            pub_a = Publisher()
            pub_b = Publisher(protocols=[RELAY_CODEC_BETA2], muxers=["mplex"])
            async with pub_a.running([DEFAULT_PUBSUB_TOPIC, SHARD]), pub_b.running([DEFAULT_PUBSUB_TOPIC]):
                await pub_a.connect(tcp)
                await pub_b.connect(ws)
                await pub_a.wait_for_mesh(DEFAULT_PUBSUB_TOPIC)
                await pub_a.wait_for_mesh(SHARD)
                await pub_b.wait_for_mesh(DEFAULT_PUBSUB_TOPIC)
                assert bridge.router.wire_protocol[pub_b.host.get_id()] == RELAY_CODEC_BETA2
                window["start"] = time.time()
                # Misbehaving peer first: every kind of invalid message, then valid ones.
                bad_kp = pub_b.key_pair
                good = WakuMessage(payload=b"fine", content_topic=CT)
                for bad in (
                    signed(bad_kp, good.SerializeToString(), DEFAULT_PUBSUB_TOPIC),
                    rpc_pb2.Message(data=WakuMessage(payload=b"a", content_topic=CT).SerializeToString(),
                                    topicIDs=[DEFAULT_PUBSUB_TOPIC], from_id=pub_b.host.get_id().to_bytes()),
                    rpc_pb2.Message(data=WakuMessage(payload=b"x" * 160_000, content_topic=CT).SerializeToString(),
                                    topicIDs=[DEFAULT_PUBSUB_TOPIC]),
                    rpc_pb2.Message(data=b"\xff\xff\xff\xff", topicIDs=[DEFAULT_PUBSUB_TOPIC]),
                    rpc_pb2.Message(data=WakuMessage(payload=b"no topic").SerializeToString(),
                                    topicIDs=[DEFAULT_PUBSUB_TOPIC]),
                    rpc_pb2.Message(
                        data=WakuMessage(payload=b"m", content_topic=CT, meta=b"x" * 65).SerializeToString(),
                        topicIDs=[DEFAULT_PUBSUB_TOPIC]),
                ):
                    await pub_b.publish_unchecked(bad)
                for i in range(n_a):
                    topic = SHARD if i % 5 == 0 else DEFAULT_PUBSUB_TOPIC
                    m = msg(i, "a")
                    await pub_a.publish(m, topic)
                    sent[ingest_key(topic, m)] = (topic, m)
                for i in range(n_b):
                    m = msg(i, "b")
                    await pub_b.publish(m)
                    sent[ingest_key(DEFAULT_PUBSUB_TOPIC, m)] = (DEFAULT_PUBSUB_TOPIC, m)
                # Duplicates: B sends A's messages again; the bridge must not produce them twice.
                for topic, m in list(sent.values())[:20]:
                    if topic == DEFAULT_PUBSUB_TOPIC:
                        await pub_b.publish_unchecked(rpc_pb2.Message(data=m.SerializeToString(), topicIDs=[topic]))
                await wait_for(lambda: metrics.value("waku_bridge_produced_total") >= n_a + n_b)
                window["end"] = time.time()
            bridge.stop()

    trio.run(main)

    records = consume_all(kafka, kafka_topic, n_a + n_b)
    assert len(records) == n_a + n_b
    assert {r.key for r in records} == set(sent)
    for r in records:
        rec = pr.IngestRecord()
        rec.ParseFromString(r.value)
        topic, m = sent[r.key]
        assert rec.pubsub_topic == topic
        assert rec.message == m
        assert rec.source == pr.RELAY
        assert rec.bridge_id == bridge.bridge_id
        assert window["start"] <= rec.received_time <= window["end"]
    v = metrics.value
    for reason in ("signed", "authored", "oversized", "undecodable", "empty_content_topic", "meta_too_long"):
        assert v("waku_bridge_rejected_total", reason=reason) == 1, reason
    assert v("waku_bridge_accepted_total") == n_a + n_b
    assert v("waku_bridge_produced_total") == n_a + n_b
    assert v("waku_bridge_duplicates_total") >= 1
    assert v("waku_bridge_received_total") == v("waku_bridge_accepted_total") + v("waku_bridge_duplicates_total") + 6
    assert sum(v("waku_bridge_dropped_total", reason=r) for r in
               ("kafka_backlog", "kafka_rejected", "shutdown", "subscription_full")) == 0


def test_messages_relayed_through_another_node(config, kafka, kafka_topic, tmp_path):
    """publisher -> relay node -> bridge: the middle node's adapted router forwards them."""
    cfg = bridge_config(config, kafka, kafka_topic, tmp_path)
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))
    n = 50

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            middle, origin = Publisher(), Publisher()
            async with middle.running(), origin.running():
                await middle.connect(str(bridge.addrs[0]))
                await origin.connect(str(next(a for a in middle.host.get_addrs() if "/ws" not in str(a))))
                await middle.wait_for_mesh(peers=2)
                await origin.wait_for_mesh()
                assert bridge.host.get_id() not in origin.host.get_connected_peers()
                for i in range(n):
                    await origin.publish(WakuMessage(payload=b"hop %d" % i, content_topic=CT))
                await wait_for(lambda: metrics.value("waku_bridge_produced_total") >= n)
                assert middle.received == n
            bridge.stop()

    trio.run(main)
    assert len(consume_all(kafka, kafka_topic, n)) == n


def test_noise_only_and_malformed_frames_do_not_stop_the_bridge(config, kafka, kafka_topic, tmp_path):
    """A plaintext-only peer cannot connect; a peer sending a frame that is not a pubsub RPC is
    counted (malformed_rpc) and cut off, and the bridge keeps relaying for everyone else."""
    from libp2p import new_host
    from libp2p.custom_types import TProtocol
    from libp2p.network.exceptions import SwarmException
    from libp2p.security.insecure.transport import PLAINTEXT_PROTOCOL_ID, InsecureTransport
    from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
    from libp2p.utils import encode_varint_prefixed

    from ingest.host import listen_addrs
    from ingest.relay.codec import RELAY_CODEC
    from ingest.settings import parse_peer

    cfg = bridge_config(config, kafka, kafka_topic, tmp_path)
    metrics = BridgeMetrics()
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open("/dev/null", "w"))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(bridge.run)
            upgrader = bridge.host.get_network().upgrader
            assert list(upgrader.security_multistream.transports) == [NOISE_PROTOCOL_ID]
            addr = str(next(a for a in bridge.addrs if "/ws" not in str(a)))

            kp = create_new_key_pair()
            la = listen_addrs("127.0.0.1", 0, -1)
            plain = new_host(key_pair=kp, sec_opt={TProtocol(PLAINTEXT_PROTOCOL_ID): InsecureTransport(kp)},
                             listen_addrs=la)
            async with plain.run(la):
                with pytest.raises((SwarmException, trio.TooSlowError)):  # refused, or never answered
                    with trio.fail_after(10):
                        await plain.connect(parse_peer(addr))

            rogue, honest = Publisher(), Publisher()
            async with rogue.running(), honest.running():
                await rogue.connect(addr)
                await honest.connect(addr)
                await honest.wait_for_mesh()
                stream = await rogue.host.new_stream(bridge.host.get_id(), [TProtocol(RELAY_CODEC)])
                await stream.write(encode_varint_prefixed(b"\x0a\xff\xff\xff\xff\x0f"))  # not an RPC
                await wait_for(lambda: metrics.value("waku_bridge_rejected_total", reason="malformed_rpc") == 1)
                for i in range(20):
                    await honest.publish(WakuMessage(payload=b"%d" % i, content_topic=CT))
                await wait_for(lambda: metrics.value("waku_bridge_produced_total") >= 20)
            bridge.stop()

    trio.run(main)
