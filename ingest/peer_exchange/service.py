"""The peer exchange server on the bridge's host: one query per stream, framed and decoded
here, answered by `protocol.choose`; rate-limited as nwaku's RequestRateLimiter (px:5/1s by
default), a query over the limit answered 429 as nwaku does."""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from prometheus_client import CollectorRegistry, Counter

from ingest.framing import FrameReader, close_quietly, frame, peer_of
from ingest.peer_exchange import codec
from ingest.peer_exchange.protocol import Candidate, choose
from ingest.ratelimit import PeerBuckets, TokenBucket

log = logging.getLogger("ingest.peer_exchange")

REQUEST_TIMEOUT_S = 10.0
# nwaku's RequestRateLimiter for a limit of N per second: the node's bucket holds 10 s of the
# rate (starting with one second's worth), each peer's 75 % of that.
WINDOW_S = 10
PEER_SHARE = 0.75


class PeerExchangeMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        self.requests = Counter("waku_peer_exchange_requests", "Peer exchange queries by answer status",
                                ["status"], registry=r)
        self.peers_sent = Counter("waku_peer_exchange_peers_sent", "ENRs sent in peer exchange answers",
                                  registry=r)


class PeerExchangeService:
    """    service = PeerExchangeService(host, own_peer_id, cluster, candidates, per_s=5.0)
    service.mount()

    `candidates()` lists the peers whose ENR we know, each with whether it is connected now."""

    def __init__(self, host: IHost, own_peer_id: str, cluster: int, candidates: Callable[[], Iterable[Candidate]],
                 *, per_s: float = 5.0, registry: CollectorRegistry | None = None,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.host = host
        self.own_peer_id = own_peer_id
        self.cluster = cluster
        self.candidates = candidates
        self.limit: TokenBucket | None = None
        self.per_peer = PeerBuckets(0, 0)
        if per_s > 0:
            self.limit = TokenBucket(per_s, WINDOW_S * per_s, clock)
            self.limit.tokens = max(1.0, per_s)
            self.per_peer = PeerBuckets(PEER_SHARE * per_s, max(1.0, PEER_SHARE * WINDOW_S * per_s), clock)
        self.metrics = PeerExchangeMetrics(registry)
        self.rng = rng or random.Random()

    def mount(self) -> None:
        self.host.set_stream_handler(TProtocol(codec.PEER_EXCHANGE_CODEC), self._on_stream)

    def answer(self, data: bytes, peer: str = "") -> tuple[int, bytes]:
        """(status, response bytes) for a peer's query bytes."""
        if self.limit is not None and not (self.per_peer.allow(peer) and self.limit.try_take()):
            return codec.TOO_MANY_REQUESTS, codec.encode_response([], codec.TOO_MANY_REQUESTS)
        try:
            num_peers = codec.decode_query(data)
        except DecodeError as exc:
            return codec.BAD_REQUEST, codec.encode_response([], codec.BAD_REQUEST, str(exc))
        enrs = choose(num_peers, self.candidates(), self.cluster, self.own_peer_id, self.rng)
        self.metrics.peers_sent.inc(len(enrs))
        return codec.SUCCESS, codec.encode_response(enrs)

    async def _on_stream(self, stream: INetStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT_S) as timeout:
                data = await FrameReader(stream, codec.MAX_REQUEST_BYTES).read_frame()
            if timeout.cancelled_caught or data is None:
                self.metrics.requests.labels("no_request").inc()
                return
            status, out = self.answer(data, peer_of(stream))
            self.metrics.requests.labels(str(status)).inc()
            await stream.write(frame(out))
        except Exception as exc:  # noqa: BLE001 - bad frame, reset: this stream only
            log.debug("peer exchange: stream ended: %s: %s", type(exc).__name__, exc)
        finally:
            await close_quietly(stream)
