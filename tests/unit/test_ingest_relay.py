"""The behaviours the py-libp2p adaptation of ingest/relay/gossipsub.py fixes, each shown against
0.8.1's own class where it can be. The pinned version and the fingerprints of the 0.8.1 source
the relay overrides or relies on: ingest/p2p_patches.py's REGISTRY (tests/unit/test_p2p_patches.py)."""
from __future__ import annotations

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.mcache import MessageCache
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue

from ingest.framing import FrameError, FrameReader
from ingest.host import build_host, listen_addrs
from ingest.relay import gossipsub as relay
from ingest.relay.codec import DEFAULT_PUBSUB_TOPIC, RELAY_CODEC, RELAY_CODEC_BETA2, relay_message_id
from ingest.relay.gossipsub import (
    RelayMessageCache,
    RelayObserver,
    RelayPubsub,
    SeenCache,
    WakuRelayRouter,
)


def test_router_parameters_are_the_reference_nodes():
    r = WakuRelayRouter()
    assert r.get_protocols() == [RELAY_CODEC, RELAY_CODEC_BETA2]
    assert (r.degree, r.degree_low, r.degree_high, r.degree_lazy) == (6, 4, 8, 6)
    assert r.heartbeat_interval == 1
    assert isinstance(r.mcache, RelayMessageCache)
    assert not r.adaptive_gossip_enabled and not r.spam_protection_enabled and not r.eclipse_protection_enabled


def test_heartbeat_stays_one_second():
    """0.8.1's adaptive gossip would move a 1 s heartbeat to 30-60 s on poor health."""
    r = WakuRelayRouter()
    assert r.heartbeat_interval == 1
    # What 0.8.1's heartbeat runs every round (gossipsub.py: heartbeat -> _adapt_gossip_parameters)
    # on a network it judges unhealthy; with adaptive gossip on it would move the heartbeat to 30 s.
    r.network_health_score = 0.1
    r._adapt_gossip_parameters()
    assert not r.adaptive_gossip_enabled
    assert r.heartbeat_interval == 1


def test_relay_protocol_ids_are_accepted_with_v11_semantics():
    r = WakuRelayRouter()
    with pytest.raises(ValueError):
        GossipSub([RELAY_CODEC], 6, 4, 8).add_peer(ID(b"\x00\x01x"), RELAY_CODEC)  # 0.8.1 refuses it
    for i, codec in enumerate((RELAY_CODEC, RELAY_CODEC_BETA2)):
        peer = ID(bytes([0, 1, i]))
        r.add_peer(peer, codec)
        assert r.peer_protocol[peer] == PROTOCOL_ID_V11
        assert r.wire_protocol[peer] == codec
        r.remove_peer(peer)
        assert peer not in r.wire_protocol


def _unsigned(data: bytes) -> rpc_pb2.Message:
    return rpc_pb2.Message(data=data, topicIDs=[DEFAULT_PUBSUB_TOPIC])


def test_message_cache_is_keyed_by_relay_message_id():
    plain = MessageCache(3, 5)
    plain.put(_unsigned(b"one"))
    plain.put(_unsigned(b"two"))
    assert len(plain.msgs) == 1  # 0.8.1: every unsigned message has the key b""
    cache = RelayMessageCache(3, 5)
    cache.put(_unsigned(b"one"))
    cache.put(_unsigned(b"two"))
    assert cache.get(relay_message_id(b"one")).data == b"one"
    assert cache.get(relay_message_id(b"two")).data == b"two"
    assert cache.window(DEFAULT_PUBSUB_TOPIC) == [relay_message_id(b"one"), relay_message_id(b"two")]


def test_unsigned_messages_are_not_equivocation():
    plain = GossipSub(["/meshsub/1.1.0"], 6, 4, 8)
    assert plain._check_equivocation(_unsigned(b"one"))
    assert not plain._check_equivocation(_unsigned(b"two"))  # 0.8.1 refuses the second one
    r = WakuRelayRouter()
    assert r._check_equivocation(_unsigned(b"one")) and r._check_equivocation(_unsigned(b"two"))
    assert r.equivocation_detection == {}


def test_no_rate_limit_on_forwarders():
    plain = GossipSub(["/meshsub/1.1.0"], 6, 4, 8)
    peer = ID(b"\x00\x01p")
    assert not all(plain._check_spam_protection(peer, _unsigned(bytes([i]))) for i in range(20))
    r = WakuRelayRouter()
    assert all(r._check_spam_protection(peer, _unsigned(i.to_bytes(2, "big"))) for i in range(1000))


def test_gossip_peer_count_is_dlazy_or_factor():
    r = WakuRelayRouter()
    assert r._get_adaptive_gossip_peers_count("t", 3) == 3
    assert r._get_adaptive_gossip_peers_count("t", 10) == 6
    assert r._get_adaptive_gossip_peers_count("t", 100) == 25


class _Counting(RelayObserver):
    def __init__(self) -> None:
        self.forward_dropped = 0

    def on_forward_dropped(self, peer_id, count):
        self.forward_dropped += count


def test_outbound_drops_are_counted():
    obs = _Counting()
    r = WakuRelayRouter(observer=obs)
    rpc = rpc_pb2.RPC(publish=[_unsigned(b"x"), _unsigned(b"y")])
    r._handle_dropped_rpc(ID(b"\x00\x01p"), rpc, "queue_full")
    assert obs.forward_dropped == 2


class _FakeStream:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.reads = 0

    async def read(self, n: int) -> bytes:
        self.reads += 1
        return self.chunks.pop(0) if self.chunks else b""


def _frame(payload: bytes) -> bytes:
    from libp2p.utils import encode_varint_prefixed

    return encode_varint_prefixed(payload)


def test_frame_reader_splits_and_joins_frames():
    frames = [b"a" * 5, b"b" * 300, b"", b"c" * 70000]
    wire = b"".join(_frame(f) for f in frames)
    # Arbitrary chunk boundaries, including inside a varint.
    chunks = [wire[:1], wire[1:4], wire[4:310], wire[310:]]
    n_chunks = len(chunks)
    stream = _FakeStream(chunks)

    async def main():
        reader = FrameReader(stream, 1 << 20)
        return [await reader.read_frame() for _ in frames]

    assert trio.run(main) == frames
    assert stream.reads == n_chunks


def test_frame_reader_limits_frame_size():
    stream = _FakeStream([_frame(b"x" * 2000)])

    async def main():
        await FrameReader(stream, 1000).read_frame()

    with pytest.raises(FrameError):
        trio.run(main)


def test_pubsub_is_strict_no_sign_with_content_ids():
    la = listen_addrs("127.0.0.1", 0, -1)
    host = build_host(create_new_key_pair(), la)
    router, pubsub = relay.new_relay(host)
    assert isinstance(pubsub, RelayPubsub)
    assert pubsub.strict_signing is False and pubsub.sign_key is None
    assert pubsub.get_message_id(_unsigned(b"abc")) == relay_message_id(b"abc")
    assert pubsub.max_inbound_rpc_size > 153_600


@pytest.mark.parametrize("per_rpc", [relay.MAX_MESSAGES_PER_RPC, 50])
def test_outbound_queue_is_deepened_and_coalesced(per_rpc):
    """The sending loop raises the 32-RPC bound and merges queued RPCs into one write, with at
    most `per_rpc` published messages in each (go-libp2p receivers drop what overflows their
    32-deep validation queue: by default one message per RPC, as go-libp2p sends)."""
    la = listen_addrs("127.0.0.1", 0, -1)
    host = build_host(create_new_key_pair(), la)
    _, pubsub = relay.new_relay(host, max_messages_per_rpc=per_rpc)
    written: list[rpc_pb2.RPC] = []

    async def fake_write(stream, rpc):
        written.append(rpc)
        return True

    pubsub.write_msg = fake_write  # type: ignore[method-assign]
    queue = RpcQueue()
    assert queue._queue.max_size == 32

    async def main():
        for i in range(100):
            assert queue.push(rpc_pb2.RPC(publish=[_unsigned(bytes([i]))])) or i >= 32
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pubsub.handle_sending_messages, ID(b"\x00\x01p"), None, queue)
            await trio.sleep(0.05)
            queue.close()

    queue._queue.max_size = 100  # as handle_sending_messages will set it (to a larger bound)
    trio.run(main)
    assert queue._queue.max_size == relay.OUTBOUND_QUEUE_RPCS
    assert sum(len(r.publish) for r in written) == 100
    assert max(len(r.publish) for r in written) <= per_rpc
    assert len(written) < 5 if per_rpc >= 50 else len(written) == 100


def test_ihave_is_capped():
    r = WakuRelayRouter()

    class _PS:
        peer_topics = {DEFAULT_PUBSUB_TOPIC: {ID(b"\x00\x01a")}}

    r.pubsub = _PS()  # type: ignore[assignment]
    r.mesh[DEFAULT_PUBSUB_TOPIC] = set()
    r.peer_protocol[ID(b"\x00\x01a")] = PROTOCOL_ID_V11
    for i in range(relay.MAX_IHAVE_LENGTH + 10):
        r.mcache.put(_unsigned(i.to_bytes(4, "big")))
    gossip = r.gossip_heartbeat()
    ids = gossip[ID(b"\x00\x01a")][DEFAULT_PUBSUB_TOPIC]
    assert len(ids) == relay.MAX_IHAVE_LENGTH
    assert ids[-1] == relay_message_id((relay.MAX_IHAVE_LENGTH + 9).to_bytes(4, "big"))


def test_iwant_is_served_from_the_content_addressed_cache():
    r = WakuRelayRouter()
    sent = []
    r.send_rpc = lambda peer, rpc, priority=False: sent.append(rpc)  # type: ignore[method-assign]
    r.pubsub = object()  # type: ignore[assignment]
    for data in (b"one", b"two"):
        r.mcache.put(_unsigned(data))
    trio.run(r.handle_iwant, rpc_pb2.ControlIWant(messageIDs=[relay_message_id(b"two")]), ID(b"\x00\x01a"))
    assert [m.data for m in sent[0].publish] == [b"two"]


def test_seen_cache_expires_in_buckets(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(relay.time, "monotonic", lambda: now[0])
    cache = SeenCache(ttl=120, buckets=12)
    assert cache.add(b"a") and not cache.add(b"a") and cache.has(b"a")
    now[0] += 60
    cache.add(b"b")
    now[0] += 59  # a: 119 s old: still seen (kept between ttl and ttl + one bucket)
    assert cache.has(b"a")
    now[0] += 12  # a: 131 s old
    assert not cache.has(b"a") and cache.has(b"b")
    now[0] += 1000  # idle for long: everything expired at once
    assert not cache.has(b"b") and cache.length() == 0


def test_pubsub_uses_the_bucketed_seen_cache():
    la = listen_addrs("127.0.0.1", 0, -1)
    _, pubsub = relay.new_relay(build_host(create_new_key_pair(), la))
    assert isinstance(pubsub.seen_messages, SeenCache)


def test_leave_unsubscribes_and_join_takes_the_topic_again():
    """REST's DELETE /relay/v1/subscriptions leaves relay on the topic (as nwaku): no more
    subscription, mesh or validator, so its messages are neither relayed nor stored."""
    host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
    router, pubsub = relay.new_relay(host)
    topic = "/waku/2/rs/1/3"

    async def main() -> list[tuple[bool, bool, bool]]:
        states = []
        for step in (pubsub.join, pubsub.leave, pubsub.join):
            await step(topic)
            states.append((topic in pubsub.topic_ids, topic in router.mesh, topic in pubsub.topic_validators))
        return states

    assert trio.run(main) == [(True, True, True), (False, False, False), (True, True, True)]


def test_own_publish_floods_subscribers_and_forwarding_keeps_to_the_mesh():
    """nwaku's GossipsubParameters set floodPublish: a node's own message goes to every
    connected peer subscribed to the topic (a mesh not formed yet right after a REST
    (re)subscribe must not keep it from a peer), a forwarded one only to the mesh."""
    host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
    router, pubsub = relay.new_relay(host)
    topic = "/waku/2/rs/1/3"
    mesh_peer, other, unsubscribed, forwarder = (ID(b"\x00\x01" + bytes([i])) for i in range(4))
    for peer in (mesh_peer, other, unsubscribed, forwarder):
        pubsub.peers[peer] = object()  # type: ignore[assignment]
        pubsub.peer_queues[peer] = RpcQueue()
        router.peer_protocol[peer] = PROTOCOL_ID_V11
    pubsub.peer_topics[topic] = {mesh_peer, other, forwarder}
    router.mesh[topic] = {mesh_peer, forwarder}

    def queued() -> dict[ID, int]:
        return {p: len(q._queue) for p, q in pubsub.peer_queues.items()}

    msg = rpc_pb2.Message(data=b"own", topicIDs=[topic])
    router.forward(pubsub.my_id, msg, relay_message_id(msg.data))
    assert queued() == {mesh_peer: 1, other: 1, unsubscribed: 0, forwarder: 1}
    msg = rpc_pb2.Message(data=b"relayed", topicIDs=[topic])
    router.forward(forwarder, msg, relay_message_id(msg.data))
    assert queued() == {mesh_peer: 2, other: 1, unsubscribed: 0, forwarder: 1}
