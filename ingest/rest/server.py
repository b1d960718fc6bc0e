"""The REST API's HTTP server: hypercorn's trio worker serving the starlette app inside the
bridge's trio nursery (docs/decisions.md: why hypercorn). The listening socket is made before
serving, so a busy port is one `ListenError` line."""
from __future__ import annotations

import logging
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app

from ingest.host import ListenError
from ingest.rest.app import RestNode, build_app
from ingest.rest.cache import MessageCache
from ingest.rest.settings import RestSettings

log = logging.getLogger("ingest.rest")


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
    asgi: Any = build_app(node, settings, cache)  # starlette's ASGI signature, hypercorn's own types
    app = wrap_app(asgi, config.wsgi_max_body_size, "asgi")

    async def ready(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await worker_serve(app, config, sockets=sockets, task_status=task_status)

    async with trio.open_nursery() as nursery:
        await nursery.start(ready)
        log.info("rest: serving the Waku REST API on %s", url)
        task_status.started(url)
