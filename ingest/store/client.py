"""A store client: HistoryRPC queries to a remote /vac/waku/store/2.0.0-beta2 peer (tests, the
`waku-store` CLI, the benchmark). One stream per query, as the reference clients do; with
reuse_streams=True, one stream per peer carries query after query (this package's server answers
every frame of a stream; a server that closes after one answer costs a retry on a new stream).

    async with StoreClient.running() as client:
        peer = await client.connect("/ip4/127.0.0.1/tcp/60000/p2p/16Uiu2...")
        page = await client.query(peer, StoreQuery(content_topics=("/app/1/chat/proto",)))
"""
from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from libp2p.abc import IHost, INetStream
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo

from core.store_page import StoreQuery
from ingest.framing import FrameReader, frame
from ingest.host import build_host, dial
from ingest.settings import parse_peer
from ingest.store.codec import STORE_CODEC, RemotePage, decode_rpc, page_from_response, query_to_proto
from ingest.store.codec_v3 import STORE_V3_CODEC, decode_response
from schemas import store_beta2_pb2 as pb
from schemas import store_v3_pb2 as pb3

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_MULTISTREAM_LINE = b"/multistream/1.0.0\n"
_PROTOCOL_LINE = STORE_CODEC.encode() + b"\n"
_NEGOTIATE = frame(_MULTISTREAM_LINE) + frame(_PROTOCOL_LINE)


class StoreError(Exception):
    """The peer did not answer with a HistoryRPC response."""


class StoreClient:
    def __init__(self, host: IHost, timeout: float = 30.0, reuse_streams: bool = False) -> None:
        self.host = host
        self.timeout = timeout
        self.reuse_streams = reuse_streams
        self._streams: dict[ID, tuple[INetStream, FrameReader]] = {}
        self._locks: dict[ID, trio.Lock] = {}

    @classmethod
    @asynccontextmanager
    async def running(cls, timeout: float = 30.0, reuse_streams: bool = False) -> AsyncIterator[StoreClient]:
        """A client on its own host (no listener)."""
        host = build_host(create_new_key_pair(), [])
        async with host.run([]):
            client = cls(host, timeout, reuse_streams)
            try:
                yield client
            finally:
                for stream, _ in client._streams.values():
                    with trio.move_on_after(1):
                        try:
                            await stream.close()
                        except Exception:  # noqa: BLE001
                            pass

    async def connect(self, peer: str | PeerInfo) -> ID:
        info = parse_peer(peer) if isinstance(peer, str) else peer
        await dial(self.host, info, self.timeout)
        return info.peer_id

    async def send_raw(self, peer_id: ID, data: bytes) -> bytes | None:
        """Write `data` as is on a new store stream; the first frame back (None: closed).

        The protocol negotiation is pipelined (multistream-select's "lazy" initiator, as
        go-libp2p does): the multistream header, the protocol id and the request go out in one
        write, and the two echoes are read before the response. One round trip per query
        instead of three."""
        with trio.fail_after(self.timeout):
            stream = await self.host.get_network().new_stream(peer_id)
            try:
                await stream.write(_NEGOTIATE + data)
                frames = FrameReader(stream, MAX_RESPONSE_BYTES)
                header = await frames.read_frame()
                if header != _MULTISTREAM_LINE:
                    raise StoreError(f"not a multistream-select peer (got {header!r})")
                echo = await frames.read_frame()
                if echo != _PROTOCOL_LINE:
                    raise StoreError(f"the peer does not speak {STORE_CODEC} (got {echo!r})")
                return await frames.read_frame()
            finally:
                with trio.move_on_after(1):
                    await stream.close()

    async def _send_reused(self, peer_id: ID, data: bytes) -> bytes | None:
        lock = self._locks.setdefault(peer_id, trio.Lock())
        async with lock:
            for _attempt in (1, 2):
                entry = self._streams.get(peer_id)
                fresh = entry is None
                try:
                    with trio.fail_after(self.timeout):
                        if entry is None:
                            stream = await self.host.new_stream(peer_id, [TProtocol(STORE_CODEC)])
                            entry = self._streams[peer_id] = (stream, FrameReader(stream, MAX_RESPONSE_BYTES))
                        await entry[0].write(data)
                        answer = await entry[1].read_frame()
                except trio.TooSlowError:
                    self._streams.pop(peer_id, None)
                    raise
                except Exception:  # a stream the server closed: retry on a new one
                    self._streams.pop(peer_id, None)
                    if fresh:
                        raise
                    continue
                if answer is None:
                    self._streams.pop(peer_id, None)
                    if not fresh:
                        continue
                return answer
            return None

    async def query_v3(self, peer_id: ID, request: bytes) -> pb3.StoreQueryResponse:
        """Send one StoreQueryRequest (codec_v3.request(...)) on a new
        /vac/waku/store-query/3.0.0 stream; the StoreQueryResponse."""
        with trio.fail_after(self.timeout):
            stream = await self.host.new_stream(peer_id, [TProtocol(STORE_V3_CODEC)])
            try:
                await stream.write(frame(request))
                answer = await FrameReader(stream, MAX_RESPONSE_BYTES).read_frame()
            finally:
                with trio.move_on_after(1):
                    await stream.close()
        if answer is None:
            raise StoreError("the store peer closed the stream without answering")
        return decode_response(answer)

    async def query(self, peer_id: ID, query: StoreQuery, request_id: str | None = None) -> RemotePage:
        rpc = pb.HistoryRPC(request_id=request_id or uuid.uuid4().hex, query=query_to_proto(query))
        data = frame(rpc.SerializeToString())
        if self.reuse_streams:
            answer = await self._send_reused(peer_id, data)
        else:
            answer = await self.send_raw(peer_id, data)
        if answer is None:
            raise StoreError("the store peer closed the stream without answering")
        reply = decode_rpc(answer)
        if reply.request_id != rpc.request_id:
            raise StoreError(f"response for request {reply.request_id!r}, expected {rpc.request_id!r}")
        return page_from_response(reply, query.pubsub_topic)
