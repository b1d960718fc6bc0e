"""The /filter/v2 routes (ingest/rest/app.py) over a fake filter client: nwaku's answers and its
push-cache rules (the cache follows whatever the service answered, not a timeout; unsubscribe-all
resets it), the timeout texts of each route, and go-waku's `/{pubsubTopic}/{contentTopic}` read."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import trio

from core.topics import autoshard
from ingest.filter.client import Req
from ingest.rest.app import build_app
from ingest.rest.cache import MessageCache
from ingest.rest.settings import RestSettings
from schemas.waku_message_pb2 import WakuMessage

SERVICE = "/ip4/127.0.0.1/tcp/1/p2p/16Uiu2HAmFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake"
CT = "/app/1/chat/proto"
SHARD = f"/waku/2/rs/1/{autoshard(CT, 8)}"


@dataclass
class FakeFilterClient:
    """Answers every request with `status` (None: never answers) and records them."""
    status: int | None = 200
    desc: str = "OK"
    requests: list[tuple[int, str | None, tuple[str, ...], str]] = field(default_factory=list)
    service: str | None = "peer"
    host: Any = None

    def __post_init__(self) -> None:
        self.host = SimpleNamespace(get_network=lambda: SimpleNamespace(connections={"peer": [1]}))

    async def connect(self, peer: str, timeout: float = 10.0) -> None:
        pass

    async def request(self, kind: int, topic: str | None, cts: tuple[str, ...], rid: str,
                      timeout: float = 10.0) -> Any:
        self.requests.append((kind, topic, cts, rid))
        if self.status is None:
            await trio.sleep_forever()
        return SimpleNamespace(status_code=self.status, status_desc=self.desc)


class Http:
    """Requests to the ASGI app, each in its own trio run (the handlers use trio)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://t") as c:
                return await c.request(method, path, **kw)
        return trio.run(go)

    def get(self, path: str) -> httpx.Response:
        return self.request("GET", path)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)


@pytest.fixture
def api():
    node: Any = SimpleNamespace(settings=SimpleNamespace(cluster_id=1, num_shards_in_cluster=8), pubsub=None,
                                filter=None, store=None, lightpush=None, host=None, router=None, addrs=[])
    client = FakeFilterClient()
    cache = MessageCache(10)
    app = build_app(node, RestSettings(enabled=True, request_timeout_s=0.2, filter_peer=SERVICE),
                    MessageCache(10), client, cache)  # type: ignore[arg-type]
    return Http(app), client, cache


def test_subscribe_read_unsubscribe(api):
    http, client, cache = api
    r = http.post("/filter/v2/subscriptions", json={"requestId": "1", "contentFilters": [CT], "pubsubTopic": SHARD})
    assert (r.status_code, r.json()) == (200, {"requestId": "1", "statusDesc": "OK"})
    assert client.requests == [(Req.SUBSCRIBE, SHARD, (CT,), "1")]
    cache.add(SHARD, WakuMessage(payload=b"a", content_topic=CT, timestamp=5))
    cache.add("/waku/2/rs/1/99", WakuMessage(payload=b"b", content_topic=CT))
    # go-waku's form: only the pushes on that pubsub topic.
    r = http.get(f"/filter/v2/messages/{quote(SHARD, safe='')}/{quote(CT, safe='')}")
    assert r.status_code == 200 and [m["payload"] for m in r.json()] == ["YQ=="]
    assert r.json()[0] == {"payload": "YQ==", "contentTopic": CT, "version": 0, "timestamp": 5, "ephemeral": False}
    r = http.get(f"/filter/v2/messages/{quote(CT, safe='')}")
    assert [m["payload"] for m in r.json()] == ["Yg=="]
    assert http.get(f"/filter/v2/messages/{quote(CT, safe='')}").json() == []
    r = http.get(f"/filter/v2/messages/{quote(SHARD, safe='')}/{quote('/x/1/y/proto', safe='')}")
    assert (r.status_code, r.text) == (400, "Not subscribed to topic: /x/1/y/proto")
    r = http.request("DELETE", "/filter/v2/subscriptions", json={"requestId": "2", "contentFilters": [CT]})
    assert (r.status_code, r.json()) == (200, {"requestId": "2", "statusDesc": "OK"})
    assert client.requests[-1] == (Req.UNSUBSCRIBE, SHARD, (CT,), "2")  # autosharded
    assert http.get(f"/filter/v2/messages/{quote(CT, safe='')}").status_code == 400


def test_cache_follows_any_answer_not_a_timeout(api):
    http, client, cache = api
    client.status, client.desc = 400, "BAD_REQUEST: no"
    r = http.post("/filter/v2/subscriptions", json={"requestId": "1", "contentFilters": [CT], "pubsubTopic": SHARD})
    assert (r.status_code, r.json()["statusDesc"]) == (400, "BAD_REQUEST: no")
    assert CT in cache.content_topics  # as nwaku: subscribed in the cache once the service answered
    client.status = None
    r = http.post("/filter/v2/subscriptions", json={"requestId": "2", "contentFilters": ["/b/1/c/proto"]})
    assert (r.status_code, r.json()) == (503, {"requestId": "2", "statusDesc": "Subscription request timed out"})
    assert "/b/1/c/proto" not in cache.content_topics
    timeouts = {
        ("DELETE", "/filter/v2/subscriptions"): "Failed to unsubscribe from contentFilters due to timeout!",
        ("DELETE", "/filter/v2/subscriptions/all"): "Failed to unsubscribe from all contentFilters due to timeout!",
        ("GET", "/filter/v2/subscriptions/7"): "Ping timed out",
    }
    for (method, path), desc in timeouts.items():
        body = None if method == "GET" else {"requestId": "7"} if path.endswith("/all") else \
            {"requestId": "7", "contentFilters": [CT]}  # (an unknown field is refused, as nwaku)
        r = http.request(method, path, json=body)
        assert (r.status_code, r.json()) == (503, {"requestId": "7", "statusDesc": desc}), path
    assert CT in cache.content_topics  # nothing changed on a timeout
    client.status, client.desc = 404, "NOT_FOUND: no subscriptions"
    r = http.request("DELETE", "/filter/v2/subscriptions/all", json={"requestId": "8"})
    assert (r.status_code, r.json()["statusDesc"]) == (404, "NOT_FOUND: no subscriptions")
    assert not cache.content_topics  # reset whatever the service answered


def test_bad_bodies_are_400_with_unknown_request_id(api):
    http, client, _ = api
    for body in (b"{", b"[1]", b'{"requestId": 1}', b'{"requestId": "1", "contentFilters": "x"}'):
        r = http.post("/filter/v2/subscriptions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["requestId"] == "unknown", body
        assert r.json()["statusDesc"].startswith("Failed to decode request")
    r = http.post("/filter/v2/subscriptions", json={"requestId": "1", "contentFilters": ["free-form"]})
    assert r.status_code == 400 and r.json()["statusDesc"].startswith("BAD_REQUEST")
    r = http.post("/filter/v2/subscriptions", json={"requestId": "1", "contentFilters": []})
    assert r.status_code == 400
    assert client.requests == []


def test_bodies_over_the_cap_are_413(api):
    http, client, _ = api
    cap = RestSettings().max_body_bytes
    for size in (cap + 1, int(1.5 * cap), 3 * cap):  # read to its end up to 2 x cap, refused at once above
        r = http.post("/filter/v2/subscriptions", content=b" " * size, headers={"content-type": "application/json"})
        assert (r.status_code, r.text) == (413, f"Request body exceeds {cap} bytes"), size
    assert client.requests == []


def test_a_content_topic_with_control_characters_is_a_route(api):
    """The suite's test_filter_update_subscription_add_30_new_content_topics reads
    `GET /filter/v2/messages/%09%0ASpecial%09Characters%0A`: nwaku's router takes any decoded
    segment; Starlette's `path` pattern (`.*`) stops at a newline, which answered 400
    `Invalid path or method used`. The relay routes take such a topic the same way."""
    http, client, cache = api
    ct = "\t\nSpecial\tCharacters\n"
    r = http.post("/filter/v2/subscriptions", json={"requestId": "1", "contentFilters": [ct], "pubsubTopic": SHARD})
    assert r.status_code == 200, r.text
    cache.add(SHARD, WakuMessage(payload=b"a", content_topic=ct, timestamp=5))
    r = http.get(f"/filter/v2/messages/{quote(ct, safe='')}")
    assert r.status_code == 200, r.text
    assert [(m["payload"], m["contentTopic"]) for m in r.json()] == [("YQ==", ct)]
    r = http.get(f"/filter/v2/messages/{quote(SHARD, safe='')}/{quote(ct, safe='')}")
    assert (r.status_code, r.json()) == (200, [])  # taken above
    r = http.get("/filter/v2/messages/%0A")
    assert (r.status_code, r.text) == (400, "Not subscribed to topic: \n")
