"""The metadata service on a host: answers `/vac/waku/metadata/1.0.0` requests with our
cluster and shards, and asks every newly connected peer for its own; a peer of another cluster
is disconnected (counted by reason, logged once per peer). A peer that does not speak the
protocol at all is kept: it claims no cluster (old or minimal clients)."""
from __future__ import annotations

import logging
from typing import Any

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetConn, INetStream, INetwork
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from prometheus_client import CollectorRegistry, Counter

from ingest.framing import FrameReader, close_quietly, frame, peer_of
from ingest.metadata.codec import MAX_METADATA_BYTES, METADATA_CODEC, decode, request, response
from ingest.metadata.protocol import NodeShards, keep_peer
from ingest.p2p_patches import ConnectionNotifee
from schemas import metadata_pb2 as pb

log = logging.getLogger("ingest.metadata")

REQUEST_TIMEOUT_S = 5.0


class MetadataMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.requests = Counter("waku_metadata_requests", "Metadata requests answered", registry=r)
        self.checks = Counter("waku_metadata_peer_checks", "Peers asked for their metadata on connect, by outcome",
                              ["outcome"], registry=r)
        self.disconnected = Counter("waku_metadata_disconnected_peers", "Peers disconnected for their metadata",
                                    registry=r)


class _Connected(ConnectionNotifee):
    """Hands each new connection's peer to the service (py-libp2p awaits notifees inline)."""

    def __init__(self, send: trio.MemorySendChannel) -> None:
        self.send = send

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        try:
            self.send.send_nowait(conn.muxed_conn.peer_id)
        except (trio.WouldBlock, trio.ClosedResourceError):
            pass

    async def disconnected(self, network: INetwork, conn: INetConn) -> None: ...


class MetadataService:
    """    service = MetadataService(host, NodeShards(1, (0, 1, 2)))
    nursery.start_soon(service.run)       # serves and checks until cancelled"""

    def __init__(self, host: IHost, ours: NodeShards, registry: CollectorRegistry | None = None,
                 check_peers: bool = True) -> None:
        self.host = host
        self.ours = ours
        self.check_peers = check_peers
        self.metrics = MetadataMetrics(registry)
        self.peer_clusters: dict[str, int | None] = {}  # what each checked peer reported

    def mount(self) -> None:
        self.host.set_stream_handler(TProtocol(METADATA_CODEC), self._on_request)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self.mount()
        send, recv = trio.open_memory_channel(1024)
        notifee = _Connected(send)
        network = self.host.get_network()
        if self.check_peers:
            network.register_notifee(notifee)
        try:
            async with trio.open_nursery() as nursery:
                task_status.started(self)
                async for peer_id in recv:
                    nursery.start_soon(self._check, peer_id)
        finally:
            if self.check_peers:
                network.remove_notifee(notifee)

    async def _on_request(self, stream: INetStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S):
                data = await FrameReader(stream, MAX_METADATA_BYTES).read_frame()
                if data is not None:
                    try:
                        decode(data, pb.WakuMetadataRequest)
                    except DecodeError:
                        log.debug("metadata: undecodable request from %s", peer_of(stream))
                        return
                    await stream.write(frame(response(self.ours.cluster_id, self.ours.shards)))
                    self.metrics.requests.inc()
        except Exception as exc:  # noqa: BLE001 - a broken stream: nothing to answer
            log.debug("metadata: stream from %s ended: %s: %s", peer_of(stream), type(exc).__name__, exc)
        finally:
            await close_quietly(stream)

    async def query(self, peer_id: ID) -> tuple[int | None, tuple[int, ...]]:
        """Ask a connected peer for its metadata (raises when it does not answer)."""
        with trio.fail_after(REQUEST_TIMEOUT_S):
            stream = await self.host.new_stream(peer_id, [TProtocol(METADATA_CODEC)])
            try:
                await stream.write(frame(request(self.ours.cluster_id, self.ours.shards)))
                data = await FrameReader(stream, MAX_METADATA_BYTES).read_frame()
            finally:
                await close_quietly(stream)
        if data is None:
            raise ConnectionError("closed without an answer")
        return decode(data)

    async def _check(self, peer_id: ID) -> None:
        name = peer_id.to_base58()
        try:
            cluster, shards = await self.query(peer_id)
        except Exception as exc:  # noqa: BLE001 - not spoken, timed out, reset: the peer stays
            self.metrics.checks.labels("no_metadata").inc()
            log.debug("metadata: %s did not answer (%s: %s); kept", name, type(exc).__name__, exc)
            return
        self.peer_clusters[name] = cluster
        why = keep_peer(self.ours, cluster)
        if why is None:
            self.metrics.checks.labels("same_cluster").inc()
            log.debug("metadata: %s is on cluster %s, shards %s", name, cluster, list(shards))
            return
        self.metrics.checks.labels("other_cluster").inc()
        self.metrics.disconnected.inc()
        log.info("metadata: disconnecting %s: %s", name, why)
        try:
            await self.host.disconnect(peer_id)
        except Exception as exc:  # noqa: BLE001 - already gone
            log.debug("metadata: disconnect of %s: %s", name, exc)
