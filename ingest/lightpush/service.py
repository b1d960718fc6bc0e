"""The lightpush service on the bridge's host: the stream handlers of v3 and v2 frame and
decode, `protocol.from_v3/from_v2` decide, and an accepted message is produced to Kafka with
source `lightpush` (the answer waits for the acknowledgement: 200 means stored) and published
on relay (the answer's relay_peer_count). With no relay peer the message is still accepted:
stored, and pushed to filter subscribers by the pipeline (nwaku answers 505 there, as it
cannot deliver it otherwise; docs/decisions.md). A message relay has already seen is refused
(420 `Dropping already-seen message`; legacy: `not_published_to_any_peer`), as nwaku."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from prometheus_client import CollectorRegistry, Counter

from ingest.framing import FrameReader, close_quietly, frame, peer_of
from ingest.lightpush import codec
from ingest.lightpush.protocol import Accepted, PushContext, Refused, from_v2, from_v3
from ingest.ratelimit import PeerBuckets
from schemas import lightpush_pb2 as pb

log = logging.getLogger("ingest.lightpush")

REQUEST_TIMEOUT_S = 10.0


class LightpushMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.requests = Counter("waku_lightpush_requests", "Lightpush requests by protocol version and status",
                                ["version", "status"], registry=r)


class LightpushService:
    """    service = LightpushService(host, ctx, store=..., relay=...)
    service.mount()"""

    def __init__(self, host: IHost, ctx: PushContext, *, store: Callable[[Accepted], Awaitable[bool]],
                 relay: Callable[[str, bytes], Awaitable[int]], registry: CollectorRegistry | None = None,
                 per_peer_per_s: float = 0.0, seen: Callable[[bytes], bool] = lambda data: False,
                 rln: Callable[[Accepted], Awaitable[Accepted | Refused]] | None = None) -> None:
        self.host = host
        # RLN (the node's): a message on an RLN topic proved or refused before it is stored.
        self.rln = rln
        self.per_peer = PeerBuckets(per_peer_per_s, 2 * per_peer_per_s)
        self.ctx = ctx
        self.store = store
        self.relay = relay
        self.seen = seen  # whether relay has already seen a message (its bytes)
        self.metrics = LightpushMetrics(registry)

    def mount(self) -> None:
        self.host.set_stream_handler(TProtocol(codec.LIGHTPUSH_V3_CODEC), self._on_v3)
        self.host.set_stream_handler(TProtocol(codec.LIGHTPUSH_V2_CODEC), self._on_v2)

    async def _on_v3(self, stream: INetStream) -> None:
        async def answer(data: bytes) -> bytes:
            req = pb.LightpushRequest.FromString(data)
            code, detail, peers = await self.push(self._limited(stream, req.request_id) or from_v3(req, self.ctx))
            self.metrics.requests.labels("v3", str(code)).inc()
            return codec.v3_response(req.request_id, code, detail, peers)
        await self._one_request(stream, answer)

    async def _on_v2(self, stream: INetStream) -> None:
        async def answer(data: bytes) -> bytes:
            rpc = pb.PushRPC.FromString(data)
            code, detail, _ = await self.push(self._limited(stream, rpc.request_id) or from_v2(rpc, self.ctx))
            self.metrics.requests.labels("v2", str(code)).inc()
            return codec.v2_response(rpc.request_id, code, detail)
        await self._one_request(stream, answer)

    def _limited(self, stream: INetStream, request_id: str) -> Refused | None:
        if self.per_peer.allow(peer_of(stream)):
            return None
        return Refused(request_id, codec.TOO_MANY_REQUESTS, "request rate limit reached")

    async def push(self, decision: Accepted | Refused) -> tuple[int, str, int | None]:
        """(status, detail, relay peers) for a decided request."""
        if isinstance(decision, Refused):
            log.debug("lightpush: request %s refused: %d %s", decision.request_id, decision.code, decision.detail)
            return decision.code, decision.detail, None
        if self.seen(decision.data):  # nwaku's relay does not publish it again: an error
            log.debug("lightpush: request %s: message already seen", decision.request_id)
            return codec.INVALID_MESSAGE, codec.ALREADY_SEEN, None
        if self.rln is not None:
            checked = await self.rln(decision)
            if isinstance(checked, Refused):
                log.debug("lightpush: request %s refused: %d %s", checked.request_id, checked.code, checked.detail)
                return checked.code, checked.detail, None
            decision = checked
        if not await self.store(decision):
            return codec.SERVICE_NOT_AVAILABLE, "the message could not be stored (Kafka did not acknowledge it)", None
        try:
            peers = await self.relay(decision.pubsub_topic, decision.data)
        except Exception as exc:  # noqa: BLE001 - stored already: relay is best effort here
            log.warning("lightpush: relaying %s failed: %s: %s", decision.request_id, type(exc).__name__, exc)
            peers = 0
        return codec.SUCCESS, "", peers

    async def _one_request(self, stream: INetStream, answer: Callable[[bytes], Awaitable[bytes]]) -> None:
        """One request per stream, as the reference clients send; silence, a bad frame or bytes
        that do not decode close the stream (counted)."""
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S) as timeout:
                data = await FrameReader(stream, codec.MAX_READ_BYTES).read_frame()
            if timeout.cancelled_caught or data is None:
                return
            try:
                out = await answer(data)
            except DecodeError:
                self.metrics.requests.labels("any", "undecodable").inc()
                return
            await stream.write(frame(out))
        except Exception as exc:  # noqa: BLE001 - bad frame, reset: this stream only
            log.debug("lightpush: stream ended: %s: %s", type(exc).__name__, exc)
        finally:
            await close_quietly(stream)
