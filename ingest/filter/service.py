"""The filter service inside a bridge: the stream handlers of filter-subscribe v2 and v00 (they
frame and decode, then call the pure request core ingest/filter/protocol.py), the subscription
view, the SubscriptionEvent producer (waku.subscriptions, keyed by peer id), the pusher, and a
sweep that expires criteria past the TTL and peers unreachable for ``unreachable_timeout_s``
(each produces an EXPIRE event).

    service = FilterService(host, bridge_id, settings, bootstrap_servers=..., registry=...)
    await nursery.start(service.run)      # until cancelled; then the producer is flushed
"""
from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from prometheus_client import CollectorRegistry, Counter, Gauge

from core.kafka import TopicError, ensure_topics
from core.records import decode_push, push_targets, subscription_event
from ingest.filter.codec import (
    FILTER_PUSH_CODEC,
    FILTER_SUBSCRIBE_CODEC,
    FILTER_V00_CODEC,
    MAX_REQUEST_BYTES,
    OK,
    SERVICE_UNAVAILABLE,
    TOO_MANY_REQUESTS,
    push_v00,
    push_v2,
    subscribe_response,
)
from ingest.filter.protocol import FilterRequest, from_v00, from_v2, handle
from ingest.filter.pusher import STAGES, Dedup, PeerPusher, PushConsumer, PushItem, PushStats
from ingest.filter.settings import FilterSettings
from ingest.filter.state import Change, SubscriptionView, undo_late_change
from ingest.framing import FrameReader, close_quietly, frame
from ingest.kafka_producer import IngestProducer, ProducerSettings
from schemas import filter_v00_pb2 as f00
from schemas import filter_v2_pb2 as fv2
from schemas import pipeline_records_pb2 as pr

RESTART_PEER = "*"  # the peer id of a BRIDGE_RESTART record (no peer)
RATE_LIMITED = "filter request rejected due rate limit exceeded"  # nwaku's statusDesc

log = logging.getLogger("ingest.filter")


# Slack for the clock of the bridge that stamped a message's received_time (NTP keeps hosts
# within milliseconds; a replayed epoch is up to filter.realtime_checkpoint_interval old).
START_MARGIN_S = 1.0


class FilterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.requests = Counter("waku_filter_requests", "Filter requests by type and answered status (0: not answered)",
                                ["type", "status"], registry=r)
        self.pushes = Counter("waku_filter_pushes", "Push records by outcome", ["outcome"], registry=r)
        self.push_stage = Counter("waku_filter_push_stage_seconds",
                                  "Pusher time by stage (consume, deliver: CPU; open, write, close: wall)",
                                  ["stage"], registry=r)
        self.expired = Counter("waku_filter_expired_peers", "Peers whose subscriptions expired, by reason",
                               ["reason"], registry=r)
        self.peers = Gauge("waku_filter_subscribed_peers", "Peers with subscriptions on this bridge", registry=r)
        self.criteria = Gauge("waku_filter_criteria", "Criteria held on this bridge", registry=r)
        self.consumer_failures = Gauge("waku_filter_push_consumer_failures",
                                       "Times the push topic's consumer thread failed and was started again",
                                       registry=r)
        self.late_undone = Counter("waku_filter_late_changes_undone",
                                   "Changes answered 503 that Kafka acknowledged later, undone by further records",
                                   registry=r)

    def value(self, name: str, **labels: str) -> float:
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v


def _create_topics(bootstrap_servers: str, client_options: Mapping[str, str], topics: Mapping[str, int],
                   replication: tuple[int, int] = (0, 0)) -> None:
    """Create missing topics (the embedded broker does not auto-create) with `replication`
    (replication factor, min.insync.replicas; 0: by the bootstrap servers); failures are logged:
    the service then waits for them to appear."""
    try:
        ensure_topics(bootstrap_servers, topics, options=client_options, replication=replication[0] or None,
                      min_insync_replicas=replication[1] or None, client_id="waku-bridge-admin")
    except TopicError as exc:
        log.warning("filter: cannot create topics %s: %s", ", ".join(topics), exc)


class FilterService:
    def __init__(self, host: IHost, bridge_id: str, settings: FilterSettings, *, bootstrap_servers: str,
                 client_options: Mapping[str, str] | None = None, registry: CollectorRegistry | None = None,
                 producer_linger_ms: int = 5, relayed: Callable[[], Collection[str]] | None = None) -> None:
        self.host = host
        # The topics the node relays now (the bridge's relay, joined later through REST too);
        # None: the settings' relayed_topics (empty: any).
        self.relayed = relayed
        self.bridge_id = bridge_id
        self.settings = settings
        self.bootstrap_servers = bootstrap_servers
        self.client_options = dict(client_options or {})
        self.producer_linger_ms = producer_linger_ms
        self.view = SubscriptionView(settings.limits)
        self.metrics = FilterMetrics(registry)
        # Pushes of messages received before this run started are not made: a restarted filter
        # job replays its last epoch, which this bridge's previous run may have pushed (its
        # de-duplication memory is gone), and a restarted node owes nothing received before it
        # started (nwaku alike). The margin allows for the receiving bridge's clock.
        self.started_at = time.time() - START_MARGIN_S
        # One lock per peer: a peer's requests are applied in order; other peers are not held
        # up while Kafka acknowledges one peer's change.
        self._peer_locks: dict[str, trio.Lock] = {}
        self.producer: IngestProducer | None = None
        self.consumer: PushConsumer | None = None
        self.dedup = Dedup(settings.dedup_per_peer)
        self._queues: dict[str, trio.MemorySendChannel] = {}
        self.push_stats = PushStats()
        self._consume_cpu_reported = 0.0
        self._push_failing: set[str] = set()
        self._nursery: trio.Nursery | None = None
        self.ready = trio.Event()  # set once requests are served

    @property
    def push_topic(self) -> str:
        return self.settings.push_topic(self.bridge_id)

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled. While Kafka is unreachable nothing is served and nothing holds
        up a shutdown: the topics, the consumer and the producer wait for Kafka in abandonable
        threads; the producer is only opened once the consumer is positioned."""
        s = self.settings
        # The type: ignores below: mypy reads trio through trio_typing's stale stubs (a libp2p
        # dependency), which name abandon_on_cancel by its old name, cancellable.
        await trio.to_thread.run_sync(_create_topics, self.bootstrap_servers, self.client_options,  # type: ignore[call-arg]
                                      {s.subscriptions_topic: s.subscriptions_partitions,
                                       self.push_topic: s.push_partitions},
                                      (s.replication_factor, s.min_insync_replicas), abandon_on_cancel=True)
        self.consumer = PushConsumer(self.bootstrap_servers, self.push_topic, self.client_options,
                                     self._deliver, trio.lowlevel.current_trio_token())
        self.consumer.start()
        consumer = self.consumer
        self.metrics.consumer_failures.set_function(lambda: consumer.failures)
        try:
            # Until the consumer is positioned at the end of the push topic.
            while not await trio.to_thread.run_sync(self.consumer.ready.wait, 1.0,  # type: ignore[call-arg]
                                                    abandon_on_cancel=True):
                pass
            producer_settings = ProducerSettings(
                bootstrap_servers=self.bootstrap_servers, topic=s.subscriptions_topic, max_outstanding=10_000,
                backpressure_timeout_s=2.0, linger_ms=self.producer_linger_ms, close_timeout_s=5.0,
                client_options=self.client_options)
            async with IngestProducer(producer_settings) as producer:
                self.producer = producer
                await self._announce_restart(producer)
                self.host.set_stream_handler(TProtocol(FILTER_SUBSCRIBE_CODEC), self._on_subscribe)
                if s.legacy_v00:
                    self.host.set_stream_handler(TProtocol(FILTER_V00_CODEC), self._on_v00)
                log.info("filter: serving %s%s; pushes from %s", FILTER_SUBSCRIBE_CODEC,
                         f" and {FILTER_V00_CODEC}" if s.legacy_v00 else "", self.push_topic)
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    nursery.start_soon(self._sweep)
                    task_status.started(self)
                    self.ready.set()
                    await trio.sleep_forever()
        finally:
            self.consumer.stop()  # a daemon thread: it leaves within one poll (200 ms)

    # -- requests: streams frame and decode, protocol.handle decides ---------------------------

    async def _on_subscribe(self, stream: INetStream) -> None:
        """filter-subscribe v2: one FilterSubscribeRequest per frame, answered with a
        FilterSubscribeResponse echoing request_id (a request without request_id is neither
        applied nor answered). The subscriber is the connection's peer id."""
        peer = stream.muxed_conn.peer_id.to_base58()

        async def on_frame(data: bytes) -> None:
            try:
                req = fv2.FilterSubscribeRequest.FromString(data)
            except DecodeError:
                self.count_request("undecodable", 0)
                log.debug("filter: undecodable request from %s", peer)
                return
            request = from_v2(req)
            if not request.request_id:
                self.count_request(request.label, 0)
                return
            code, detail = await self.serve(peer, request)
            self.count_request(request.label, code)
            await stream.write(frame(subscribe_response(request.request_id, code, detail)))

        await _each_frame(stream, on_frame, self.settings.stream_idle_timeout_s)

    async def _on_v00(self, stream: INetStream) -> None:
        """Legacy filter v00: FilterRPC{requestId, request} subscribes or unsubscribes; nothing is
        answered (a refusal is logged and counted)."""
        peer = stream.muxed_conn.peer_id.to_base58()

        async def on_frame(data: bytes) -> None:
            try:
                rpc = f00.FilterRPC.FromString(data)
            except DecodeError:
                self.count_request("v00_undecodable", 0)
                return
            if not rpc.HasField("request"):
                return
            request = from_v00(rpc, self.settings.default_pubsub_topic)
            code, detail = await self.serve(peer, request)
            self.count_request(request.label, code)
            if code != OK:
                log.info("filter v00: request %s of %s refused: %d %s", rpc.requestId, peer, code, detail)

        await _each_frame(stream, on_frame, self.settings.stream_idle_timeout_s)

    def _lock(self, peer: str) -> trio.Lock:
        lock = self._peer_locks.get(peer)
        if lock is None:
            lock = self._peer_locks[peer] = trio.Lock()
        return lock

    async def serve(self, peer: str, request: FilterRequest) -> tuple[int, str]:
        """Rate limit, then the protocol's decision; its changes are applied to the view and
        recorded in Kafka, and the answer (200) waits for Kafka's acknowledgement: a change Kafka
        does not acknowledge within filter.record_timeout_s is undone and answered 503, so
        what the bridge answered is what Spark learns. (status, detail)."""
        async with self._lock(peer):
            now = time.time()
            if self.view.rate_limited(peer, now):
                return TOO_MANY_REQUESTS, RATE_LIMITED  # nwaku's statusDesc (waku_filter_v2/protocol.nim)
            if self.view.stale(peer, now):
                # Past the TTL, the sweep not there yet: expired first, as the subscriptions job and
                # the index find it at this time (a SUBSCRIBE starts it afresh, a PING is 404).
                await self._expire_held(peer, "ttl", now)
            relayed = None
            if self.settings.refuse_unrelayed_topics:
                relayed = self.relayed() if self.relayed is not None else (self.settings.relayed_topics or None)
            response = handle(peer, request, self.view, relayed)
            for change in response.events:
                if change.op == pr.REFRESH:
                    # Best effort: the next ping refreshes again. It answers: reachable.
                    await self.emit(peer, change, now=now)
                    self.view.apply(peer, change, now)
                    self._push_failing.discard(peer)
                    self.view.mark_reachable(peer, True, now)
                    continue
                before = self.view.snapshot(peer)
                self.view.apply(peer, change, now)  # at once, so limits count it meanwhile
                if not await self.emit(peer, change, acked=True, now=now,
                                       on_late_ack=functools.partial(self._late_ack, peer, change, now)):
                    self.view.restore(peer, before)
                    self.metrics.requests.labels("unrecorded", str(SERVICE_UNAVAILABLE)).inc()
                    return SERVICE_UNAVAILABLE, response.unrecorded
                if change.op in (pr.UNSUBSCRIBE, pr.UNSUBSCRIBE_ALL):
                    self.peer_changed(peer)
            return response.code, response.detail

    # -- events ---------------------------------------------------------------------------------

    async def _announce_restart(self, producer: IngestProducer) -> None:
        """Before serving: tell Spark this bridge holds no subscriptions (a restart forgot them,
        kill -9 included), so the table drops what an earlier run of this bridge left and
        equals what this run answers. Retried until Kafka acknowledges it."""
        key, value = subscription_event(RESTART_PEER, self.bridge_id, pr.BRIDGE_RESTART, time.time())
        while not await producer.put_acked(key, value, time.perf_counter(), self.settings.record_timeout_s):
            log.warning("filter: Kafka did not acknowledge the restart record; retrying")
            await trio.sleep(1.0)

    def _late_ack(self, peer: str, change: Change, at: float) -> None:
        """Kafka acknowledged a change (made at `at`) after all that the bridge answered 503 and
        undid: record the changes that undo it (`undo_late_change`), so that the subscriptions
        table holds what the bridge answered."""
        if self._nursery is None:
            log.warning("filter: a refused change of %s reached Kafka late while stopping; not undone", peer)
            return
        self._nursery.start_soon(self._undo_late, peer, change, at)

    async def _undo_late(self, peer: str, change: Change, at: float) -> None:
        async with self._lock(peer):
            # The recorded change refreshed the peer at `at`: the view too; the undo is stamped
            # `at` as well, so it refreshes nothing later than that.
            self.view.recorded_late(peer, at)
            undo = undo_late_change(change, self.view.snapshot(peer))
            for c in undo:
                await self.emit(peer, c, now=at)
            self.metrics.late_undone.inc()
            log.info("filter: a change of %s answered 503 reached Kafka late; undone with %d records",
                     peer, len(undo))

    async def emit(self, peer: str, change: Change, acked: bool = False,
                   on_late_ack: Callable[[], None] | None = None, now: float | None = None) -> bool:
        """Produce one SubscriptionEvent (keyed by peer id: per-peer order); with `acked`, wait
        for Kafka's acknowledgement (False: dropped, refused or not acknowledged in time;
        `on_late_ack` is called if Kafka acknowledges it later). `now`: its time (default: the
        clock's), the time the view applied it at, so the three forms time the peer alike."""
        assert self.producer is not None
        at = time.time() if now is None else now
        key, value = subscription_event(peer, self.bridge_id, change.op, at, change.pubsub_topic or "",
                                        change.content_topics, change.request_id, change.protocol)
        if acked:
            return await self.producer.put_acked(key, value, time.perf_counter(), self.settings.record_timeout_s,
                                                 on_late_ack)
        return await self.producer.put(key, value, time.perf_counter())

    def count_request(self, kind: str, status: int) -> None:
        self.metrics.requests.labels(kind, str(status)).inc()

    def peer_changed(self, peer: str) -> None:
        """After an unsubscribe: stop the peer's push worker if it has nothing left."""
        if not self.view.has(peer):
            q = self._queues.pop(peer, None)
            if q is not None:
                q.close()
            self.dedup.forget(peer)
            self._push_failing.discard(peer)

    async def _expire(self, peer: str, reason: str) -> None:
        async with self._lock(peer):
            await self._expire_held(peer, reason)

    async def _expire_held(self, peer: str, reason: str, now: float | None = None) -> None:
        """`_expire` with the peer's lock held (`now`: the EXPIRE's time, default the clock's)."""
        if not self.view.remove_peer(peer):
            return
        self.peer_changed(peer)
        self.metrics.expired.labels(reason).inc()
        log.info("filter: subscriptions of %s expired (%s)", peer, reason)
        await self.emit(peer, Change(pr.EXPIRE, request_id=reason), now=now)

    async def _sweep(self) -> None:
        s = self.settings
        while True:
            await trio.sleep(s.sweep_interval_s)
            now = time.time()
            for peer in self.view.expired(now):
                await self._expire(peer, "ttl")
            conns = self.host.get_network().connections
            for peer, state in list(self.view.peers.items()):
                connected = bool(conns.get(ID.from_base58(peer)))
                if not connected:
                    self.view.mark_reachable(peer, False, now)
                elif peer not in self._push_failing:
                    self.view.mark_reachable(peer, True, now)
                    # v00 has no ping: a connected v00 subscriber is refreshed by the bridge.
                    if (now - state.refreshed > s.limits.ttl_s / 2
                            and any(c.protocol == "v00" for c in state.criteria.values())):
                        state.refreshed = now
                        await self.emit(peer, Change(pr.REFRESH, protocol="v00"), now=now)
            for peer in self.view.unreachable(now, s.unreachable_timeout_s):
                await self._expire(peer, "unreachable")
            self.view.forget_requests(now)
            for peer in [p for p, lk in self._peer_locks.items() if p not in self.view.peers and not lk.locked()]:
                del self._peer_locks[peer]
            self.metrics.peers.set(len(self.view.peers))
            self.metrics.criteria.set(self.view.criteria_count())
            self.flush_push_stats()

    def flush_push_stats(self) -> None:
        """Add the pusher's plain counters to the Prometheus ones."""
        outcomes, stages = self.push_stats.take()
        for outcome, n in outcomes.items():
            self.metrics.pushes.labels(outcome).inc(n)
        if self.consumer is not None:
            cpu = self.consumer.cpu_s
            stages["consume"] += cpu - self._consume_cpu_reported
            self._consume_cpu_reported = cpu
        for stage in STAGES:
            self.metrics.push_stage.labels(stage).inc(stages[stage])

    # -- pushes ---------------------------------------------------------------------------------

    def _deliver(self, values: list[bytes]) -> None:
        """On the trio thread: a batch of PushRecord values from the push topic. Each wanted,
        first-seen (record, subscriber) is queued to its peer's PeerPusher: a fan-out record's
        every target, a per-subscriber record's one peer. The push bytes of a message are built
        once per batch."""
        t0 = time.perf_counter()
        outcomes = self.push_stats.outcomes
        view, dedup, queues, started_at = self.view, self.dedup, self._queues, self.started_at
        built: dict[tuple[bytes, str] | tuple[bytes, str, str], bytes] = {}
        for value in values:
            rec = decode_push(value)
            if rec is None:
                outcomes["undecodable"] += 1
                continue
            targets = push_targets(rec)
            if 0.0 < rec.received_time < started_at:
                outcomes["before_start"] += len(targets)
                continue
            ordered = rec.HasField("source_offset")
            pubsub_topic, message, message_hash = rec.pubsub_topic, rec.message, rec.message_hash
            content_topic = message.content_topic
            for peer, _protocol, rec_request_id in targets:
                crit = view.wanted(peer, pubsub_topic, content_topic)
                if crit is None:
                    outcomes["not_subscribed"] += 1
                    continue
                if ordered:
                    dropped = dedup.admit(peer, message_hash, rec.source_partition, rec.source_offset)
                else:
                    dropped = dedup.admit(peer, message_hash)
                if dropped is not None:
                    outcomes[dropped] += 1  # "replayed" or "duplicate"
                    continue
                if crit.protocol == "v00":
                    request_id = crit.request_id or rec_request_id
                    key: tuple[bytes, str] | tuple[bytes, str, str] = (message_hash, "v00", request_id)
                    codec = FILTER_V00_CODEC
                else:
                    key = (message_hash, pubsub_topic)
                    codec = FILTER_PUSH_CODEC
                data = built.get(key)
                if data is None:
                    data = built[key] = frame(push_v00(request_id, message) if codec == FILTER_V00_CODEC
                                              else push_v2(pubsub_topic, message))
                q = queues.get(peer)
                if q is None:
                    if self._nursery is None:
                        continue
                    q = self._start_pusher(peer)
                try:
                    q.send_nowait(PushItem(data, codec))
                except trio.WouldBlock:
                    outcomes["queue_full"] += 1
        self.push_stats.stages["deliver"] += time.perf_counter() - t0

    def _start_pusher(self, peer: str) -> trio.MemorySendChannel:
        assert self._nursery is not None
        send, recv = trio.open_memory_channel(self.settings.push_queue_per_peer)
        self._queues[peer] = send
        peer_id = ID.from_base58(peer)
        network = self.host.get_network()

        def connected() -> bool:
            return bool(network.connections.get(peer_id))

        def report(ok: bool) -> None:
            now = time.time()
            if ok:
                self._push_failing.discard(peer)
            else:
                self._push_failing.add(peer)
            self.view.mark_reachable(peer, ok, now)

        pusher = PeerPusher(peer_id, self.host, self.settings, self.push_stats, FILTER_PUSH_CODEC, connected, report)
        self._nursery.start_soon(pusher.run, recv, send)
        return send


async def _each_frame(stream: INetStream, on_frame: Callable[[bytes], Awaitable[None]], idle_timeout_s: float) -> None:
    """Call `on_frame(data)` for each request frame until the peer closes the stream (or resets
    it, sends a frame we refuse, or sends nothing for idle_timeout_s); then close it."""
    frames = FrameReader(stream, MAX_REQUEST_BYTES, idle_timeout_s=idle_timeout_s)
    try:
        while True:
            try:
                data = await frames.read_frame()
            except Exception:  # noqa: BLE001 - reset, or an oversized / bad frame: done
                return
            if data is None:
                return
            await on_frame(data)
    finally:
        await close_quietly(stream)
