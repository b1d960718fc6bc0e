"""py-libp2p gossipsub adapted to Waku relay (written against libp2p==0.8.1 exactly).

Plain py-libp2p 0.8.1 cannot be a Waku relay node; each shortcoming and its fix here:

- it refuses any protocol id but /meshsub/* and /floodsub/*: :meth:`WakuRelayRouter.add_peer`
  maps /vac/waku/relay/2.0.0(-beta2) to gossipsub v1.1 semantics (what nwaku speaks under them);
- its message cache and equivocation check are keyed by from+seqno, so every unsigned message
  has the same key: :class:`RelayMessageCache` keys by the relay message id, equivocation is
  off (a content-addressed id cannot equivocate) and :meth:`WakuRelayRouter.publish` never
  consults the from+seqno table;
- it rate limits every forwarder, itself included, to 10 messages/s per topic, and adapts its
  heartbeat to 30-120 s: both off, heartbeat 1 s, D 6/4/8, Dlazy 6 (nwaku's parameters);
- it signs and stamps from/seqno on publish, and its subscription channels and outbound
  queues drop silently when full: :class:`RelayPubsub` publishes StrictNoSign messages,
  rejects signed/authored ones, hands accepted messages to a sink that applies backpressure
  (the peer's stream is read inline, so a slow sink slows the sender through flow control),
  and counts every outbound drop;
- it reads each frame with 1-byte reads (a yamux window update per byte) and writes one
  frame per RPC: :class:`RelayPubsub` reads through the bridge's buffered frame reader
  (ingest/framing.py) and coalesces queued RPCs into one frame per write;
- its yamux streams grow their receive window up to 16 MiB as long as the reader keeps
  reading, so a peer publishing faster than the bridge processes queues up to 16 MiB
  (~14,000 small messages: seconds under load) ahead of the read loop, and go-yamux's
  keepalive ping waits behind it (10 s, then go-libp2p closes the connection):
  `ingest.p2p_patches.bound_receive_windows` keeps the process's yamux receive windows at
  `receive_window` (256 KiB, nim-libp2p's fixed window), so the backlog is the peer's own queue, and each
  message is stamped when its frame comes off the stream;
- it sends its own messages to the mesh (or fanout) only, so a message published right after
  a subscribe misses peers not grafted yet: :meth:`WakuRelayRouter._forward_targets` floods
  our own publishes to every subscribed peer (nim-libp2p's floodPublish, on in nwaku).

Every override names the 0.8.1 behaviour it replaces and has its record, with the fingerprint
of the source it overrides, in `ingest.p2p_patches.REGISTRY` (asserted by
``tests/unit/test_p2p_patches.py``), so an upgrade fails loudly.
"""
from __future__ import annotations

import collections
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Protocol

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.io.exceptions import IOException
from libp2p.network.connection.exceptions import RawConnError
from libp2p.network.stream.exceptions import StreamEOF, StreamError
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.pubsub import floodsub
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.mcache import CacheEntry, MessageCache
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.rpc_queue import RpcQueue
from libp2p.pubsub.utils import maybe_consume_signed_record
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE

from ingest import p2p_patches
from ingest.framing import FrameError, FrameReader
from ingest.ratelimit import TokenBucket
from ingest.relay.codec import RELAY_CODECS, Reject, relay_message_id
from ingest.relay.validator import WakuMessageValidator
from schemas.waku_message_pb2 import WakuMessage

log = logging.getLogger("ingest.relay")

# The reference nodes' gossipsub parameters (nwaku on nim-libp2p).
D = 6
D_LOW = 4
D_HIGH = 8
D_LAZY = 6
GOSSIP_FACTOR = 0.25
HEARTBEAT_INTERVAL_S = 1
SEEN_TTL_S = 120
GOSSIP_WINDOW = 3    # heartbeats whose message ids are gossiped (IHAVE)
GOSSIP_HISTORY = 5   # heartbeats a message stays in the cache (IWANT)
# Largest inbound RPC frame: above the 150 KiB message limit so an oversized message reaches
# validation and is counted, instead of resetting the stream.
MAX_RPC_BYTES = 1024 * 1024
OUTBOUND_QUEUE_RPCS = 4096   # py-libp2p: 32
COALESCE_BYTES = 256 * 1024  # queued RPCs merged into one frame up to this size
# Published messages per outgoing RPC. go-libp2p senders put one per RPC, and its receivers
# push every message of an RPC into a 32-deep validation queue at once (dropping the rest):
# more than a few per RPC loses messages at go-waku peers under a burst.
MAX_MESSAGES_PER_RPC = 1
# ... and paced per peer (token bucket, messages/s and burst): a go-libp2p receiver that gets no
# CPU for a while (a loaded machine) finds the whole backlog in its socket when it runs again and
# overflows its queue. Measured with go-waku stopped (SIGSTOP) 300 ms of every 500 ms during a
# 2,000-message burst: 1,000/s lost 205, 250/s lost none (and none with 500 ms of every 700 ms).
# The burst stays well under the 32-deep queue; 0: no pacing.
OUT_RATE_PER_PEER = 250.0
OUT_BURST_PER_PEER = 16
MAX_IHAVE_LENGTH = 5000  # message ids per IHAVE (go-libp2p / nim-libp2p); 0.8.1 sends all
# A yamux stream's receive window, at most (py-libp2p 0.8.1 auto-tunes it up to 16 MiB;
# nim-libp2p keeps 256 KiB, yamux's initial window, which is also the least there is).
RECEIVE_WINDOW = DEFAULT_WINDOW_SIZE
READ_CHUNK = 256 * 1024
_WARN_EVERY_S = 10.0


class RelayObserver:
    """Counts relay events (the metrics implement this; the default counts nothing)."""

    def on_received(self, topic: str) -> None: ...
    def on_duplicate(self, topic: str) -> None: ...
    def on_accepted(self, topic: str) -> None: ...
    def on_rejected(self, reason: Reject) -> None: ...
    def on_forward_dropped(self, peer_id: ID, count: int) -> None: ...
    def on_subscription_dropped(self, topic: str) -> None: ...


class RelaySink(Protocol):
    """Where accepted messages go. May block: blocking is the backpressure on the relay."""

    def __call__(
        self, pubsub_topic: str, message: WakuMessage, data: bytes, message_id: bytes,
        received_time: float, arrival: float, /,
    ) -> Awaitable[None]: ...


class AsyncCheck(Protocol):
    """A message check that waits (RLN, ingest/rln/service.RlnRelay): `validate` gives None
    when the message may be relayed, else its rejection reason (a `Reject` value)."""

    def applies(self, topic: str) -> bool: ...

    def validate(self, topic: str, message: WakuMessage, /) -> Awaitable[str | None]: ...


class _RateLimitedWarning:
    """One warning per interval with the number of events it stands for."""

    def __init__(self, logger: logging.Logger, interval_s: float = _WARN_EVERY_S) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.last = 0.0
        self.suppressed = 0

    def __call__(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self.last >= self.interval_s:
            extra = f" (and {self.suppressed} more since the last warning)" if self.suppressed else ""
            self.logger.warning(msg + extra, *args)
            self.last = now
            self.suppressed = 0
        else:
            self.suppressed += 1


class SeenCache:
    """Message ids seen in the last `ttl` seconds (first-seen, like nim-libp2p and go-libp2p),
    kept in time buckets that expire whole. Replaces 0.8.1's LastSeenCache, whose thread sweeps
    the entire dict under a lock every minute: ~50 ms with the relay blocked at 4,000 msg/s."""

    def __init__(self, ttl: float = SEEN_TTL_S, buckets: int = 12) -> None:
        self.ttl = ttl
        self.span = ttl / buckets
        self.buckets = buckets
        self.sets: collections.deque[set[bytes]] = collections.deque([set()])
        self.started = time.monotonic()

    def _rotate(self) -> None:
        now = time.monotonic()
        if now - self.started < self.span:
            return
        if now - self.started > self.ttl + self.span:
            self.sets = collections.deque([set()])
            self.started = now
            return
        while now - self.started >= self.span:
            self.started += self.span
            self.sets.appendleft(set())
        # The newest bucket plus `buckets` full ones: an id stays between ttl and ttl + span.
        while len(self.sets) > self.buckets + 1:
            self.sets.pop()

    def has(self, key: bytes) -> bool:
        self._rotate()
        return any(key in s for s in self.sets)

    def add(self, key: bytes) -> bool:
        """Mark `key` seen; True if it was not."""
        new = not self.has(key)
        if new:
            self.sets[0].add(key)
        return new

    def mark(self, key: bytes) -> None:
        """Mark `key` seen, known not to be (the caller asked `has` just before)."""
        self._rotate()
        self.sets[0].add(key)

    def length(self) -> int:
        return sum(len(s) for s in self.sets)

    def stop(self) -> None:
        pass


class RelayMessageCache(MessageCache):
    """The gossip message cache keyed by the relay message id (0.8.1 keys by from+seqno, so
    all unsigned messages collide on one key and only the first is ever served to IWANT)."""

    def put(self, msg: rpc_pb2.Message) -> None:
        self.put_with_id(msg, relay_message_id(msg.data))

    def put_with_id(self, msg: rpc_pb2.Message, mid: bytes) -> None:
        if mid in self.msgs:
            return
        self.msgs[mid] = msg
        self.history[0].append(CacheEntry(mid, msg.topicIDs))


class WakuRelayRouter(GossipSub):
    """GossipSub under the Waku relay protocol ids with the reference nodes' parameters."""

    mcache: RelayMessageCache

    def __init__(
        self,
        protocols: Sequence[str] = RELAY_CODECS,
        *,
        direct_peers: Sequence[PeerInfo] | None = None,
        observer: RelayObserver | None = None,
    ) -> None:
        super().__init__(
            protocols=[TProtocol(p) for p in protocols],
            degree=D,
            degree_low=D_LOW,
            degree_high=D_HIGH,
            direct_peers=direct_peers,
            gossip_window=GOSSIP_WINDOW,
            gossip_history=GOSSIP_HISTORY,
            heartbeat_interval=HEARTBEAT_INTERVAL_S,
            # 0.8.1 "adaptive gossip" moves the heartbeat to 30-120 s when it judges the network
            # unhealthy; its spam protection caps every forwarder (us included) at 10 msg/s per
            # topic; its eclipse protection wants 3 distinct IPs in each mesh.
            adaptive_gossip_enabled=False,
            spam_protection_enabled=False,
            eclipse_protection_enabled=False,
        )
        self.degree_lazy = D_LAZY
        self.gossip_factor = GOSSIP_FACTOR
        self.mcache = RelayMessageCache(GOSSIP_WINDOW, GOSSIP_HISTORY)
        self.observer = observer or RelayObserver()
        # The protocol each peer negotiated on the wire; peer_protocol holds the gossipsub
        # version whose semantics it gets (v1.1), so the base class's checks keep working.
        self.wire_protocol: dict[ID, TProtocol] = {}
        self._warn_drop = _RateLimitedWarning(log)

    # -- protocol ids ----------------------------------------------------------------------

    def add_peer(self, peer_id: ID, protocol_id: TProtocol | None) -> None:
        """0.8.1 raises for any id but /meshsub/* and /floodsub/*."""
        if protocol_id in RELAY_CODECS:
            self.wire_protocol[peer_id] = TProtocol(protocol_id)
            protocol_id = PROTOCOL_ID_V11
        super().add_peer(peer_id, protocol_id)

    def remove_peer(self, peer_id: ID) -> None:
        super().remove_peer(peer_id)
        self.wire_protocol.pop(peer_id, None)

    # -- unsigned, content-addressed messages ----------------------------------------------

    def _check_equivocation(self, msg: rpc_pb2.Message) -> bool:
        """0.8.1 keys this by from+seqno, which is empty for every StrictNoSign message, so the
        second distinct message would be refused (and every message kept forever)."""
        return True

    def _check_spam_protection(self, peer_id: ID, msg: rpc_pb2.Message) -> bool:
        return True

    def _get_adaptive_gossip_peers_count(self, topic: str, total_peers: int) -> int:
        """go-libp2p / nim-libp2p: max(Dlazy, gossip factor x peers), at most the peers there are."""
        return max(0, min(total_peers, max(self.degree_lazy, int(self.gossip_factor * total_peers))))

    def gossip_heartbeat(self) -> collections.defaultdict[ID, dict[str, list[bytes]]]:
        """As 0.8.1, with at most MAX_IHAVE_LENGTH ids (the newest) per IHAVE: at thousands of
        messages a second the gossip window holds far more than peers accept."""
        gossip = super().gossip_heartbeat()
        for topics in gossip.values():
            for topic, ids in topics.items():
                if len(ids) > MAX_IHAVE_LENGTH:
                    topics[topic] = ids[-MAX_IHAVE_LENGTH:]
        return gossip

    async def publish(self, msg_forwarder: ID, pubsub_msg: rpc_pb2.Message) -> None:
        """Forward a validated message (replaces 0.8.1's, which applies the spam and
        equivocation checks, keys the cache by from+seqno and attaches a signed peer record to
        every message)."""
        self.forward(msg_forwarder, pubsub_msg, relay_message_id(pubsub_msg.data))

    def forward(self, msg_forwarder: ID, msg: rpc_pb2.Message, mid: bytes) -> None:
        """Cache `msg` for IWANT and queue it to the peers it goes to (mesh, fanout, direct)."""
        pubsub = self.pubsub
        if pubsub is None:
            return
        self.mcache.put_with_id(msg, mid)
        topics = list(msg.topicIDs)
        origin = ID(msg.from_id) if msg.from_id else None
        for topic in topics:
            if topic not in self.mesh:  # fanout expiry counts from the last publish
                self.time_since_last_publish[topic] = int(time.time())
        targets = self._forward_targets(topics, msg_forwarder, origin, mid)
        if not targets:
            return
        rpc = rpc_pb2.RPC(publish=[msg])
        scored = self.scorer is not None and self.scorer.params.publish_threshold > float("-inf")
        for peer_id in targets:
            if scored and not self.scorer.allow_publish(peer_id, topics):  # type: ignore[union-attr]
                continue
            queue = pubsub.peer_queues.get(peer_id)
            if queue is not None and not queue.push(rpc):
                self._count_drop(peer_id, 1, "outbound queue full")

    def _forward_targets(
        self, topics: Iterable[str], forwarder: ID, origin: ID | None, mid: bytes
    ) -> set[ID]:
        """Our own publish: every connected peer subscribed to the topic (flood publish,
        nim-libp2p's `floodPublish`, on in nwaku's GossipsubParameters), so a message published
        right after a (re)subscribe reaches peers the mesh does not hold yet. A forwarded
        message: mesh peers of joined topics (fast path); fanout and scoring through 0.8.1's
        selection otherwise."""
        assert self.pubsub is not None
        out: set[ID] = set()
        own = forwarder == self.pubsub.my_id
        for topic in topics:
            subscribers = self.pubsub.peer_topics.get(topic)
            if not subscribers:
                continue
            if own:
                out.update(self.direct_peers)
                out.update(subscribers)
            elif topic in self.mesh and self._unscored():
                out.update(self.direct_peers)
                out.update(self.mesh[topic])
                out.update(p for p in subscribers if self.peer_protocol.get(p) == floodsub.PROTOCOL_ID)
            else:
                out.update(self._get_peers_to_send([topic], forwarder, origin or ID(b""), mid))
        out.discard(forwarder)
        if origin is not None:
            out.discard(origin)
        peers = self.pubsub.peers
        return {p for p in out if p in peers} if out else out

    def _unscored(self) -> bool:
        """True when scores cannot exclude a peer (all thresholds -inf, the default)."""
        p = self.scorer.params if self.scorer is not None else None
        return p is None or (p.gossip_threshold == float("-inf") and p.graylist_threshold == float("-inf"))

    # -- outbound drops are counted, not silent --------------------------------------------

    def _handle_dropped_rpc(self, peer_id: ID, rpc: rpc_pb2.RPC, reason: str) -> None:
        self._count_drop(peer_id, len(rpc.publish), reason.replace("_", " "))
        super()._handle_dropped_rpc(peer_id, rpc, reason)

    def _count_drop(self, peer_id: ID, messages: int, reason: str) -> None:
        if messages:
            self.observer.on_forward_dropped(peer_id, messages)
        self._warn_drop("relay: dropped an RPC to peer %s (%s, %d message(s))", peer_id, reason, messages)


class RelayPubsub(Pubsub):
    """Pubsub for Waku relay: StrictNoSign, sha256(data) ids, validated messages to a sink."""

    def __init__(
        self,
        host: IHost,
        router: WakuRelayRouter,
        *,
        validator: WakuMessageValidator | None = None,
        sink: RelaySink | None = None,
        observer: RelayObserver | None = None,
        max_rpc_bytes: int = MAX_RPC_BYTES,
        outbound_queue_rpcs: int = OUTBOUND_QUEUE_RPCS,
        coalesce_bytes: int = COALESCE_BYTES,
        max_messages_per_rpc: int = MAX_MESSAGES_PER_RPC,
        out_rate_per_peer: float = OUT_RATE_PER_PEER,
        out_burst_per_peer: int = OUT_BURST_PER_PEER,
        receive_window: int = RECEIVE_WINDOW,
    ) -> None:
        super().__init__(
            host,
            router,
            strict_signing=False,
            msg_id_constructor=_message_id,
            seen_ttl=SEEN_TTL_S,
            max_inbound_rpc_size=max_rpc_bytes,
        )
        self.seen_messages.stop()  # 0.8.1's LastSeenCache and its sweeping thread
        self.seen_messages = SeenCache(SEEN_TTL_S)  # type: ignore[assignment]
        self.validator = validator or WakuMessageValidator()
        # A check that waits (RLN's zkSNARK verification, off the trio loop): messages from peers
        # on the topics it applies to, after the synchronous rules; set by the node.
        self.async_check: AsyncCheck | None = None
        self.sink = sink
        self.observer = observer or router.observer
        self.outbound_queue_rpcs = outbound_queue_rpcs
        self.coalesce_bytes = coalesce_bytes
        self.max_messages_per_rpc = max(1, max_messages_per_rpc)
        self.out_rate_per_peer = out_rate_per_peer
        self.out_burst_per_peer = max(1, out_burst_per_peer)
        self._last_stamp = 0.0  # the last receive time handed to the sink
        self.receive_window = receive_window
        p2p_patches.bound_receive_windows(receive_window)
        self._warn_sub = _RateLimitedWarning(log)

    # -- joining topics --------------------------------------------------------------------

    async def join(self, topic: str) -> None:
        """Subscribe to a pubsub topic with the WakuMessage validator as its topic validator."""
        self.set_topic_validator(topic, self.validator, False)
        await self.subscribe(topic)

    async def leave(self, topic: str) -> None:
        """Unsubscribe from a pubsub topic: peers are told, the mesh is pruned, its messages are
        neither relayed nor handed to the sink any more; join() takes it again."""
        await self.unsubscribe(topic)
        if topic in self.topic_validators:
            self.remove_topic_validator(topic)

    # -- publishing ------------------------------------------------------------------------

    async def publish(self, topic_id: str | list[str], data: bytes) -> None:
        """StrictNoSign publish: no from, seqno, signature or key (0.8.1 fills all four)."""
        topics = [topic_id] if isinstance(topic_id, str) else list(topic_id)
        await self.wait_outbound_room()
        await self.push_msg(self.my_id, rpc_pb2.Message(data=data, topicIDs=topics))

    async def wait_outbound_room(self, fill: float = 0.75) -> None:
        """Wait while some peer's outbound queue is above `fill` of its bound, so a fast local
        publisher is paced by its slowest peer instead of overflowing its queue."""
        limit = int(self.outbound_queue_rpcs * fill)
        while any(len(q) >= limit for q in self.peer_queues.values()):
            await trio.sleep(0.002)

    # -- receiving -------------------------------------------------------------------------

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message,
                       received: tuple[float, float] | None = None) -> None:
        """Validate, de-duplicate, forward and deliver one message (replaces 0.8.1's, which
        verifies signatures, keys the seen cache by from+seqno and drops on a full channel).
        `received`: (wall clock, perf_counter) when its frame came off the stream; now when
        not given (a local publish)."""
        received_time, arrival = received if received is not None else (time.time(), time.perf_counter())
        if msg_forwarder in self.blacklisted_peers:
            return
        topics = msg.topicIDs
        topic = topics[0] if topics else ""
        self.observer.on_received(topic)
        mid = relay_message_id(msg.data)
        if self.seen_messages.has(mid):
            self.observer.on_duplicate(topic)
            return
        waku_msg, reason = self._validate(msg_forwarder, msg)
        if reason is None and self.async_check is not None and msg_forwarder != self.my_id:
            assert waku_msg is not None
            checked = [t for t in topics if self.async_check.applies(t)]
            if checked:
                # Seen from now on (nim-libp2p marks a message seen before validating it): a copy
                # from another peer during the check is a duplicate, not a second use of its
                # RLN nullifier. A rejected message stays seen.
                self.seen_messages.mark(mid)  # type: ignore[attr-defined]
                refused = await self.async_check.validate(checked[0], waku_msg)
                reason = Reject(refused) if refused is not None else None
        if reason is not None:
            self.observer.on_rejected(reason)
            scorer = self.router.scorer  # type: ignore[attr-defined]
            if scorer is not None and msg_forwarder != self.my_id:
                for t in topics:
                    scorer.on_invalid_message(msg_forwarder, t)
            if msg_forwarder == self.my_id:
                raise ValueError(f"refusing to publish an invalid message: {reason.value}")
            log.debug("relay: rejected a message from %s: %s", msg_forwarder, reason.value)
            return
        self.seen_messages.mark(mid)  # type: ignore[attr-defined]  # a SeenCache (__init__)
        self.observer.on_accepted(topic)
        scorer = self.router.scorer  # type: ignore[attr-defined]
        if scorer is not None and msg_forwarder != self.my_id:
            for t in topics:
                scorer.on_first_delivery(msg_forwarder, t)
        self.router.forward(msg_forwarder, msg, mid)  # type: ignore[attr-defined]
        if self.sink is not None:
            if msg_forwarder != self.my_id:
                # Messages of one read share their frame's arrival time: stamps step on by 1 µs
                # so that they stay distinct and in the order received (a peer's publication
                # order is the store order; a tie would fall back to the digest).
                if received_time <= self._last_stamp:
                    received_time = self._last_stamp + STAMP_STEP_S
                self._last_stamp = received_time
                for t in topics:
                    if t in self.subscribed_topics_send:
                        await self.sink(t, waku_msg, msg.data, mid, received_time, arrival)  # type: ignore[arg-type]
        else:
            self.notify_subscriptions(msg)

    def _validate(self, forwarder: ID, msg: rpc_pb2.Message) -> tuple[WakuMessage | None, Reject | None]:
        waku_msg: WakuMessage | None = None
        for topic in msg.topicIDs:
            tv = self.topic_validators.get(topic)
            if tv is None:
                continue
            if isinstance(tv.validator, WakuMessageValidator):
                waku_msg, reason = tv.validator.check(msg)
                if reason is not None:
                    return None, reason
            elif tv.is_async or not tv.validator(forwarder, msg):
                # Only synchronous validators run inline; there are no others in the bridge.
                return None, Reject.UNDECODABLE
        if waku_msg is None:
            waku_msg, reason = self.validator.check(msg)
            if reason is not None:
                return None, reason
        return waku_msg, None

    def notify_subscriptions(self, publish_message: rpc_pb2.Message) -> None:
        """As 0.8.1, but a full subscription channel is counted and logged."""
        for topic in publish_message.topicIDs:
            send = self.subscribed_topics_send.get(topic)
            if send is None:
                continue
            try:
                send.send_nowait(publish_message)
            except trio.WouldBlock:
                self.observer.on_subscription_dropped(topic)
                self._warn_sub("relay: subscription channel of %s full, message dropped", topic)

    async def continuously_read_stream(self, stream: INetStream) -> None:
        """Read RPCs through a buffer and process each published message inline, so the
        sink's backpressure reaches the sender (0.8.1 spawns one task per message) through a
        receive window of at most `receive_window` bytes (`p2p_patches.bound_receive_windows`); each
        message's receive time is when its frame came off the stream."""
        peer_id = stream.muxed_conn.peer_id
        reader = FrameReader(stream, self.max_inbound_rpc_size, READ_CHUNK)
        try:
            while self.manager.is_running:
                frame = await reader.read_frame()
                if frame is None:
                    log.debug("relay: stream from %s closed", peer_id)
                    return
                received = (reader.arrived_time, reader.arrived_perf)
                rpc = rpc_pb2.RPC()
                try:
                    rpc.ParseFromString(frame)
                except DecodeError:
                    self.observer.on_rejected(Reject.MALFORMED_RPC)
                    log.warning("relay: peer %s sent an RPC that does not parse; closing its stream", peer_id)
                    await stream.reset()
                    self._handle_dead_peer(peer_id)
                    return
                if rpc.HasField("senderRecord") and not maybe_consume_signed_record(rpc, self.host, peer_id):
                    log.debug("relay: invalid signed peer record from %s, RPC ignored", peer_id)
                    continue
                for msg in rpc.publish:
                    if self._is_subscribed_to_msg(msg):
                        await self.push_msg(peer_id, msg, received)
                if rpc.subscriptions:
                    if len(rpc.subscriptions) > self.max_subscriptions_per_rpc:
                        log.warning("relay: peer %s sent %d subscriptions, over the limit",
                                    peer_id, len(rpc.subscriptions))
                    else:
                        for sub in rpc.subscriptions:
                            self.handle_subscription(peer_id, sub)
                if rpc.HasField("control"):
                    await self.router.handle_rpc(rpc, peer_id)
        except FrameError as error:
            log.warning("relay: peer %s: %s; closing its stream", peer_id, error)
            try:
                await stream.reset()
            except Exception:  # noqa: BLE001 - best effort on a broken stream
                pass
            self._handle_dead_peer(peer_id)
        except StreamEOF:
            log.debug("relay: stream from %s closed", peer_id)
        except (StreamError, IOException, RawConnError) as error:
            log.debug("relay: stream from %s failed: %s", peer_id, error)

    # -- sending ---------------------------------------------------------------------------

    async def handle_sending_messages(self, peer_id: ID, stream: INetStream, queue: RpcQueue) -> None:
        """Per-peer sender: a deeper queue than 0.8.1's 32 RPCs, and the RPCs queued while a
        write was in progress go out merged in one frame (0.8.1 writes one frame each), with at
        most `max_messages_per_rpc` published messages in it (control and subscriptions ride
        along)."""
        pq = queue._queue  # the PriorityQueue inside RpcQueue (0.8.1)
        pq.max_size = self.outbound_queue_rpcs
        pace = (TokenBucket(self.out_rate_per_peer, max(self.out_burst_per_peer, self.max_messages_per_rpc),
                            trio.current_time) if self.out_rate_per_peer > 0 else None)
        carry: rpc_pb2.RPC | None = None
        try:
            while True:
                rpc = carry if carry is not None else await queue.pop()
                carry = None
                if rpc is None:
                    return
                if len(pq):
                    merged = rpc_pb2.RPC()
                    merged.MergeFrom(rpc)
                    size = rpc.ByteSize()
                    while len(pq):
                        nxt = pq.pop()
                        if nxt is None:
                            break
                        n = nxt.ByteSize()
                        if size + n > self.coalesce_bytes or \
                                len(merged.publish) + len(nxt.publish) > self.max_messages_per_rpc:
                            carry = nxt
                            break
                        merged.MergeFrom(nxt)
                        size += n
                    rpc = merged
                if pace is not None:
                    for _ in range(len(rpc.publish)):
                        await pace.take()
                if not await self.write_msg(stream, rpc):
                    return
        except Exception:  # as 0.8.1: a failed sender marks the peer dead
            log.debug("relay: sending loop for %s ended with an error", peer_id, exc_info=True)
            self._handle_dead_peer(peer_id)


# Receive times of messages that arrived in one read are this far apart (RelayPubsub.push_msg).
STAMP_STEP_S = 1e-6

def _message_id(msg: rpc_pb2.Message) -> bytes:
    return relay_message_id(msg.data)


def new_relay(
    host: IHost,
    *,
    validator: WakuMessageValidator | None = None,
    sink: RelaySink | None = None,
    observer: RelayObserver | None = None,
    protocols: Sequence[str] = RELAY_CODECS,
    max_rpc_bytes: int = MAX_RPC_BYTES,
    max_messages_per_rpc: int = MAX_MESSAGES_PER_RPC,
    out_rate_per_peer: float = OUT_RATE_PER_PEER,
    out_burst_per_peer: int = OUT_BURST_PER_PEER,
    receive_window: int = RECEIVE_WINDOW,
) -> tuple[WakuRelayRouter, RelayPubsub]:
    """A router and pubsub pair on `host` (run both with libp2p's background_trio_service)."""
    router = WakuRelayRouter(protocols, observer=observer)
    pubsub = RelayPubsub(host, router, validator=validator, sink=sink, observer=observer,
                         max_rpc_bytes=max_rpc_bytes, max_messages_per_rpc=max_messages_per_rpc,
                         out_rate_per_peer=out_rate_per_peer, out_burst_per_peer=out_burst_per_peer,
                         receive_window=receive_window)
    return router, pubsub

