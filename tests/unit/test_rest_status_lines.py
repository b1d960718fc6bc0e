"""The REST server's status lines carry the standard reason phrase, as nwaku's (`HTTP/1.1 400 Bad
Request`, not hypercorn's bare `HTTP/1.1 400 `): the app's answers and hypercorn's own refusals
(431 for oversized headers, 400 for a request that is not HTTP), over a real socket."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio

from ingest.rest.cache import MessageCache
from ingest.rest.codec import http_status, reason_phrase
from ingest.rest.server import serve_rest
from ingest.rest.settings import RestSettings


def node() -> Any:
    return SimpleNamespace(settings=SimpleNamespace(cluster_id=1, num_shards_in_cluster=8, limits=None, store_node="",
                                                    relay=True, lightpush_node=""),
                           pubsub=None, filter=None, store=None, lightpush=None, host=None, router=None,
                           addrs=[], health_problems=lambda: [], lightpush_client=None, rln=None)


async def status_line(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        with trio.move_on_after(5):
            while b"\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                data += chunk
    return data.split(b"\r\n", 1)[0]


def test_status_lines_have_reason_phrases():
    async def main() -> dict[str, bytes]:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_rest, node(), RestSettings(enabled=True, port=0), MessageCache(5))
            port = int(url.rsplit(":", 1)[1])
            out = {
                "ok": await status_line(port, b"GET /version HTTP/1.1\r\nhost: t\r\n\r\n"),
                "app 400": await status_line(port, b"GET /no/such HTTP/1.1\r\nhost: t\r\n\r\n"),
                "app 412": await status_line(port, b"GET /store/v3/messages HTTP/1.1\r\nhost: t\r\n\r\n"),
                "431": await status_line(port, b"GET / HTTP/1.1\r\nhost: t\r\nx: " + b"a" * 100_000 + b"\r\n\r\n"),
                "h11 400": await status_line(port, b"NOT HTTP AT ALL\r\n\r\n"),
            }
            nursery.cancel_scope.cancel()
        return out

    lines = trio.run(main)
    assert lines == {"ok": b"HTTP/1.1 200 OK", "app 400": b"HTTP/1.1 400 Bad Request",
                     "app 412": b"HTTP/1.1 412 Precondition Failed",
                     "431": b"HTTP/1.1 431 Request Header Fields Too Large", "h11 400": b"HTTP/1.1 400 Bad Request"}


def test_reason_phrases_of_every_status_we_answer():
    # chronos's phrases (nwaku's HTTP server), the same as Python's for these codes
    assert {s: reason_phrase(s) for s in (400, 404, 412, 413, 421, 429, 431, 500, 503, 504)} == {
        400: b"Bad Request", 404: b"Not Found", 412: b"Precondition Failed", 413: b"Request Entity Too Large",
        421: b"Misdirected Request", 429: b"Too Many Requests", 431: b"Request Header Fields Too Large",
        500: b"Internal Server Error", 503: b"Service Unavailable", 504: b"Gateway Timeout"}
    assert reason_phrase(420) == b""
    assert (http_status(420), http_status(421), http_status(413), http_status(505)) == (500, 421, 413, 505)
