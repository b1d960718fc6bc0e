"""The REST API's HTTP server: hypercorn's trio worker serving the starlette app inside the
bridge's trio nursery (docs/decisions.md: why hypercorn). The listening socket is made before
serving, so a busy port is one `ListenError` line."""
from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Any

import h11
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from ingest.filter.client import FilterClient
from ingest.host import ListenError
from ingest.metadata.service import MetadataService
from ingest.rest.app import RestNode, build_app
from ingest.rest.cache import MessageCache
from ingest.rest.codec import reason_phrase
from ingest.rest.settings import RestSettings
from ingest.settings import node_shards

log = logging.getLogger("ingest.rest")


_send_h11_event = H11Protocol._send_h11_event


async def _send_with_reason(self: H11Protocol, event: Any) -> None:
    """hypercorn builds its h11 responses without a reason phrase (`HTTP/1.1 400 `); every status
    line it writes (the app's answers and its own 400, 431, 500, ...) gets the standard one."""
    if isinstance(event, (h11.Response, h11.InformationalResponse)) and not event.reason:
        event = type(event)(status_code=event.status_code, headers=event.headers,
                            http_version=event.http_version, reason=reason_phrase(event.status_code))
    await _send_h11_event(self, event)


H11Protocol._send_h11_event = _send_with_reason  # type: ignore[method-assign]


def hypercorn_config(settings: RestSettings) -> HypercornConfig:
    config = HypercornConfig()
    host = f"[{settings.address}]" if ":" in settings.address else settings.address
    config.bind = [f"{host}:{settings.port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("ingest.rest.server")
    config.graceful_timeout = 1.0
    return config


async def serve_rest(node: RestNode, settings: RestSettings, cache: MessageCache,
                     *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve until cancelled; reports the base URL (http://host:port) once listening."""
    config = hypercorn_config(settings)
    try:
        sockets = config.create_sockets()
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
    except OSError as exc:
        raise ListenError(f"cannot serve the REST API on {settings.address}:{settings.port}: "
                          f"{exc.strerror}") from None
    host, port = sockets.insecure_sockets[0].getsockname()[:2]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    async with AsyncExitStack() as stack:
        filter_client, filter_cache = None, None
        if settings.filter_peer:  # the /filter/v2 routes: a filter client on its own host
            filter_client = FilterClient(listen_host=settings.address if ":" not in settings.address else "127.0.0.1")
            answer_metadata(filter_client, node)
            filter_cache = MessageCache(settings.relay_cache_capacity)
            await stack.enter_async_context(filter_client.running())
        asgi: Any = build_app(node, settings, cache, filter_client, filter_cache)  # starlette's ASGI, hypercorn's types
        app = wrap_app(asgi, config.wsgi_max_body_size, "asgi")

        async def ready(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await worker_serve(app, config, sockets=sockets, task_status=task_status)

        async with trio.open_nursery() as nursery:
            await nursery.start(ready)
            if filter_client is not None and filter_cache is not None:
                nursery.start_soon(_cache_pushes, filter_client, filter_cache)
            log.info("rest: serving the Waku REST API on %s", url)
            task_status.started(url)


async def _cache_pushes(client: FilterClient, cache: MessageCache) -> None:
    """The filter client's pushes into the cache of GET /filter/v2/messages."""
    async for push in client.pushes():
        cache.add(push.pubsub_topic, push.message)


def answer_metadata(client: FilterClient, node: RestNode) -> MetadataService:
    """The filter client's host answers /vac/waku/metadata/1.0.0 with the node's cluster and
    shards, as the main host does: go-waku (and nwaku) with a cluster id ask every new
    connection and disconnect a peer that does not answer (go-waku then fails the subscribe with
    a SwarmException)."""
    service = MetadataService(client.host, node_shards(node.settings), check_peers=False)
    service.mount()
    return service

