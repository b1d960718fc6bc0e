"""The REST API as an ASGI app (starlette): nwaku's routes over the bridge's own services. Each
handler parses with `codec` (pure), calls a service the bridge already runs (the store server's
v3 answer, relay, the lightpush decision and service, the filter view, the host) and encodes
with `codec`. Bad input is answered 4xx with a text, as nwaku answers it; nothing a client sends
stops the bridge (an unexpected error is logged and answered 500).

    app = build_app(bridge, RestSettings(...), cache)
"""
from __future__ import annotations

import fnmatch
import importlib.metadata
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

import multiaddr
import trio
from libp2p.abc import IHost
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from core.message import check_message
from core.topics import autoshard, check_pubsub_topic, shard_topic
from ingest.filter.client import FilterClient, Req
from ingest.filter.service import FilterService
from ingest.host import dial
from ingest.lightpush import codec as lp_codec
from ingest.lightpush.protocol import decide
from ingest.lightpush.service import LightpushService
from ingest.relay.gossipsub import RelayPubsub, WakuRelayRouter
from ingest.rest import codec, remote
from ingest.rest.cache import MessageCache
from ingest.rest.settings import RestSettings
from ingest.rln.errors import RlnRefused
from ingest.settings import BridgeSettings, parse_peer
from ingest.store.client import StoreClient
from ingest.store.codec_v3 import BAD_RESPONSE
from ingest.store.server import StoreServer
from schemas import store_v3_pb2 as pb3
from schemas.waku_message_pb2 import WakuMessage

log = logging.getLogger("ingest.rest")

OPENAPI_FILE = Path(__file__).with_name("openapi.yaml")
BAD_ROUTE = "Bad request initiated. Invalid path or method used."
ADMIN_OFF = "/admin endpoints are not available. Please check your configuration: --rest-admin=true"
NO_STORE_PEER = "No suitable service peer & no discovery method"
LOG_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "NOTICE": logging.INFO,
              "WARN": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL}


class RestNode(Protocol):
    """What the REST API uses of the bridge (ingest/node.Bridge)."""
    settings: BridgeSettings
    addrs: list[multiaddr.Multiaddr]
    host: IHost | None
    pubsub: RelayPubsub | None
    router: WakuRelayRouter | None
    store: StoreServer | None
    lightpush: LightpushService | None
    filter: FilterService | None

    def health_problems(self) -> list[str]: ...

    async def publish(self, pubsub_topic: str, message: WakuMessage, data: bytes) -> int | None: ...


def version_text() -> str:
    try:
        return "v" + importlib.metadata.version("waku-pipeline")
    except importlib.metadata.PackageNotFoundError:
        return "v0.1.0"


def ok() -> Response:
    return PlainTextResponse("OK")


def text(status: int, body: str = "") -> Response:
    return PlainTextResponse(body, status_code=status)


def drained(messages: list[WakuMessage] | None, encode: Callable[[WakuMessage], dict[str, Any]],
            not_subscribed: Response) -> Response:
    """A cache read (relay, autosharded relay, filter pushes): the messages as JSON, or the
    route's answer for a topic not subscribed."""
    if messages is None:
        return not_subscribed
    return JSONResponse([encode(m) for m in messages])


def origin_regex(origins: tuple[str, ...]) -> str | None:
    """nwaku's --rest-allow-origin items ("localhost:*", "127.0.0.1:8080", "*"): with or without
    a scheme, "*" and "?" wildcards."""
    if not origins:
        return None
    parts = []
    for o in origins:
        pattern = fnmatch.translate(o).removesuffix(r"\Z").removeprefix("(?s:").removesuffix(")")
        parts.append(pattern if "://" in o else rf"(?:[a-z][a-z0-9+.-]*://)?{pattern}")
    return "^(?:" + "|".join(parts) + ")$"


class Api:
    """The route handlers over one bridge."""

    def __init__(self, node: RestNode, settings: RestSettings, cache: MessageCache,
                 filter_client: FilterClient | None = None, filter_cache: MessageCache | None = None) -> None:
        self.node = node
        self.settings = settings
        self.cache = cache
        self.filter_client = filter_client
        self.filter_cache = filter_cache if filter_cache is not None else MessageCache(settings.relay_cache_capacity)
        self.version = version_text()
        self._store_client: StoreClient | None = None

    # -- helpers -----------------------------------------------------------------------------

    async def body(self, request: Request) -> Any:
        """The request's JSON body, at most settings.max_body_bytes (413 above). A body up to
        twice that is read to its end before the 413 (a client that writes its whole body before
        reading, as most do, gets the answer instead of a closed connection); a larger one is
        answered at once."""
        cap = self.settings.max_body_bytes
        too_big = codec.BadRequest(f"Request body exceeds {cap} bytes", 413)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > 2 * cap:
            raise too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > 2 * cap:
                raise too_big
            if size <= cap:
                chunks.append(chunk)
        if size > cap:
            raise too_big
        return codec.decode_body(request.headers.get("content-type"), b"".join(chunks))

    def relayed(self) -> set[str]:
        pubsub = self.node.pubsub
        return set(pubsub.topic_ids) if pubsub is not None else set()

    def autoshard_topic(self, content_topic: str) -> str | None:
        s = self.node.settings
        if not s.cluster_id:
            return None
        shard = autoshard(content_topic, s.num_shards_in_cluster)
        return shard_topic(s.cluster_id, shard) if shard is not None else None

    # -- health, info, version ---------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        node = self.node
        router = node.router
        peers = len(node.pubsub.peers) if node.pubsub is not None else 0
        relay = node.pubsub is not None and getattr(node.settings, "relay", True)  # bridge.relay
        mounted = {"Relay": relay, "Store": node.store is not None,
                   "Lightpush": node.lightpush is not None, "Legacy Lightpush": node.lightpush is not None,
                   "Filter": node.filter is not None}
        d_low = int(getattr(router, "degree_low", 4)) if router is not None else 4
        # The filter service serves once Kafka acknowledged its restart record.
        starting = ["Filter"] if node.filter is not None and not node.filter.ready.is_set() else []
        return JSONResponse(codec.health_report(peers, d_low, mounted, node.health_problems(), starting))

    async def info(self, request: Request) -> Response:
        enr = getattr(self.node, "enr", None)  # the bridge's ENR (None with an Ed25519 identity)
        return JSONResponse(codec.info_json((str(a) for a in self.node.addrs), enr.text() if enr else None))

    async def version_route(self, request: Request) -> Response:
        return text(200, self.version)

    async def openapi(self, request: Request) -> Response:
        return Response(OPENAPI_FILE.read_bytes(), media_type="application/yaml")

    # -- store v3 ----------------------------------------------------------------------------

    async def store_messages(self, request: Request) -> Response:
        params = dict(request.query_params)
        req = codec.store_request(params)
        peer_addr = params.get("peerAddr", "")
        if not peer_addr and self.node.store is None:
            peer_addr = self.node.settings.store_node  # nwaku's --storenode; "" none
        if not peer_addr:
            store = self.node.store
            if store is None:
                return text(412, NO_STORE_PEER)
            resp = pb3.StoreQueryResponse.FromString(await store.query_v3(req, "rest"))
            if resp.status_code == BAD_RESPONSE:  # nwaku: its archive failed the query (an unknown cursor)
                return text(500, f"error in handleSelfStoreRequest: {resp.status_desc}")
            return JSONResponse(codec.store_response_json(resp))
        bad_addr = codec.multiaddr_error(peer_addr)  # nwaku's MultiAddress.init refuses it first
        if bad_addr is not None:
            return text(400, f"Failed parsing remote peer info: MultiAddress.init [{bad_addr}]")
        try:
            info = parse_peer(peer_addr)
        except ValueError as exc:
            return text(400, f"Failed parsing remote peer info: {exc}")
        host = self.node.host
        if host is None:
            return text(503, "the node is starting")
        if self._store_client is None:
            self._store_client = StoreClient(host, timeout=self.settings.request_timeout_s)
        with trio.move_on_after(self.settings.request_timeout_s) as scope:
            try:
                await dial(host, info, self.settings.request_timeout_s)
                remote = await self._store_client.query_v3(info.peer_id, req.SerializeToString())
            except Exception as exc:  # noqa: BLE001 - a dial or stream failure, a bad answer: the peer's
                log.debug("rest: store query to %s failed: %s: %s", peer_addr, type(exc).__name__, exc)
                return text(500, f"Error occurred in queryFut.read() [PEER_DIAL_FAILURE: {peer_addr}]")
        if scope.cancelled_caught:
            return text(500, "No history response received (timeout)")
        if remote.status_code == 429:
            return text(429, "Request rate limit reached")
        return JSONResponse(codec.store_response_json(remote))

    # -- relay -------------------------------------------------------------------------------

    def _check_topics(self, topics: list[str]) -> None:
        bad = [t for t in topics if check_pubsub_topic(t)]
        if bad:
            raise codec.BadRequest("Invalid pubsub topic(s): @[" + ", ".join(f'"{t}"' for t in bad) + "]")

    async def relay_subscribe(self, request: Request) -> Response:
        topics = codec.topic_list(await self.body(request))
        self._check_topics(topics)
        pubsub = self.node.pubsub
        for topic in topics:
            self.cache.pubsub_topics.add(topic)
            if pubsub is not None and topic not in pubsub.topic_ids:
                await pubsub.join(topic)
                log.info("rest: relay joined %s", topic)
        return ok()

    async def relay_unsubscribe(self, request: Request) -> Response:
        topics = codec.topic_list(await self.body(request))
        self._check_topics(topics)
        pubsub = self.node.pubsub
        for topic in topics:  # as nwaku: the cache drops it and relay leaves it
            self.cache.unsubscribe(pubsub_topic=topic)
            if pubsub is not None and topic in pubsub.topic_ids:
                await pubsub.leave(topic)
                log.info("rest: relay left %s", topic)
        return ok()

    async def relay_get(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        return drained(self.cache.take(pubsub_topic=topic), codec.relay_message_json, text(404))

    async def _publish(self, topic: str, body: Any, prefix: str) -> Response:
        msg = codec.to_waku_message(codec.relay_message(body))
        data = msg.SerializeToString()
        checked, reason = check_message(data, self.node.settings.limits)
        if reason is not None:
            return text(400, f"{prefix}: {reason.replace('_', ' ')}")
        with trio.move_on_after(self.settings.request_timeout_s + self.node.settings.lightpush_timeout_s):
            try:
                peers = await self.node.publish(topic, checked or msg, data)
            except RlnRefused as exc:
                return text(exc.status, f"{prefix}: {exc}")
            if peers is None:
                return text(503, f"{prefix}: the message could not be stored (Kafka did not acknowledge it)")
            self.cache.add(topic, checked or msg)
            return ok()
        return text(500, f"{prefix}: timedout")

    async def relay_post(self, request: Request) -> Response:
        topic = request.path_params["topic"]
        if topic not in self.relayed():
            return text(400, f"Failed to publish: Node not subscribed to topic: {topic}")
        return await self._publish(topic, await self.body(request), "Failed to publish")

    async def auto_subscribe(self, request: Request) -> Response:
        topics = codec.topic_list(await self.body(request))
        pubsub = self.node.pubsub
        for ct in topics:
            shard = self.autoshard_topic(ct)
            if shard is None:
                return text(400, "Subscribe failed: Autosharding is disabled" if not self.node.settings.cluster_id
                            else f"Subscribe failed: Autosharding error: invalid content topic {ct}")
            self.cache.content_topics.add(ct)
            if pubsub is not None and shard not in pubsub.topic_ids:
                await pubsub.join(shard)
        return ok()

    async def auto_unsubscribe(self, request: Request) -> Response:
        for ct in codec.topic_list(await self.body(request)):
            self.cache.unsubscribe(content_topic=ct)
        return ok()

    async def auto_get(self, request: Request) -> Response:
        ct = request.path_params["topic"]
        return drained(self.cache.take(content_topic=ct), codec.relay_message_json, text(404, ct))

    async def auto_post(self, request: Request) -> Response:
        body = await self.body(request)
        m = codec.relay_message(body)
        if not self.node.settings.cluster_id:
            return text(400, "Failed to publish. Autosharding is disabled")
        topic = self.autoshard_topic(m.content_topic)
        if topic is None:
            return text(400, f"Failed to publish. Autosharding error: invalid content topic {m.content_topic}")
        # nwaku publishes on the content topic's shard whether or not it joined it (to its fanout peers).
        return await self._publish(topic, body, "Failed to publish")

    # -- lightpush ---------------------------------------------------------------------------

    async def _push(self, request: Request) -> tuple[int, str, int | None]:
        """(lightpush status, detail, relay peers) of a push request, decided and served as the
        libp2p lightpush service does."""
        service = self.node.lightpush
        assert service is not None
        req = codec.push_request(await self.body(request))
        msg = codec.to_waku_message(req.message)
        return await service.push(decide("rest", req.pubsub_topic, msg, service.ctx))

    async def lightpush_v3(self, request: Request) -> Response:
        client = getattr(self.node, "lightpush_client", None)  # bridge.lightpush_node
        if client is not None:
            return await remote.push_remote(self, client, request, "v3")
        if self.node.lightpush is None:
            return text(404, "/lightpush endpoints are not available.")
        try:
            code, detail, peers = await self._push(request)
        except codec.BadRequest as exc:
            if exc.status == 413:
                raise
            return JSONResponse({"statusDesc": f"Invalid push request! {exc}"}, status_code=400)
        if code == lp_codec.SUCCESS:
            return JSONResponse({"relayPeerCount": peers or 0})
        return JSONResponse({"statusDesc": lp_codec.status_desc(code, detail)}, status_code=codec.http_status(code))

    async def lightpush_v1(self, request: Request) -> Response:
        client = getattr(self.node, "lightpush_client", None)  # bridge.lightpush_node
        if client is not None:
            return await remote.push_remote(self, client, request, "v1")
        if self.node.lightpush is None:
            return text(404, "/lightpush endpoints are not available.")
        code, detail, _ = await self._push(request)
        if code == lp_codec.SUCCESS:
            return ok()
        if code == lp_codec.TOO_MANY_REQUESTS:
            return text(429, "Request rate limmit reached")
        # nwaku answers every refusal 503, with its legacy protocol's text.
        return text(503, f"Failed to request a message push: {lp_codec.legacy_info(code, detail)}")

    # -- admin -------------------------------------------------------------------------------

    def _peers(self, connected_only: bool) -> list[dict[str, Any]]:
        host = self.node.host
        if host is None:
            return []
        store = host.get_peerstore()
        conns = host.get_network().connections
        topics = sorted(self.relayed())
        shards = sorted({int(t.rsplit("/", 1)[1]) for t in topics if t.startswith("/waku/2/rs/")})
        out = []
        for pid in store.peer_ids():
            if pid == host.get_id():
                continue
            connected = bool(conns.get(pid))
            if connected_only and not connected:
                continue
            addrs = store.addrs(pid) if hasattr(store, "addrs") else []
            try:
                protocols = list(store.get_protocols(pid))
            except Exception:  # noqa: BLE001 - a peer the peerstore knows no protocols of
                protocols = []
            out.append({"multiaddr": f"{addrs[0]}/p2p/{pid}" if addrs else f"/p2p/{pid}",
                        "protocols": protocols, "shards": shards if connected else [],
                        "connected": "Connected" if connected else "CanConnect",
                        "agent": "", "origin": "Unknown"})
        return out

    async def admin_peers(self, request: Request) -> Response:
        return JSONResponse(self._peers(False))

    async def admin_connected(self, request: Request) -> Response:
        return JSONResponse(self._peers(True))

    async def admin_connect(self, request: Request) -> Response:
        try:
            body = await self.body(request)
            peers = codec.topic_list(body)
        except codec.BadRequest as exc:
            if exc.status == 413:
                raise
            return text(400, f"Failed to decode request: {exc}")
        host = self.node.host
        for i, peer in enumerate(peers):
            try:
                info = parse_peer(peer)
            except ValueError as exc:
                return text(400, f"Couldn't parse remote peer info: {exc}")
            try:
                assert host is not None
                await dial(host, info, self.settings.request_timeout_s)
            except Exception as exc:  # noqa: BLE001 - any dial failure is the answer
                log.debug("rest: connecting %s failed: %s: %s", peer, type(exc).__name__, exc)
                return text(400, f"Failed to connect to peer at index: {i} - {peer}")
        return ok()

    async def admin_filter(self, request: Request) -> Response:
        service = self.node.filter
        if service is None:
            return text(400, "Error: Filter Protocol is not mounted to the node")
        subs = [{"peerId": peer, "filterCriteria": [{"pubsubTopic": t, "contentTopic": ct}
                                                    for (t, ct) in state.criteria]}
                for peer, state in service.view.peers.items()]
        return JSONResponse(subs)

    async def admin_log_level(self, request: Request) -> Response:
        level = request.path_params["level"].strip()
        if not level:
            return text(400, "Invalid log-level, it can’t be empty")
        value = LOG_LEVELS.get(level.upper())
        if value is None:
            return text(400, f"Invalid log-level: {level}. Please specify one of TRACE, DEBUG, INFO, NOTICE, "
                             "WARN, ERROR or FATAL")
        logging.getLogger().setLevel(value)
        return ok()

    async def admin_off(self, request: Request) -> Response:
        return text(404, ADMIN_OFF)

    async def filter_off(self, request: Request) -> Response:
        return text(404, "/filter endpoints are not available.")

    # -- filter: a client of settings.filter_peer ---------------------------------------------

    def _filter_answer(self, rid: str, status: int, desc: str) -> Response:
        return JSONResponse({"requestId": rid, "statusDesc": desc}, status_code=status)

    async def _filter_call(self, rid: str, kind: int, topic: str | None = None,
                           cts: tuple[str, ...] = ()) -> tuple[int, str] | None:
        """(HTTP status, statusDesc) of one request to the filter service node, as nwaku maps
        its filter client's results: the service's code (200 "OK"), a dial failure 504 with the
        address, a stream failure 500; None when there was no answer in time."""
        client = self.filter_client
        assert client is not None
        peer = self.settings.filter_peer
        with trio.move_on_after(self.settings.request_timeout_s):
            try:
                if client.service is None or not client.host.get_network().connections.get(client.service):
                    await client.connect(peer, timeout=self.settings.request_timeout_s)
            except Exception as exc:  # noqa: BLE001 - any dial failure is the answer
                log.debug("rest: filter peer %s: %s: %s", peer, type(exc).__name__, exc)
                return 504, peer
            try:
                resp = await client.request(kind, topic, cts, rid or uuid.uuid4().hex,  # type: ignore[arg-type]
                                            timeout=self.settings.request_timeout_s)
            except Exception as exc:  # noqa: BLE001 - a stream failure or a bad answer: the peer's
                log.debug("rest: filter request to %s failed: %s: %s", peer, type(exc).__name__, exc)
                return 500, f"BAD_RESPONSE: {type(exc).__name__}"
            if resp is None:
                return 500, "BAD_RESPONSE: no answer"
            return (200, "OK") if resp.status_code == 200 else (resp.status_code, resp.status_desc)
        return None

    async def _filter_request(self, request: Request, topics: bool = True) -> codec.FilterRequest | Response:
        """The request body, or nwaku's answer to one it cannot decode (requestId "unknown")."""
        try:
            return codec.filter_request(await self.body(request), topics=topics)
        except codec.BadRequest as exc:
            if exc.status == 413:
                raise
            desc = str(exc)
            if not desc.startswith("Failed to decode request"):
                desc = f"Failed to decode request: {desc}"
            return self._filter_answer("unknown", 400, desc)

    def _filter_groups(self, req: codec.FilterRequest) -> dict[str, list[str]] | None:
        """The content topics by pubsub topic: the request's, else each one's autosharded shard
        (None when one has none)."""
        if req.pubsub_topic is not None:
            return {req.pubsub_topic: list(req.content_topics)}
        groups: dict[str, list[str]] = {}
        for ct in req.content_topics:
            shard = self.autoshard_topic(ct)
            if shard is None:
                return None
            groups.setdefault(shard, []).append(ct)
        return groups

    async def _filter_change(self, req: codec.FilterRequest, kind: int, timeout_text: str) -> Response:
        """Subscribe or unsubscribe the request's content topics, one request per pubsub topic.
        As nwaku, the push cache follows once the service answered, whatever it answered (not
        after a timeout)."""
        groups = self._filter_groups(req)
        if not groups:
            return self._filter_answer(req.request_id, 400, "BAD_REQUEST: no pubsub topic, and none can "
                                       "be derived from the content topics")
        status, desc = 200, "OK"
        for topic, cts in groups.items():
            answer = await self._filter_call(req.request_id, kind, topic, tuple(cts))
            if answer is None:
                return self._filter_answer(req.request_id, 503, timeout_text)
            for ct in cts:
                if kind == Req.SUBSCRIBE:
                    self.filter_cache.content_topics.add(ct)
                else:
                    self.filter_cache.unsubscribe(content_topic=ct)
            status, desc = answer
            if status != 200:
                break
        return self._filter_answer(req.request_id, status, desc)

    async def filter_subscribe(self, request: Request) -> Response:
        req = await self._filter_request(request)
        if isinstance(req, Response):
            return req
        return await self._filter_change(req, Req.SUBSCRIBE, "Subscription request timed out")

    async def filter_unsubscribe(self, request: Request) -> Response:
        req = await self._filter_request(request)
        if isinstance(req, Response):
            return req
        return await self._filter_change(req, Req.UNSUBSCRIBE,
                                         "Failed to unsubscribe from contentFilters due to timeout!")

    async def filter_unsubscribe_all(self, request: Request) -> Response:
        req = await self._filter_request(request, topics=False)
        if isinstance(req, Response):
            return req
        answer = await self._filter_call(req.request_id, Req.UNSUBSCRIBE_ALL)
        if answer is None:
            return self._filter_answer(req.request_id, 503,
                                       "Failed to unsubscribe from all contentFilters due to timeout!")
        self.filter_cache.reset()  # nwaku: whatever the service answered
        return self._filter_answer(req.request_id, *answer)

    async def filter_ping(self, request: Request) -> Response:
        # nwaku's route pattern takes an empty last segment too (`/filter/v2/subscriptions/`):
        # the ping is made and the empty requestId echoed.
        rid = request.path_params.get("request_id", "")
        answer = await self._filter_call(rid, Req.SUBSCRIBER_PING)
        return self._filter_answer(rid, *(answer or (503, "Ping timed out")))

    async def filter_messages(self, request: Request) -> Response:
        """`/filter/v2/messages/{contentTopic}` (nwaku) and go-waku's
        `/{pubsubTopic}/{contentTopic}`: two path segments, each percent-encoded."""
        raw = request.scope.get("raw_path") or request.url.path.encode()
        parts = raw.decode("latin-1").split("?", 1)[0].split("/filter/v2/messages/", 1)[-1].split("/")
        if len(parts) == 2 and all(parts):
            pubsub_topic, ct = (unquote(p) for p in parts)
            messages = self.filter_cache.take(content_topic=ct, on_pubsub_topic=pubsub_topic)
        else:
            ct = request.path_params["topic"]
            messages = self.filter_cache.take(content_topic=ct)
        return drained(messages, codec.filter_message_json, text(400, f"Not subscribed to topic: {ct}"))


def _guard(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def guarded(request: Request) -> Response:
        began = time.perf_counter()
        try:
            return await handler(request)
        except codec.BadRequest as exc:
            return text(exc.status, str(exc))
        except Exception as exc:
            log.exception("rest: %s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
            return text(500, "Internal server error")
        finally:
            log.debug("rest: %s %s in %.1f ms", request.method, request.url.path, (time.perf_counter() - began) * 1000)
    return guarded


async def _not_found(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException) and exc.status_code in (404, 405):
        return text(400, BAD_ROUTE)
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return text(status, exc.detail if isinstance(exc, HTTPException) else "Internal server error")


class _AnyPath(Convertor[str]):
    """Starlette's `path` that also takes control characters: a topic may hold a tab or a
    newline (percent-encoded in the URL, as the suite's `\t\nSpecial\tCharacters\n`), which
    `path`'s `.*` stops at; nwaku's router takes any decoded segment."""
    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anypath", _AnyPath())


async def _server_error(request: Request, exc: Exception) -> Response:
    log.error("rest: %s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return text(500, "Internal server error")


def build_app(node: RestNode, settings: RestSettings, cache: MessageCache,
              filter_client: FilterClient | None = None, filter_cache: MessageCache | None = None) -> Starlette:
    api = Api(node, settings, cache, filter_client, filter_cache)

    def r(path: str, fn: Callable[[Request], Awaitable[Response]], *methods: str) -> Route:
        return Route(path, _guard(fn), methods=list(methods))

    routes = [
        r("/health", api.health, "GET"),
        r("/debug/v1/info", api.info, "GET"), r("/info", api.info, "GET"),
        r("/debug/v1/version", api.version_route, "GET"), r("/version", api.version_route, "GET"),
        r("/openapi.yaml", api.openapi, "GET"),
        r("/store/v3/messages", api.store_messages, "GET"),
        r("/lightpush/v3/message", api.lightpush_v3, "POST"),
        r("/lightpush/v1/message", api.lightpush_v1, "POST"),
    ]
    relay_routes = [
        r("/relay/v1/subscriptions", api.relay_subscribe, "POST"),
        r("/relay/v1/subscriptions", api.relay_unsubscribe, "DELETE"),
        r("/relay/v1/messages/{topic:anypath}", api.relay_get, "GET"),
        r("/relay/v1/messages/{topic:anypath}", api.relay_post, "POST"),
        r("/relay/v1/auto/subscriptions", api.auto_subscribe, "POST"),
        r("/relay/v1/auto/subscriptions", api.auto_unsubscribe, "DELETE"),
        r("/relay/v1/auto/messages", api.auto_post, "POST"),
        r("/relay/v1/auto/messages/{topic:anypath}", api.auto_get, "GET"),
    ]
    if getattr(node.settings, "relay", True):
        routes += relay_routes
    else:  # nwaku without relay (--relay=false)
        routes.append(r("/relay/{rest:anypath}", remote.relay_off, "GET", "POST", "DELETE", "PUT"))
    if settings.admin:
        routes += [
            r("/admin/v1/peers", api.admin_peers, "GET"),
            r("/admin/v1/peers", api.admin_connect, "POST"),
            r("/admin/v1/peers/connected", api.admin_connected, "GET"),
            r("/admin/v1/filter/subscriptions", api.admin_filter, "GET"),
            r("/admin/v1/log-level/{level}", api.admin_log_level, "POST"),
        ]
    else:
        routes.append(r("/admin/{rest:anypath}", api.admin_off, "GET", "POST", "DELETE", "PUT"))
    if filter_client is not None:
        routes += [
            r("/filter/v2/subscriptions", api.filter_subscribe, "POST", "PUT"),
            r("/filter/v2/subscriptions", api.filter_unsubscribe, "DELETE"),
            r("/filter/v2/subscriptions/all", api.filter_unsubscribe_all, "DELETE"),
            r("/filter/v2/subscriptions/{request_id}", api.filter_ping, "GET"),
            r("/filter/v2/subscriptions/", api.filter_ping, "GET"),
            r("/filter/v2/messages/{topic:anypath}", api.filter_messages, "GET"),
        ]
    else:  # nwaku's answer without a filter client
        routes.append(r("/filter/{rest:anypath}", api.filter_off, "GET", "POST", "PUT", "DELETE"))
    middleware = []
    regex = origin_regex(settings.allow_origins)
    if regex is not None:
        middleware.append(Middleware(CORSMiddleware, allow_origin_regex=regex, allow_methods=["*"],
                                     allow_headers=["*"]))
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={HTTPException: _not_found, Exception: _server_error})
