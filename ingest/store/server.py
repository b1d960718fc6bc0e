"""The store server: answers HistoryRPC queries on /vac/waku/store/2.0.0-beta2 and
StoreQueryRequests on /vac/waku/store-query/3.0.0 from the same online reader
(ingest/store/reader.py). Mounted on the bridge's host (ingest/node.py). The stream
handler frames (ingest/framing.py) and runs the reader; what to answer is decided by the pure
functions of ingest/store/protocol.py.

Per stream: read frames until the peer closes (one query per stream, as nwaku clients do, or
several); answer each with a HistoryRPC response carrying its request_id. An unservable query
(too many content topics, a bad cursor; see core/store_page.check_query) or a failing
read gets an empty response and is counted by reason; bytes that are not a HistoryRPC, an
oversized or broken frame, or silence for request_timeout_s close the stream (counted).
A page whose row groups are in the reader's cache is answered inline; one that must read
storage runs in a worker thread (at most max_concurrent_queries at once), so the trio loop
keeps serving relay and other streams.

With `store_service.fresh_tail` the reader also answers messages that are in Kafka but not yet
in Delta (ingest/store/tail.py): `start` opens the tail and its consumer thread.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from core.config import Config, ConfigError
from core.store_page import Index, Page, StoredMessage, StoreLimits, StoreQuery
from ingest.framing import FrameError, FrameReader, FrameTimeout, close_quietly, frame, peer_of
from ingest.ratelimit import PeerBuckets
from ingest.store import codec_v3
from ingest.store.codec import STORE_CODEC, decode_rpc
from ingest.store.codec_v3 import STORE_V3_CODEC
from ingest.store.protocol import REJECT_REASONS, V3Plan, lookup_page, page_cursor_v3, plan, plan_v3, respond
from ingest.store.reader import NotCached, ReaderSettings, StoreReader
from ingest.store.tail import Tail, TailFollower, TailSettings, committed_offsets
from schemas import store_beta2_pb2 as pb
from schemas import store_v3_pb2 as pb3

log = logging.getLogger("ingest.store")
_T = TypeVar("_T")
_Request = TypeVar("_Request", pb.HistoryRPC, pb3.StoreQueryRequest)  # a decoded request frame

CLOSE_REASONS = ("undecodable", "bad_frame", "timeout")
# The v3 answer (status, detail) to a valid query the server does not serve now, by reason.
V3_REFUSALS = {
    "rate_limited": (codec_v3.TOO_MANY_REQUESTS, "request rate limit reached"),
    "busy": (codec_v3.TOO_MANY_REQUESTS, "too many queries of this peer at once"),
    "catching_up": (codec_v3.SERVICE_UNAVAILABLE,
                    "the store is catching up with Kafka after a restart; retry shortly"),
}
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass(frozen=True)
class StoreServiceSettings:
    enabled: bool = True
    limits: StoreLimits = StoreLimits()
    max_request_bytes: int = 1048576
    max_concurrent_queries: int = 2
    request_timeout_s: float = 10.0
    max_queries_per_peer_per_s: float = 0.0  # 0: no limit (nwaku's default for store)
    # Queries of one peer answered at once; one more is refused at once ("busy"). A client paging
    # one page after another has one at a time. 0: no limit.
    max_concurrent_queries_per_peer: int = 4
    reader: ReaderSettings | None = None  # what StoreServer.start opens
    # The fresh tail (ingest/store/tail.py): messages in Kafka not yet in Delta; None: Delta only.
    tail: TailSettings | None = None

    @classmethod
    def from_config(cls, config: Config) -> StoreServiceSettings:
        s = config["store_service"]
        if s["preload_mb"] < 0:
            raise ConfigError(f"store_service.preload_mb: expected 0 or more, got {s['preload_mb']}")
        for key in ("max_concurrent_queries", "max_concurrent_queries_per_peer"):
            if s[key] < 0:
                raise ConfigError(f"store_service.{key}: expected 0 or more, got {s[key]}")
        for key in ("default_page_size", "max_page_size", "max_content_topics", "max_request_bytes",
                    "max_scan_rows", "cache_mb"):
            if s[key] < 1:
                raise ConfigError(f"store_service.{key}: expected at least 1, got {s[key]}")
        for key in ("refresh_interval_s", "request_timeout_s"):
            if s[key] <= 0:
                raise ConfigError(f"store_service.{key}: expected a positive number of seconds, got {s[key]}")
        if s["default_page_size"] > s["max_page_size"]:
            raise ConfigError("store_service.default_page_size: must not exceed max_page_size")
        return cls(s["enabled"], StoreLimits.from_config(config), s["max_request_bytes"],
                   s["max_concurrent_queries"], s["request_timeout_s"], max(0.0, s["max_queries_per_peer_per_s"]),
                   s["max_concurrent_queries_per_peer"], ReaderSettings.from_config(config),
                   TailSettings.from_config(config) if s["fresh_tail"] else None)


class StoreMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.queries = Counter("waku_store_queries", "History queries answered (empty responses included)", registry=r)
        self.rejected = Counter("waku_store_rejected", "Queries answered empty because unservable, by reason",
                                ["reason"], registry=r)
        self.closed = Counter("waku_store_streams_closed", "Streams closed without an answer, by reason",
                              ["reason"], registry=r)
        self.latency = Histogram("waku_store_query_seconds", "From a decoded query to its response written",
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.v3 = Counter("waku_store_v3_queries", "Store v3 queries answered, by status code", ["status"],
                          registry=r)
        self.tail_lag = Histogram("waku_store_tail_lag_seconds",
                                  "Age of the oldest record of each batch the fresh tail takes in "
                                  "(Kafka append -> in the tail)",
                                  buckets=LATENCY_BUCKETS, registry=r)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason)
        for reason in CLOSE_REASONS:
            self.closed.labels(reason)

    def watch_tail(self, tail: Tail) -> None:
        """Gauges of the fresh tail: messages held, and since start those taken in, made
        durable by a Delta commit, evicted over tail_max_messages."""
        for name, doc, fn in (
                ("waku_store_tail_messages", "Messages in the store's fresh tail (in Kafka, not yet in Delta)",
                 lambda: len(tail)),
                ("waku_store_tail_added", "Messages taken into the fresh tail since start", lambda: tail.added),
                ("waku_store_tail_durable", "Tail messages dropped because a Delta commit holds them",
                 lambda: tail.dropped),
                ("waku_store_tail_evicted", "Tail messages evicted over tail_max_messages before a commit",
                 lambda: tail.evicted),
                ("waku_store_tail_swept", "Tail messages the store job refused (below its committed offsets, "
                 "not in Delta)", lambda: tail.swept)):
            Gauge(name, doc, registry=self.registry).set_function(fn)

    def value(self, name: str, **labels: str) -> float:
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v


class StoreServer:
    """Serve `reader` (anything with .query(StoreQuery) -> Page) on a libp2p host.

        server = StoreServer(reader, StoreServiceSettings.from_config(config))
        server.mount(host)
    """

    def __init__(self, reader: Any, settings: StoreServiceSettings = StoreServiceSettings(),
                 metrics: StoreMetrics | None = None) -> None:
        self.reader = reader
        self.settings = settings
        self.metrics = metrics or StoreMetrics()
        self._limiter: trio.CapacityLimiter | None = None
        rate = settings.max_queries_per_peer_per_s
        self._per_peer = PeerBuckets(rate, 2 * rate)
        self._in_flight: dict[str, int] = {}  # peer -> its queries being answered now (_serve)
        self.follower: TailFollower | None = None  # the fresh tail's Kafka consumer (start())
        self._late_logged: object = None  # the wake whose slow catch-up was logged (_caught_up)

    @classmethod
    def start(cls, host: IHost, settings: StoreServiceSettings,
              registry: CollectorRegistry | None = None) -> StoreServer:
        """Open an online reader on settings.reader (following new table versions), with the
        fresh tail when settings.tail is set (its Kafka consumer thread starts here), and mount
        the protocols on `host`; close() stops following."""
        assert settings.reader is not None, "StoreServiceSettings.reader: the table to serve"
        tail = None
        if settings.tail is not None:
            t = settings.tail
            tail = Tail(t.max_messages, lambda: committed_offsets(t.checkpoint_path, t.topic, t.object_store))
        reader = StoreReader(settings.reader, tail)
        reader.follow()
        server = cls(reader, settings, StoreMetrics(registry))
        if tail is not None:
            server.follower = TailFollower(t, tail, reader.durable_among, reader.hashes_ready)
            server.follower.on_taken = server.metrics.tail_lag.observe
            server.follower.start()
            server.metrics.watch_tail(tail)
            follower = server.follower
            Gauge("waku_store_tail_consumer_failures",
                  "Times the fresh tail's Kafka consumer thread failed and was started again",
                  registry=server.metrics.registry).set_function(lambda: follower.failures)
            Gauge("waku_store_tail_idle",
                  "1 while the fresh tail reads Kafka once every tail_idle_fetch_s (no query for "
                  "tail_idle_after_s), 0 while it follows record by record",
                  registry=server.metrics.registry).set_function(lambda: int(follower.idle))
        server.mount(host)
        log.info("store: serving %s and %s from %s (table version %s)", STORE_V3_CODEC, STORE_CODEC,
                 settings.reader.table_path,
                 reader.snapshot.version if reader.snapshot else "none yet")
        return server

    def mount(self, host: IHost) -> None:
        host.set_stream_handler(TProtocol(STORE_CODEC), self.handle)
        host.set_stream_handler(TProtocol(STORE_V3_CODEC), self.handle_v3)

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        close = getattr(self.reader, "close", None)
        if close is not None:
            close()

    async def handle(self, stream: INetStream) -> None:
        """beta2: HistoryRPC frames, each answered with a HistoryRPC."""
        await self._serve(stream, decode_rpc, self._answer)

    async def handle_v3(self, stream: INetStream) -> None:
        """v3: StoreQueryRequest frames, each answered with a StoreQueryResponse."""
        await self._serve(stream, codec_v3.decode_request, self._answer_v3)

    async def _serve(self, stream: INetStream, decode: Callable[[bytes], _Request],
                     answer: Callable[[_Request, INetStream], Awaitable[bytes]]) -> None:
        if self._limiter is None and self.settings.max_concurrent_queries > 0:
            self._limiter = trio.CapacityLimiter(self.settings.max_concurrent_queries)
        frames = FrameReader(stream, self.settings.max_request_bytes,
                             idle_timeout_s=self.settings.request_timeout_s)
        try:
            while True:
                data = await frames.read_frame()
                if data is None:
                    return
                try:
                    rpc = decode(data)
                except DecodeError:
                    self.metrics.closed.labels("undecodable").inc()
                    log.debug("store: undecodable RPC from %s", peer_of(stream))
                    return
                peer = peer_of(stream)
                self._in_flight[peer] = self._in_flight.get(peer, 0) + 1
                try:
                    out = await answer(rpc, stream)
                finally:
                    left = self._in_flight.pop(peer) - 1
                    if left:
                        self._in_flight[peer] = left
                await stream.write(frame(out))
        except FrameTimeout:
            self.metrics.closed.labels("timeout").inc()
        except FrameError as exc:
            self.metrics.closed.labels("bad_frame").inc()
            log.debug("store: %s from %s", exc, peer_of(stream))
        except Exception as exc:  # noqa: BLE001 - a broken stream must not take the node down
            log.debug("store: stream from %s ended: %s: %s", peer_of(stream), type(exc).__name__, exc)
        finally:
            await close_quietly(stream)

    async def _answer(self, rpc: pb.HistoryRPC, stream: INetStream) -> bytes:
        began = time.perf_counter()
        self.metrics.queries.inc()
        page = None
        query, reason = plan(rpc, self.settings.limits)
        if query is not None:
            reason = await self._refusal(peer_of(stream))
            if reason is not None:
                query = None
        if query is not None:
            try:
                page = await self._query(query)
            except Exception:  # answer empty, count, keep serving
                log.exception("store: query %r failed", rpc.request_id)
                reason = "error"
        if reason is not None:
            self.metrics.rejected.labels(reason).inc()
            log.debug("store: query %r from %s answered empty: %s", rpc.request_id, peer_of(stream), reason)
        out = respond(rpc, page)
        self.metrics.latency.observe(time.perf_counter() - began)
        return out


    async def _answer_v3(self, req: pb3.StoreQueryRequest, stream: INetStream) -> bytes:
        return await self.query_v3(req, peer_of(stream))

    async def query_v3(self, req: pb3.StoreQueryRequest, peer: str) -> bytes:
        """The StoreQueryResponse (serialized) to `req` from `peer` (a libp2p peer id; "rest" for
        the REST API's GET /store/v3/messages): one plan, limits, refusals and metrics for both."""
        began = time.perf_counter()
        self.metrics.queries.inc()
        plan3, refusal = plan_v3(req, self.settings.limits)
        if plan3 is not None:
            reason = await self._refusal(peer)
            if reason is not None:
                self.metrics.rejected.labels(reason).inc()
                plan3, refusal = None, V3_REFUSALS[reason]
        if plan3 is None:
            assert refusal is not None  # plan_v3 gives a plan or a refusal
            code, detail = refusal
            out = codec_v3.response(req.request_id, code, detail)
        else:
            try:
                code, detail, messages, cursor = await self._run_v3(plan3)
            except Exception:  # answer 500, count, keep serving
                log.exception("store: v3 query %r failed", req.request_id)
                self.metrics.rejected.labels("error").inc()
                code, detail, messages, cursor = codec_v3.INTERNAL_ERROR, "the query failed", [], None
            out = codec_v3.response(req.request_id, code, detail, messages, plan3.include_data, cursor)
        self.metrics.v3.labels(str(code)).inc()
        if code != codec_v3.OK:
            log.debug("store: v3 query %r from %s answered %d %s", req.request_id, peer, code, detail)
        self.metrics.latency.observe(time.perf_counter() - began)
        return out

    async def _run_v3(self, p: V3Plan) -> tuple[int, str, list[StoredMessage], bytes | None]:
        """(status, detail, messages, response cursor) of a v3 plan. A page the scan budget cut
        short with nothing found is continued here: a v3 client stops at the first empty page.
        The cursor names one message: its place in the total order (receive time, digest, hash)."""
        query = p.query
        if p.cursor_hash is not None:
            if not any(p.cursor_hash):
                return codec_v3.BAD_RESPONSE, codec_v3.ZERO_CURSOR, [], None
            at = await self._blocking(self.reader.locate, p.cursor_hash)
            if at is None:
                return codec_v3.BAD_RESPONSE, codec_v3.CURSOR_NOT_FOUND, [], None
            query = query.with_cursor(Index(at.received_time, at.digest, p.cursor_hash))
        if p.hashes:
            found = await self._blocking(lambda: [m for m in map(self.reader.locate, p.hashes) if m is not None])
            page, cursor = lookup_page(found, query, self.settings.limits)
            return codec_v3.OK, "", page.messages, cursor
        while True:
            page = await self._query(query)
            if page.partial and not page.messages and page.cursor is not None:
                query = query.with_cursor(page.cursor)
                continue
            return codec_v3.OK, "", page.messages, page_cursor_v3(page)

    async def _refusal(self, peer: str) -> str | None:
        """Why a valid query of `peer` is not served now (one of REJECT_REASONS), or None; the
        same for beta2 and v3, each of which answers a refusal in its own form and counts it in
        waku_store_rejected_total."""
        most = self.settings.max_concurrent_queries_per_peer
        if most and self._in_flight.get(peer, 0) > most:
            return "busy"
        if not self._per_peer.allow(peer):
            return "rate_limited"
        if not await self._caught_up():
            return "catching_up"
        return None

    async def _caught_up(self) -> bool:
        """True once the fresh tail holds what a query must see (or without a tail): after a
        start, what Kafka held then; after an idle spell, what it held when this query woke the
        tail (TailFollower.demand). Waits up to tail.ready_wait_s. A restarted service whose tail
        has not caught up by then refuses: answering from Delta alone would take back messages it
        answered before (a walk that shrinks). Once caught up after its start, the tail is
        answered as it is (it held everything up to ~idle_fetch_s before the query)."""
        if self.follower is None:
            return True
        wanted = self.follower.demand()
        if wanted.is_set():
            return True
        tail = self.settings.tail
        deadline = trio.current_time() + (tail.ready_wait_s if tail is not None else 0.0)
        while not wanted.is_set() and trio.current_time() < deadline:
            await trio.sleep(0.002 if self.follower.ready.is_set() else 0.02)
        if not wanted.is_set() and self._late_logged is not wanted:
            self._late_logged = wanted  # one line per wake, not one per query
            log.warning("store tail: not caught up with Kafka after %g s; queries answered from what "
                        "it holds (%s)", tail.ready_wait_s if tail is not None else 0.0,
                        "ready" if self.follower.ready.is_set() else "still starting: refused")
        return wanted.is_set() or self.follower.ready.is_set()

    async def _blocking(self, fn: Callable[..., _T], *args: object) -> _T:
        if self.settings.max_concurrent_queries == 0:
            return fn(*args)
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    async def _query(self, query: StoreQuery) -> Page:
        """Pages whose data is in the reader's cache are answered inline (no thread hand-off:
        a fraction of a millisecond); the others in a worker thread, so that reading storage
        never stalls the node's event loop. max_concurrent_queries 0: everything inline."""
        if self.settings.max_concurrent_queries == 0:
            return self.reader.query(query)
        try:
            return self.reader.query(query, cached_only=True)
        except NotCached:
            return await trio.to_thread.run_sync(self.reader.query, query, limiter=self._limiter)
