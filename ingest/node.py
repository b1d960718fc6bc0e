"""The bridge node: a libp2p host on Waku relay whose accepted messages become ingest records
on Kafka, plus static peers, metrics and graceful shutdown.

    bridge = Bridge(BridgeSettings.from_config(config))
    trio.run(bridge.run)          # until bridge.stop(); then the producer is flushed
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO
from wsgiref.simple_server import WSGIServer

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.tools.anyio_service import background_trio_service

from core.message import check_message
from core.records import ingest_key, ingest_value
from core.threads import RECENT_FAILURE_S, SupervisedThread
from ingest.enr import FILTER, LIGHTPUSH, RELAY, STORE, EnrError, Record, WakuEnrFields, announce
from ingest.enr import decode as decode_enr
from ingest.filter import codec as filter_codec
from ingest.filter.service import FilterService
from ingest.framing import frame
from ingest.host import ListenError, StreamGate, build_host, check_listen_addrs, dial, listen_addrs, tls_server_context
from ingest.identity import enr_state_file, is_secp256k1, load_identity, peer_id_of
from ingest.kafka_producer import IngestProducer, ProducerSettings
from ingest.lightpush import codec as lp_codec
from ingest.lightpush.client import LightpushClient
from ingest.lightpush.codec import INVALID_MESSAGE, OUT_OF_RLN_PROOF
from ingest.lightpush.protocol import Accepted, PushContext, Refused
from ingest.lightpush.service import LightpushService
from ingest.metadata.service import MetadataService
from ingest.metrics import DROP_REASONS, BridgeMetrics
from ingest.nwaku_metrics import NwakuMetrics
from ingest.peer_exchange.protocol import Candidate
from ingest.peer_exchange.service import PeerExchangeService
from ingest.relay.codec import Reject, relay_message_id
from ingest.relay.gossipsub import RelayPubsub, WakuRelayRouter, new_relay
from ingest.relay.validator import WakuMessageValidator
from ingest.rest.cache import MessageCache
from ingest.rln.errors import OutOfProofs, RlnError, RlnRefused
from ingest.settings import BridgeSettings, node_shards
from ingest.store import codec_v3
from ingest.store.server import StoreServer
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage

if TYPE_CHECKING:  # imported where used: a node without discv5 or RLN does not load them at start
    from ingest.discv5.service import Discv5Service
    from ingest.rln.service import RlnRelay

log = logging.getLogger("ingest.bridge")

STATUS_EVERY_S = 60.0
MAX_REDIAL_S = 300.0


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclass(frozen=True)
class ThreadState:
    """A background thread of the bridge: running, how often it failed (and was started again)."""
    name: str
    alive: bool
    failures: int
    failed: BaseException | None


class BridgeError(Exception):
    """The bridge cannot go on; the message is one line for the user."""


class Bridge:
    """One bridge process's node. `run` until `stop`; `addrs` are its listen multiaddrs."""

    def __init__(
        self,
        settings: BridgeSettings,
        *,
        key_pair: KeyPair | None = None,
        metrics: BridgeMetrics | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.settings = settings
        if key_pair is None:
            key_pair, created = load_identity(settings.nodekey, settings.key_file)
            if created:
                log.info("created key file %s", settings.key_file)
        self.key_pair = key_pair
        self.peer_id = peer_id_of(key_pair)
        self.bridge_id = self.peer_id.to_base58()
        self.metrics = metrics or BridgeMetrics()
        try:  # nwaku's metric names beside ours (a registry another bridge already uses: ours only)
            self.nwaku_metrics: NwakuMetrics | None = NwakuMetrics(self.metrics.registry, self)
        except ValueError:
            self.nwaku_metrics = None
        self.out = out if out is not None else sys.stdout
        self.listen_addrs = listen_addrs(settings.listen_host, settings.tcp_port, settings.ws_port,
                                         settings.wss_port)
        self.addrs: list[multiaddr.Multiaddr] = []
        self.metrics_port: int | None = None
        self.router: WakuRelayRouter | None = None
        self.pubsub: RelayPubsub | None = None
        self.producer: IngestProducer | None = None
        self.host: IHost | None = None
        self.stream_gate: StreamGate | None = None
        self.store: StoreServer | None = None  # the store service, when settings.store is set
        self._stop = trio.Event()
        self.stopped = trio.Event()  # set when run() has returned (flushed)
        self._metrics_server: WSGIServer | None = None
        self.filter: FilterService | None = None  # the filter service, when settings.filter is set
        self.metadata: MetadataService | None = None
        self.lightpush: LightpushService | None = None
        self.rln: RlnRelay | None = None  # RLN-v2 relay (settings.rln)
        # bridge.lightpush_node (nwaku's --lightpushnode): the REST lightpush routes push through it.
        self.lightpush_client: LightpushClient | None = None
        # The REST API's relay message cache (settings.rest): accepted messages of its topics.
        self.rest_cache: MessageCache | None = None
        self.rest_url: str | None = None
        # Our ENR (docs/discovery.md; None with an Ed25519 identity), and the records of peers we
        # know, by peer id (static peers given as enr:...): the peer exchange server's pool.
        self.enr: Record | None = None
        self.known_enrs: dict[str, Record] = {}
        for raw in settings.static_enrs:
            r = decode_enr(raw)
            self.known_enrs[r.peer_id().to_base58()] = r
        self.peer_exchange: PeerExchangeService | None = None
        # discv5 (settings.discv5): the service, and the relay peers of our cluster and shards it
        # found (peer id -> when we last dialled it); their records join known_enrs.
        self.discv5: Discv5Service | None = None
        self.discovered: dict[str, float] = {}
        # Per thread, (its failure count, when that count was first seen): health_problems.
        self._thread_failures: dict[str, tuple[int, float]] = {}

    def stop(self) -> None:
        """Ask `run` to shut down (from the trio thread)."""
        self._stop.set()

    async def _sink(self, topic: str, msg: WakuMessage, data: bytes, mid: bytes, received_time: float,
                    arrival: float) -> None:
        assert self.producer is not None
        await self.producer.put(ingest_key(topic, msg), ingest_value(topic, data, received_time, self.bridge_id),
                                arrival)
        if self.rest_cache is not None:
            self.rest_cache.add(topic, msg)
        if self.nwaku_metrics is not None:
            self.nwaku_metrics.on_relay_message(len(data))

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start, report started (task_status) once listening and joined, run until stop(),
        then flush Kafka and return."""
        try:
            await self._run(task_status)
        finally:
            self.stopped.set()

    async def _run(self, task_status: Any) -> None:
        s = self.settings
        check_listen_addrs(self.listen_addrs)
        tls = tls_server_context(s.tls_cert_file, s.tls_key_file) if s.wss_port >= 0 else None
        gate = StreamGate(s.stream_limits, self.metrics.on_stream_refused, self.metrics.on_stream_failed)
        self.host = host = build_host(self.key_pair, self.listen_addrs, tls_server=tls, announce=s.announce,
                                      stream_gate=gate, max_connections=s.max_connections,
                                      # never below the connections: a connected peer's key must stay
                                      peer_store_capacity=s.peer_store_capacity)
        self.stream_gate = gate
        if s.rln is not None:  # keystore, membership and the zk key checked before anything listens
            from ingest.rln.service import RlnRelay
            try:
                self.rln = RlnRelay.open(s.rln, registry=self.metrics.registry)
            except RlnError as exc:
                raise BridgeError(str(exc)) from None
        # Streams over the caps of the request/response protocols get their 429, not a reset.
        for protocol, answer in ((filter_codec.FILTER_SUBSCRIBE_CODEC, filter_codec.rejected_response()),
                                 (lp_codec.LIGHTPUSH_V3_CODEC, lp_codec.v3_rejected()),
                                 (lp_codec.LIGHTPUSH_V2_CODEC, lp_codec.v2_rejected()),
                                 (codec_v3.STORE_V3_CODEC, codec_v3.rejected())):
            gate.refuse_with(protocol, frame(answer))
        self.router, self.pubsub = new_relay(
            host, validator=WakuMessageValidator(s.limits), sink=self._sink, observer=self.metrics,
            max_rpc_bytes=s.max_rpc_bytes, max_messages_per_rpc=s.relay_max_messages_per_rpc,
            out_rate_per_peer=s.relay_out_rate_per_peer, out_burst_per_peer=s.relay_out_burst_per_peer,
            receive_window=s.relay_receive_window_bytes,
        )
        self.pubsub.async_check = self.rln
        if s.store is not None:  # /vac/waku/store/2.0.0-beta2, answered from the Delta store
            self.store = StoreServer.start(host, s.store, self.metrics.registry)
        producer_settings = ProducerSettings(
            bootstrap_servers=s.bootstrap_servers, topic=s.messages_topic,
            max_outstanding=s.producer_max_outstanding, backpressure_timeout_s=s.backpressure_timeout_s,
            linger_ms=s.producer_linger_ms, delivery_timeout_ms=int(s.producer_delivery_timeout_s * 1000),
            close_timeout_s=s.shutdown_timeout_s, client_options=s.client_options,
        )
        if s.metrics_port >= 0:
            try:
                self._metrics_server, self.metrics_port = self.metrics.serve(s.metrics_host, s.metrics_port)
            except OSError as exc:
                where = f"{s.metrics_host}:{s.metrics_port}"
                raise ListenError(f"cannot serve metrics on {where}: {exc.strerror}") from None
        try:
            async with IngestProducer(producer_settings, self.metrics.producer_stats()) as producer:
                self.producer = producer
                await self._run_relay(task_status)
                log.info("relay stopped; waiting for Kafka to acknowledge %d buffered records", producer.outstanding)
        finally:
            if self.store is not None:
                self.store.close()
            if self._metrics_server is not None:
                self._metrics_server.shutdown()
                self._metrics_server.server_close()
        c = self._counts()
        log.info("bridge stopped: received %d, accepted %d, produced %d, rejected %d, dropped %d",
                 c["received"], c["accepted"], c["produced"], c["rejected"], c["dropped"])

    async def _run_relay(self, task_status: Any) -> None:
        assert self.host is not None and self.pubsub is not None and self.router is not None
        host, pubsub = self.host, self.pubsub
        # Ports were checked free (check_listen_addrs), so listening fails only in a race.
        async with host.run(self.listen_addrs), background_trio_service(pubsub), \
                background_trio_service(self.router):
            await pubsub.wait_until_ready()
            for topic in self.settings.pubsub_topics if self.settings.relay else ():
                await pubsub.join(topic)
            self.addrs = list(host.get_addrs())
            for addr in self.addrs:
                print(f"listening on {addr}", file=self.out, flush=True)
            udp_port = await self._open_discv5()
            self._announce_enr(udp_port)
            if self.settings.relay:
                log.info("bridge %s joined %s", self.bridge_id, ", ".join(self.settings.pubsub_topics))
            else:
                log.info("bridge %s: relay off (bridge.relay = false), no pubsub topic joined", self.bridge_id)
            async with trio.open_nursery() as nursery:
                # /vac/waku/metadata/1.0.0: before any peer is dialled, so every connection is checked.
                shards = node_shards(self.settings)
                self.metadata = MetadataService(host, shards, self.metrics.registry)
                await nursery.start(self.metadata.run)
                log.info("Created WakuMetadata protocol clusterId=%d shards=%s", shards.cluster_id,
                         list(shards.shards))  # nwaku's line (waku_metadata/protocol.nim)
                if self.settings.lightpush_node:
                    self.lightpush_client = LightpushClient(
                        host, self.settings.lightpush_node,
                        timeout=self.settings.rest.request_timeout_s if self.settings.rest else 5.0)
                if self.settings.lightpush_enabled and self.settings.relay:  # nwaku: lightpush needs relay
                    s = self.settings
                    ctx = PushContext(pubsub.topic_ids, s.cluster_id, s.num_shards_in_cluster,
                                      lambda data: check_message(data, s.limits), s.limits.max_message_bytes)
                    self.lightpush = LightpushService(host, ctx, store=self._store_pushed_cached, relay=self._relay,
                                                      registry=self.metrics.registry,
                                                      per_peer_per_s=s.lightpush_per_peer_per_s,
                                                      seen=lambda data: pubsub.seen_messages.has(
                                                          relay_message_id(data)),
                                                      rln=self._rln_pushed if self.rln is not None else None)
                    self.lightpush.mount()
                if self.settings.peer_exchange_enabled:
                    self.peer_exchange = PeerExchangeService(
                        host, self.bridge_id, self.settings.cluster_id, self._px_candidates,
                        per_s=self.settings.peer_exchange_per_s, registry=self.metrics.registry)
                    self.peer_exchange.mount()
                nursery.start_soon(self._keep_dialled)
                if self.rln is not None:
                    nursery.start_soon(self.rln.run)
                if self.discv5 is not None:
                    if self.enr is not None:
                        nursery.start_soon(self.discv5.run)
                        nursery.start_soon(self._dial_discovered)
                    elif self.discv5.sock is not None:
                        self.discv5.sock.close()
                nursery.start_soon(self._update_gauges)
                fs = self.settings.filter
                if fs is not None:  # serves once its Kafka consumer is positioned (filter.ready)
                    self.filter = FilterService(host, self.bridge_id, fs,
                                                bootstrap_servers=self.settings.bootstrap_servers,
                                                client_options=self.settings.client_options,
                                                registry=self.metrics.registry,
                                                relayed=lambda: pubsub.topic_ids)
                    nursery.start_soon(self.filter.run)
                rest = self.settings.rest
                if rest is not None:  # the REST API (ingest/rest/), on this trio loop
                    from ingest.rest.server import serve_rest
                    self.rest_cache = MessageCache(rest.relay_cache_capacity, self.settings.pubsub_topics,
                                                  rest.content_topics)
                    self.rest_url = await nursery.start(serve_rest, self, rest, self.rest_cache)
                    print(f"rest api on {self.rest_url}", file=self.out, flush=True)
                task_status.started(self)
                await self._stop.wait()
                nursery.cancel_scope.cancel()

    async def _open_discv5(self) -> int | None:
        """Bind discv5's UDP socket (settings.discv5); its port, for our ENR's udp field."""
        d = self.settings.discv5
        if d is None:
            return self.settings.enr_udp_port
        if not is_secp256k1(self.key_pair):
            log.warning("discv5 off: the identity is not a secp256k1 key (docs/discovery.md)")
            return self.settings.enr_udp_port
        from ingest.discv5.service import Discv5Service
        self.discv5 = Discv5Service(self.key_pair.private_key.to_bytes(), self._own_enr, d,
                                    on_peer=self._on_discovered, registry=self.metrics.registry)
        try:
            port = await self.discv5.open()
        except OSError as exc:
            raise ListenError(str(exc)) from None
        print(f"discv5 on udp {d.host}:{port}", file=self.out, flush=True)
        return port

    def _own_enr(self) -> Record:
        assert self.enr is not None
        return self.enr

    def _on_discovered(self, record: Record) -> None:
        """A node discv5 verified alive: kept (for peer exchange and dialling) when it is a relay
        node of our cluster sharing one of our shards, with an address to dial."""
        try:
            if not record.capabilities() & RELAY or not record.addrs():
                return
            rs = record.relay_shards()
            pid = record.peer_id().to_base58()
        except (EnrError, ValueError):
            return
        ours = node_shards(self.settings)
        if ours.cluster_id and (rs is None or rs[0] != ours.cluster_id or not set(rs[1]) & set(ours.shards)):
            return
        if pid == self.bridge_id:
            return
        known = self.known_enrs.get(pid)
        if known is None or record.seq >= known.seq:
            self.known_enrs[pid] = record
        if pid not in self.discovered:
            log.info("discv5: found relay peer %s", pid)
            self.discovered[pid] = -1e9

    async def _dial_discovered(self) -> None:
        """Dial relay peers discv5 found while the bridge has fewer than discv5.target_peers relay
        peers; a peer is dialled again at most once a minute."""
        assert self.host is not None and self.settings.discv5 is not None
        host, target = self.host, self.settings.discv5.target_peers
        while True:
            await trio.sleep(1.0)
            relay_peers = len(self.pubsub.peers) if self.pubsub is not None else 0
            for pid, last in list(self.discovered.items()):
                if relay_peers >= target:
                    break
                record = self.known_enrs.get(pid)
                if record is None or trio.current_time() - last < 60.0:
                    continue
                info = record.peer_info()
                if host.get_network().connections.get(info.peer_id):
                    continue
                self.discovered[pid] = trio.current_time()
                try:
                    await dial(host, info, 10)
                    relay_peers += 1
                    log.info("discv5: dialled relay peer %s", pid)
                except Exception as exc:  # noqa: BLE001 - any dial failure: logged, tried again later
                    log.info("discv5: relay peer %s: dial failed (%s)", pid, _one_line(exc))

    def _announce_enr(self, udp_port: int | None) -> None:
        """Build, sign and print our ENR (enr:...) from the advertised addresses, the services
        we run and our shards; the sequence number moves on when what it announces changed."""
        s = self.settings
        if not is_secp256k1(self.key_pair):
            log.warning("no ENR: the identity is not a secp256k1 key (docs/discovery.md: a new key "
                        "file, or bridge.nodekey, makes the node discoverable; its peer id changes)")
            return
        caps = ((RELAY if s.relay else 0) | (STORE if s.store else 0) | (FILTER if s.filter else 0)
                | (LIGHTPUSH if s.lightpush_enabled and s.relay else 0))
        shards = node_shards(s)
        fields = WakuEnrFields(tuple(self.addrs), caps, shards.cluster_id, shards.shards if shards.cluster_id else (),
                               udp_port)
        try:
            self.enr = announce(self.key_pair.private_key.to_bytes(), fields, enr_state_file(s.key_file))
        except EnrError as exc:  # e.g. no room in 300 bytes: the node runs, undiscoverable
            log.warning("no ENR: %s", exc)
            return
        print(self.enr.text(), file=self.out, flush=True)
        log.info("ENR seq %d: %s", self.enr.seq, self.enr.text())

    def _px_candidates(self) -> list[Candidate]:
        """The peers whose ENR we know, each with whether it is reachable: connected now, or
        verified alive by discv5 (nwaku hands on the peers its discv5 found)."""
        assert self.host is not None
        connections = self.host.get_network().connections
        alive = ({e.node_id for e in self.discv5.table.entries() if e.verified} if self.discv5 is not None
                 else set())
        return [Candidate(pid, r, bool(connections.get(r.peer_id())) or r.node_id() in alive)
                for pid, r in self.known_enrs.items()]

    async def _store_pushed(self, accepted: Accepted) -> bool:
        """A lightpushed message into Kafka (source lightpush); True once acknowledged."""
        assert self.producer is not None
        topic = accepted.pubsub_topic
        return await self.producer.put_acked(
            ingest_key(topic, accepted.message),
            ingest_value(topic, accepted.data, time.time(), self.bridge_id, pr.LIGHTPUSH),
            time.perf_counter(), self.settings.lightpush_timeout_s)

    async def _rln_pushed(self, accepted: Accepted) -> Accepted | Refused:
        """A lightpushed message on an RLN topic (nwaku 0.37's rule): one without a proof gets
        ours (rln.prove_lightpush; 504 OUT_OF_RLN_PROOF when this epoch's are spent), then every
        proof is validated as relay validates (420 when it fails)."""
        rln = self.rln
        if rln is None or not rln.applies(accepted.pubsub_topic):
            return accepted
        msg = accepted.message
        if not msg.rate_limit_proof:
            if not (rln.settings.prove_lightpush and rln.can_prove):
                return Refused(accepted.request_id, INVALID_MESSAGE, "the message has no RLN proof")
            try:
                msg = await rln.attach(msg)
            except OutOfProofs as exc:
                return Refused(accepted.request_id, OUT_OF_RLN_PROOF, str(exc))
        reason = await rln.validate(accepted.pubsub_topic, msg)
        if reason is not None:
            return Refused(accepted.request_id, INVALID_MESSAGE, f"RLN validation failed: {reason.value}")
        if msg is accepted.message:
            return accepted
        return Accepted(accepted.request_id, accepted.pubsub_topic, msg.SerializeToString(), msg)

    async def prepare_own(self, topic: str, message: WakuMessage, data: bytes) -> tuple[WakuMessage, bytes]:
        """A message of our own on an RLN topic: proved from our membership (when it has no proof)
        and validated as a peer's would be (its nullifier recorded); RlnRefused otherwise."""
        rln = self.rln
        if rln is None or not rln.applies(topic):
            return message, data
        if not message.rate_limit_proof:
            if not rln.can_prove:
                raise RlnRefused("error appending RLN proof to message: this node has no RLN membership "
                                 "(rln.keystore_path)", 500)
            try:
                message = await rln.attach(message)
            except OutOfProofs as exc:
                raise RlnRefused(f"error appending RLN proof to message: {exc}", 500) from None
            data = message.SerializeToString()
        reason = await rln.validate(topic, message)
        if reason is not None:
            raise RlnRefused(f"RLN validation failed: {reason.value}", 400)
        return message, data

    async def _store_pushed_cached(self, accepted: Accepted) -> bool:
        """A lightpushed message (a light client's over libp2p, or our REST lightpush) stored,
        then in the REST relay cache as nwaku's relay hands its own published messages to its
        cache: GET /relay/v1/messages returns what was pushed through this node."""
        stored = await self._store_pushed(accepted)
        if stored and self.rest_cache is not None:
            self.rest_cache.add(accepted.pubsub_topic, accepted.message)
        if not stored and self.rln is not None:  # not relayed: its proof may be sent again
            self.rln.forget(accepted.message)
        return stored

    async def publish(self, topic: str, message: WakuMessage, data: bytes) -> int | None:
        """A message of our own (the REST API's relay publish): proved and checked on an RLN
        topic (RlnRefused), into Kafka (source relay, as the store keeps what the node
        relays), then on relay. The number of relay peers it went to; None when Kafka did not
        acknowledge it within lightpush_timeout_s (not relayed)."""
        assert self.producer is not None
        message, data = await self.prepare_own(topic, message, data)
        stored = await self.producer.put_acked(
            ingest_key(topic, message), ingest_value(topic, data, time.time(), self.bridge_id, pr.RELAY),
            time.perf_counter(), self.settings.lightpush_timeout_s)
        if not stored and self.rln is not None:
            self.rln.forget(message)
        return await self._relay(topic, data) if stored else None

    async def _relay(self, topic: str, data: bytes) -> int:
        """Publish on relay; the number of relay peers it goes to (mesh, else fanout)."""
        assert self.pubsub is not None and self.router is not None
        await self.pubsub.publish(topic, data)
        return len(self.router.mesh.get(topic) or self.router.fanout.get(topic) or ())

    async def _keep_dialled(self) -> None:
        """Dial every static peer at start, and again whenever it is not connected; a peer that
        keeps failing is retried with exponential backoff (redial_interval_s doubling up to
        MAX_REDIAL_S), one log line per failed attempt, no traceback."""
        peers = self.settings.static_peers
        if not peers:
            return
        host = self.host
        assert host is not None
        failures: dict[str, int] = {}
        next_try: dict[str, float] = {}
        while True:
            for info in peers:
                name = info.peer_id.to_base58()
                if host.get_network().connections.get(info.peer_id) or trio.current_time() < next_try.get(name, 0):
                    continue
                try:
                    await dial(host, info, 10)
                    log.info("static peer %s connected%s", name,
                             f" after {failures[name]} failed attempts" if failures.get(name) else "")
                    failures.pop(name, None)
                    next_try.pop(name, None)
                except Exception as exc:  # noqa: BLE001 - any dial failure: log and retry
                    n = failures[name] = failures.get(name, 0) + 1
                    delay = min(self.settings.redial_interval_s * 2 ** (n - 1), MAX_REDIAL_S)
                    next_try[name] = trio.current_time() + delay
                    log.warning("static peer %s: dial failed (%s), attempt %d; next in %.0f s",
                                name, _one_line(exc), n, delay)
            await trio.sleep(1.0)

    async def _update_gauges(self) -> None:
        """Gauges, a status line every STATUS_EVERY_S while messages flow, and a watch on the
        background threads (`threads()`): if a producer's feeder failed, or any thread ended, the
        bridge stops with an error (a non-zero exit), never serves half-working. (Threads that
        restart themselves after a failure are counted in waku_bridge_thread_failures.)"""
        last_status = trio.current_time()
        last = self._counts()
        while True:
            if self.pubsub is not None:
                self.metrics.peers.set(len(self.pubsub.peers))
            if self.stream_gate is not None:
                self.metrics.streams_open.set(self.stream_gate.total)
            if self.producer is not None and self.producer.failed is not None:
                raise BridgeError(f"kafka producer failed: {self.producer.failed}")
            filter_producer = self.filter.producer if self.filter is not None else None
            if filter_producer is not None and filter_producer.failed is not None:
                raise BridgeError(f"the filter service's kafka producer failed: {filter_producer.failed}")
            for t in self.threads():
                self.metrics.thread_alive.labels(t.name).set(1 if t.alive else 0)
                self.metrics.thread_failures.labels(t.name).set(t.failures)
                if not t.alive and not self._stop.is_set():  # ended by what its loop does not catch
                    raise BridgeError(f"background thread {t.name} died"
                                      + (f": {_one_line(t.failed)}" if t.failed is not None else ""))
            if trio.current_time() - last_status >= STATUS_EVERY_S:
                counts = self._counts()
                if counts != last:
                    log.info("status: %s; %d peers, %d records unacknowledged",
                             ", ".join(f"{k} {v:.0f} (+{v - last[k]:.0f})" for k, v in counts.items()),
                             len(self.pubsub.peers) if self.pubsub else 0,
                             self.producer.outstanding if self.producer else 0)
                last, last_status = counts, trio.current_time()
            await trio.sleep(0.5)

    def threads(self) -> list[ThreadState]:
        """The background threads of this bridge's services, as they are now."""
        out: list[ThreadState] = []
        for name, producer in (("relay-kafka-feeder", self.producer),
                               ("filter-kafka-feeder", self.filter.producer if self.filter else None)):
            if producer is not None:  # a failure stops the bridge (_update_gauges)
                out.append(ThreadState(name, producer.failed is None, 1 if producer.failed else 0, producer.failed))
        consumer = self.filter.consumer if self.filter is not None else None
        if consumer is not None:
            out.append(ThreadState("push-consumer", consumer.alive, consumer.failures, consumer.failed))
        if self.store is not None:
            if self.store.follower is not None:
                f = self.store.follower
                out.append(ThreadState("store-tail", f.alive, f.failures, f.failed))
            follower = getattr(self.store.reader, "follower", None)
            if isinstance(follower, SupervisedThread):
                out.append(ThreadState(follower.name, follower.alive, follower.failures, follower.failed))
        return out

    def health_problems(self) -> list[str]:
        """What keeps this bridge from serving fully, one line each (empty: healthy): a background
        thread that is not running, or failed (and was started again) in the last minute. Read by
        the REST API's /health; the same threads are `waku_bridge_thread_{alive,failures}`."""
        problems: list[str] = []
        now = time.monotonic()
        for t in self.threads():
            seen = self._thread_failures.get(t.name)
            if seen is None or seen[0] != t.failures:
                seen = self._thread_failures[t.name] = (t.failures, now if t.failures else -RECENT_FAILURE_S)
            error = "" if t.failed is None else f": {_one_line(t.failed)}"
            if not t.alive:
                problems.append(f"thread {t.name} is not running{error}")
            elif now - seen[1] < RECENT_FAILURE_S:
                problems.append(f"thread {t.name} failed {t.failures} times and was started again, last{error}")
        return problems

    def _counts(self) -> dict[str, float]:
        v = self.metrics.value
        return {
            "received": v("waku_bridge_received_total"),
            "accepted": v("waku_bridge_accepted_total"),
            "rejected": sum(v("waku_bridge_rejected_total", reason=r.value) for r in Reject),
            "produced": v("waku_bridge_produced_total"),
            "dropped": sum(v("waku_bridge_dropped_total", reason=r) for r in DROP_REASONS),
        }
