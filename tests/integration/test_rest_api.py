"""The Waku REST API (ingest/rest/, docs/rest.md) on real bridge processes, through HTTP only:
two bridges (A, and B with A as its static peer) on the embedded Kafka, no Spark (A's store
answers from its fresh tail of Kafka). Every route's happy path and its refusals with nwaku's
status codes and texts; a message POSTed to A's relay read from B's cache; lightpushed messages
paged exactly with cursors from A's store and from B's store route asking A over store v3;
then property-based tests generated from the OpenAPI document we serve (schemathesis): no 5xx,
every response matching its schema."""
from __future__ import annotations

import base64
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from core.kafka import ensure_topics
from core.topics import autoshard
from tools.processes import BridgeProcess, start_bridge

pytestmark = pytest.mark.integration

SHARD0 = "/waku/2/rs/1/0"
CT = "/rest-test/1/chat/proto"
CT_SHARD = f"/waku/2/rs/1/{autoshard(CT, 8)}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, every: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(every)


class Node:
    def __init__(self, proc: BridgeProcess, url: str) -> None:
        self.proc = proc
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=30.0)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(path, params=params or None)

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.http.post(path, json=body, **kw) if body is not None else self.http.post(path, **kw)


def start_rest_bridge(kafka: str, tmp_path, name: str, *extra: str) -> Node:
    topic = f"test.rest.{name}.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    log = open(tmp_path / f"{name}.log", "w")
    proc = start_bridge([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp_path / name / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        "bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=", "bridge.all_shards=true",
        "filter.enabled=false",
        f"warehouse.root={tmp_path / name / 'wh'}", f"warehouse.checkpoints={tmp_path / name / 'cp'}",
        "rest.enabled=true", "rest.port=0", "rest.max_body_bytes=300000", *extra], log=log)
    line = wait_for("the rest api line", lambda: next((x for x in proc.lines if x.startswith("rest api on ")), None))
    node = Node(proc, line.removeprefix("rest api on "))
    # Ready: the store has caught up with Kafka (statusCode 503 "catching up" before).
    wait_for("the store", lambda: node.get("/store/v3/messages").json()["statusCode"] == 200)
    return node


@pytest.fixture(scope="module")
def nodes(kafka, tmp_path_factory) -> Iterator[tuple[Node, Node]]:
    tmp = tmp_path_factory.mktemp("rest")
    subscriptions = f"test.rest.subs.{uuid.uuid4().hex[:8]}"
    a = start_rest_bridge(kafka, tmp, "a", "rest.admin=true", "rest.allow_origins=http://localhost:*",
                          "filter.enabled=true", f"topics.subscriptions={subscriptions}")
    b = None
    try:
        # A's filter service serves once Kafka acknowledged its restart record.
        wait_for("A's filter service", lambda: {"Filter": "READY"} in a.get("/health").json()["protocolsHealth"])
        # B: A is its relay peer and its filter service node (the /filter/v2 routes).
        b = start_rest_bridge(kafka, tmp, "b", f"bridge.static_peers={a.proc.tcp_addr}",
                              f"rest.filter_peer={a.proc.tcp_addr}")
        yield a, b
    finally:
        for n in (b, a):
            if n is not None:
                n.http.close()
                assert n.proc.stop() == 0


def test_health_info_version(nodes):
    a, b = nodes
    # B dials A: both become relay peers.
    wait_for("relay peers", lambda: a.get("/health").json()["connectionStatus"] != "Disconnected")
    h = a.get("/health")
    assert h.status_code == 200 and h.headers["content-type"] == "application/json"
    report = h.json()
    assert report["nodeHealth"] == "READY"
    assert {"Relay": "READY"} in report["protocolsHealth"] and {"Store": "READY"} in report["protocolsHealth"]
    assert {"Filter": "READY"} in report["protocolsHealth"]
    assert {"Filter": "NOT_MOUNTED"} in b.get("/health").json()["protocolsHealth"]
    for path in ("/info", "/debug/v1/info"):
        info = a.get(path).json()
        assert info["listenAddresses"] == a.proc.addrs and set(info) <= {"listenAddresses", "enrUri"}
        assert info.get("enrUri", "enr:").startswith("enr:")
    for path in ("/version", "/debug/v1/version"):
        r = a.get(path)
        assert r.status_code == 200 and r.text.startswith("v") and r.headers["content-type"].startswith("text/plain")
    spec = a.get("/openapi.yaml")
    assert spec.status_code == 200 and spec.text.startswith("openapi: 3")
    r = a.get("/no/such/route")
    assert (r.status_code, r.text) == (400, "Bad request initiated. Invalid path or method used.")
    r = a.http.put("/health")
    assert r.status_code == 400
    r = a.get("/filter/v2/subscriptions/1")  # no filter client: nwaku's answer
    assert (r.status_code, r.text) == (404, "/filter endpoints are not available.")


def test_admin_routes(nodes):
    a, b = nodes
    peers = a.get("/admin/v1/peers").json()
    assert any(p["multiaddr"].endswith(b.proc.peer_id) for p in peers)
    connected = a.get("/admin/v1/peers/connected").json()
    entry = next(p for p in connected if p["multiaddr"].endswith(b.proc.peer_id))
    assert entry["connected"] == "Connected" and 0 in entry["shards"]
    assert set(entry) == {"multiaddr", "protocols", "shards", "connected", "agent", "origin"}
    r = a.post("/admin/v1/peers", [b.proc.tcp_addr])
    assert (r.status_code, r.text) == (200, "OK")
    r = a.post("/admin/v1/peers", ["/ip4/1.2.3.4"])
    assert r.status_code == 400 and r.text.startswith("Couldn't parse remote peer info")
    r = a.post("/admin/v1/peers", {"not": "a list"})
    assert r.status_code == 400 and r.text.startswith("Failed to decode request")
    r = a.get("/admin/v1/filter/subscriptions")
    assert r.status_code == 200 and isinstance(r.json(), list)
    assert a.post("/admin/v1/log-level/INFO").status_code == 200
    r = a.post("/admin/v1/log-level/LOUD")
    assert r.status_code == 400 and r.text.startswith("Invalid log-level: LOUD")
    # B runs with rest.admin off: nwaku's 404 text.
    r = b.get("/admin/v1/peers")
    assert (r.status_code, r.text) == (
        404, "/admin endpoints are not available. Please check your configuration: --rest-admin=true")


def test_cors_allow_list(nodes):
    a, b = nodes
    ok = a.http.get("/health", headers={"Origin": "http://localhost:3000"})
    assert ok.headers.get("access-control-allow-origin") == "http://localhost:3000"
    other = a.http.get("/health", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers
    assert "access-control-allow-origin" not in b.http.get("/health", headers={"Origin": "http://x"}).headers


def test_relay_publish_on_a_read_on_b(nodes):
    a, b = nodes
    topic = quote(SHARD0, safe="")
    a.get(f"/relay/v1/messages/{topic}")  # drain
    b.get(f"/relay/v1/messages/{topic}")
    sent: list[bytes] = []

    def on_b() -> list[dict] | None:
        # Publish again until B's mesh/fanout carries it (the subscriptions exchange takes a moment).
        payload = b"relay-%d" % len(sent)
        r = a.post(f"/relay/v1/messages/{topic}", {"payload": b64(payload), "contentTopic": CT})
        assert (r.status_code, r.text) == (200, "OK")
        sent.append(payload)
        got = b.get(f"/relay/v1/messages/{topic}").json()
        return got or None

    got = wait_for("the message on B", on_b, every=0.5)
    assert base64.b64decode(got[0]["payload"]) in sent
    assert set(got[0]) == {"payload", "contentTopic", "version", "timestamp", "ephemeral", "proof"}
    mine = a.get(f"/relay/v1/messages/{topic}").json()  # our own publishes are in our cache
    assert [base64.b64decode(m["payload"]) for m in mine] == sent
    assert a.get(f"/relay/v1/messages/{topic}").json() == []  # a read takes them out
    # Not subscribed: GET 404, POST 400 (nwaku's text).
    other = quote("/waku/2/rs/1/99", safe="")
    assert a.get(f"/relay/v1/messages/{other}").status_code == 404
    r = a.post(f"/relay/v1/messages/{other}", {"payload": b64(b"x"), "contentTopic": CT})
    assert (r.status_code, r.text) == (400, "Failed to publish: Node not subscribed to topic: /waku/2/rs/1/99")


def test_relay_refuses_bad_input(nodes):
    a, _ = nodes
    path = f"/relay/v1/messages/{quote(SHARD0, safe='')}"
    cases = {
        "no payload": ({"contentTopic": CT}, "Field `payload` is missing or empty"),
        "no content topic": ({"payload": b64(b"x")}, "Field `contentTopic` is missing or empty"),
        "bad base64": ({"payload": "***", "contentTopic": CT}, "Incorrect base64 string"),
        "bad version": ({"payload": b64(b"x"), "contentTopic": CT, "version": -1}, "`version`"),
        "not an object": ([1, 2], "expected an object"),
    }
    for name, (body, words) in cases.items():
        r = a.post(path, body)
        assert r.status_code == 400 and words in r.text, (name, r.status_code, r.text)
    r = a.http.post(path, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.text.startswith("Invalid content body, could not decode")
    json_type = {"content-type": "application/json"}
    r = a.http.post(path, content=b'{"payload": "eA==", "payload": "eA=="}', headers=json_type)
    assert r.status_code == 400 and "Multiple `payload` fields found" in r.text
    r = a.http.post(path, content=b"{}", headers={"content-type": "image/png"})
    assert (r.status_code, r.text) == (400, "Wrong Content-Type, expected application/json or text/plain")
    r = a.http.post(path, content=b"", headers={"content-type": "application/json"})
    assert (r.status_code, r.text) == (400, "Missing content body")
    r = a.post(path, {"payload": b64(os.urandom(250_000)), "contentTopic": CT})  # body over rest.max_body_bytes
    assert r.status_code == 413
    r = a.post(path, {"payload": b64(os.urandom(160_000)), "contentTopic": CT})  # over limits.max_message_bytes
    assert r.status_code == 400 and r.text.startswith("Failed to publish: ")
    assert a.get("/health").json()["nodeHealth"] == "READY"  # still serving


def test_relay_subscriptions_and_autosharding(nodes):
    a, _ = nodes
    r = a.post("/relay/v1/subscriptions", ["/waku/2/rs/1/9"])
    assert (r.status_code, r.text) == (200, "OK")
    enc = quote("/waku/2/rs/1/9", safe="")
    assert a.get(f"/relay/v1/messages/{enc}").json() == []
    assert a.post(f"/relay/v1/messages/{enc}", {"payload": b64(b"nine"), "contentTopic": CT}).status_code == 200
    assert [m["payload"] for m in a.get(f"/relay/v1/messages/{enc}").json()] == [b64(b"nine")]
    r = a.http.request("DELETE", "/relay/v1/subscriptions", json=["/waku/2/rs/1/9"])
    assert r.status_code == 200 and a.get(f"/relay/v1/messages/{enc}").status_code == 404
    # Left (nwaku): relay is off the topic, a publish there is refused; subscribing takes it again.
    r = a.post(f"/relay/v1/messages/{enc}", {"payload": b64(b"gone"), "contentTopic": CT})
    assert (r.status_code, r.text) == (400, "Failed to publish: Node not subscribed to topic: /waku/2/rs/1/9")
    assert a.post("/relay/v1/subscriptions", ["/waku/2/rs/1/9"]).status_code == 200
    assert a.post(f"/relay/v1/messages/{enc}", {"payload": b64(b"back"), "contentTopic": CT}).status_code == 200
    assert a.http.request("DELETE", "/relay/v1/subscriptions", json=["/waku/2/rs/1/9"]).status_code == 200
    r = a.post("/relay/v1/subscriptions", ["not-a-topic"])
    assert (r.status_code, r.text) == (400, 'Invalid pubsub topic(s): @["not-a-topic"]')
    # Content topics (autosharding, cluster 1 with 8 shards).
    ct_enc = quote(CT, safe="")
    assert a.get(f"/relay/v1/auto/messages/{ct_enc}").status_code == 404
    assert a.post("/relay/v1/auto/subscriptions", [CT]).status_code == 200
    r = a.post("/relay/v1/auto/messages", {"payload": b64(b"auto"), "contentTopic": CT})
    assert (r.status_code, r.text) == (200, "OK")
    got = a.get(f"/relay/v1/auto/messages/{ct_enc}").json()
    assert [m["payload"] for m in got] == [b64(b"auto")]
    r = a.post("/relay/v1/auto/messages", {"payload": b64(b"x"), "contentTopic": "free-form"})
    assert r.status_code == 400 and r.text.startswith("Failed to publish. Autosharding error")
    assert a.http.request("DELETE", "/relay/v1/auto/subscriptions", json=[CT]).status_code == 200
    assert a.get(f"/relay/v1/auto/messages/{ct_enc}").status_code == 404


def test_lightpush_then_store_pages_exactly(nodes):
    a, b = nodes
    ct = f"/rest-store/1/{uuid.uuid4().hex[:8]}/proto"
    shard = f"/waku/2/rs/1/{autoshard(ct, 8)}"
    payloads = [b"lp-%d" % i for i in range(7)]
    for i, p in enumerate(payloads):
        if i % 2:
            r = a.post("/lightpush/v3/message",
                       {"pubsubTopic": shard, "message": {"payload": b64(p), "contentTopic": ct}})
            assert r.status_code == 200 and set(r.json()) == {"relayPeerCount"}, r.text
        else:
            r = a.post("/lightpush/v1/message", {"message": {"payload": b64(p), "contentTopic": ct}})  # autosharded
            assert (r.status_code, r.text) == (200, "OK")

    def walk(node: Node, ascending: bool, **extra: str) -> list[bytes]:
        out, cursor, pages = [], None, 0
        while True:
            params = {"contentTopics": ct, "pubsubTopic": shard, "includeData": "true", "pageSize": "3",
                      "ascending": "true" if ascending else "false", **extra}
            if cursor:
                params["cursor"] = cursor
            r = node.get("/store/v3/messages", **params)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["statusCode"] == 200 and body["statusDesc"] == "OK", body
            pages += 1
            for m in body["messages"]:
                assert m["messageHash"].startswith("0x") and len(m["messageHash"]) == 66
                assert m["pubsubTopic"] == shard and m["message"]["contentTopic"] == ct
            out += [base64.b64decode(m["message"]["payload"]) for m in body["messages"]]
            cursor = body.get("paginationCursor")
            if not cursor:
                return out
            assert pages < 10

    wait_for("7 stored", lambda: len(walk(a, True)) == 7)
    assert walk(a, True) == payloads  # pages of 3, 3, 1, oldest first
    # Backward: the pages come newest first, each oldest first.
    assert walk(a, False) == payloads[4:] + payloads[1:4] + payloads[:1]
    # B's store route asking A over store v3 (peerAddr): the same pages.
    assert walk(b, True, peerAddr=a.proc.tcp_addr) == payloads
    # Hashes only by default; a lookup by hash.
    r = a.get("/store/v3/messages", contentTopics=ct, pageSize="2").json()
    assert len(r["messages"]) == 2 and set(r["messages"][0]) == {"messageHash"}
    h = r["messages"][0]["messageHash"]
    one = a.get("/store/v3/messages", hashes=h, includeData="true").json()
    assert [m["messageHash"] for m in one["messages"]] == [h]
    # nwaku's caps: pageSize above 100 is 100.
    assert a.get("/store/v3/messages", pageSize="1000").status_code == 200


def test_store_refuses_bad_parameters(nodes):
    a, b = nodes
    bad = {
        "cursor": ("0x1234", "waku message hash parsing error: invalid hash length: 2"),
        "hashes": ("zz", "Exception converting hex string to bytes"),
        "startTime": ("soon", "time parsing error"),
        "pageSize": ("many", "page size parsing error"),
        "includeData": ("perhaps", "include data parsing error"),
        "peerAddr": ("/ip4/1.2.3.4", "Failed parsing remote peer info"),
    }
    for name, (value, words) in bad.items():
        r = a.get("/store/v3/messages", **{name: value})
        assert r.status_code == 400 and r.text.startswith(words), (name, r.status_code, r.text)
    # In-band refusals of the store (as the libp2p answer): HTTP 200 with statusCode 400.
    r = a.get("/store/v3/messages", startTime="20", endTime="10").json()
    assert r["statusCode"] == 400 and r["statusDesc"].startswith("BAD_REQUEST")
    # nwaku's archive errors: its self-store answer 500 (HTTP) with the store's text.
    r = a.get("/store/v3/messages", cursor="0x" + "07" * 32)
    assert (r.status_code, r.text) == (
        500, "error in handleSelfStoreRequest: BAD_RESPONSE: archive error: DRIVER_ERROR: cursor not found")
    r = a.get("/store/v3/messages", cursor="0x" + "00" * 32)
    assert (r.status_code, r.text) == (
        500, "error in handleSelfStoreRequest: BAD_RESPONSE: archive error: INVALID_QUERY: all zeroes cursor hash")
    r = a.get("/store/v3/messages", peerAddr="ip4/127.0.0.1/tcp/1/p2p/" + a.proc.tcp_addr.rsplit("/", 1)[1])
    assert (r.status_code, r.text) == (400, "Failed parsing remote peer info: MultiAddress.init "
                                            "[multiaddress: Invalid MultiAddress, must start with `/`]")
    # The suite's test_store_with_wrongPeerAddr: nim-libp2p's MultiAddress.init texts (before:
    # `... is not a multiaddr ending in /p2p/<peer id> (Invalid MultiAddr ...)`).
    peer_id = a.proc.tcp_addr.rsplit("/", 1)[1]
    r = a.get("/store/v3/messages", peerAddr=f"/ip4/127.0.0.1/25211/p2p/{peer_id}")
    assert (r.status_code, r.text) == (400, "Failed parsing remote peer info: MultiAddress.init "
                                            "[multiaddress: Unsupported protocol '25211']")
    r = a.get("/store/v3/messages", peerAddr="/ip4")
    assert (r.status_code, r.text) == (400, "Failed parsing remote peer info: MultiAddress.init "
                                            "[multiaddress: Missing protocol 'ip4' argument]")
    r = a.get("/store/v3/messages", peerAddr=f"/ip4/127.0.0.1/tcp/x/p2p/{peer_id}")
    assert (r.status_code, r.text) == (400, "Failed parsing remote peer info: MultiAddress.init "
                                            "[multiaddress: Error encoding `tcp/x`]")
    r = a.get("/store/v3/messages", hashes="0xtest")
    assert (r.status_code, r.text) == (
        400, "Exception converting hex string to bytes: t is not a hexadecimal character")


def test_lightpush_refusals(nodes):
    a, _ = nodes
    msg = {"payload": b64(b"x"), "contentTopic": CT}
    r = a.post("/lightpush/v3/message", {"pubsubTopic": "/waku/2/rs/1/99", "message": msg})
    assert r.status_code == 421
    assert r.json() == {"statusDesc": "UNSUPPORTED_PUBSUB_TOPIC: this node does not relay /waku/2/rs/1/99"}
    r = a.post("/lightpush/v3/message", {"message": {"payload": b64(b"x"), "contentTopic": "free-form"}})
    assert r.status_code == 400 and r.json()["statusDesc"].startswith("BAD_REQUEST: no pubsub topic")
    r = a.post("/lightpush/v3/message", {"pubsubTopic": SHARD0})
    assert r.status_code == 400 and r.json()["statusDesc"].startswith("Invalid push request! ")
    r = a.post("/lightpush/v1/message", {"pubsubTopic": "/waku/2/rs/1/99", "message": msg})
    assert (r.status_code, r.text) == (503, "Failed to request a message push: not_published_to_any_peer")
    r = a.post("/lightpush/v1/message", {"message": {"payload": "!!", "contentTopic": CT}})
    assert (r.status_code, r.text) == (400, "Incorrect base64 string")


def test_filter_client_routes(nodes):
    """B's REST filter client subscribes at A's filter service: nwaku's answers. (Pushes need the
    filter Spark job: tests/interop/test_rest_filter.py reads them.)"""
    a, b = nodes
    body = {"requestId": "s1", "contentFilters": [CT], "pubsubTopic": CT_SHARD}
    r = b.post("/filter/v2/subscriptions", body)
    assert (r.status_code, r.json()) == (200, {"requestId": "s1", "statusDesc": "OK"}), r.text
    subs = a.get("/admin/v1/filter/subscriptions").json()
    assert {"pubsubTopic": CT_SHARD, "contentTopic": CT} in [c for s in subs for c in s["filterCriteria"]]
    r = b.get("/filter/v2/subscriptions/p1")
    assert (r.status_code, r.json()) == (200, {"requestId": "p1", "statusDesc": "OK"})
    assert b.get(f"/filter/v2/messages/{quote(CT, safe='')}").json() == []
    r = b.get(f"/filter/v2/messages/{quote('/other/1/x/proto', safe='')}")
    assert (r.status_code, r.text) == (400, "Not subscribed to topic: /other/1/x/proto")
    r = b.http.put("/filter/v2/subscriptions", json={"requestId": "s2", "contentFilters": ["/rest-test/1/other/proto"]})
    assert (r.status_code, r.json()["statusDesc"]) == (200, "OK")  # no pubsubTopic: autosharded
    r = b.http.request("DELETE", "/filter/v2/subscriptions", json=body)
    assert (r.status_code, r.json()) == (200, {"requestId": "s1", "statusDesc": "OK"})
    r = b.http.request("DELETE", "/filter/v2/subscriptions/all", json={"requestId": "all"})
    assert (r.status_code, r.json()) == (200, {"requestId": "all", "statusDesc": "OK"})
    r = b.get("/filter/v2/subscriptions/p2")  # nothing subscribed any more: the service's 404
    assert r.status_code == 404 and r.json()["requestId"] == "p2", r.text
    r = b.post("/filter/v2/subscriptions", {"contentFilters": [CT]})
    assert r.status_code == 400 and r.json() == {
        "requestId": "unknown", "statusDesc": "Failed to decode request: Field `requestId` is missing"}
    r = b.post("/filter/v2/subscriptions", {"requestId": "x", "contentFilters": ["free-form"]})
    assert r.status_code == 400 and r.json()["statusDesc"].startswith("BAD_REQUEST")


def test_filter_routes_refuse_unknown_fields_and_answer_nwaku_texts(nodes):
    """As nwaku (interop suite tests/filter): an unknown JSON field is a 400 on every
    /filter/v2/subscriptions route, as on the relay routes; more than 100 content topics is the
    service's `exceeds maximum content topics: 100`; a ping with an empty requestId
    (`/filter/v2/subscriptions/`) is a ping, its requestId echoed."""
    _, b = nodes
    body = {"requestId": "e1", "contentFilters": [CT], "pubsubTopic": CT_SHARD, "extraField": "extraValue"}
    for method in ("POST", "PUT", "DELETE"):
        r = b.http.request(method, "/filter/v2/subscriptions", json=body)
        assert r.status_code == 400 and r.json()["requestId"] == "unknown", (method, r.text)
        assert r.json()["statusDesc"].startswith("Failed to decode request"), r.text
    r = b.http.request("DELETE", "/filter/v2/subscriptions/all", json={"requestId": "e2", "extraField": 1})
    assert r.status_code == 400 and r.json()["requestId"] == "unknown", r.text
    r = b.post("/filter/v2/subscriptions", {"requestId": "e3", "contentFilters": [CT], "pubsubTopic": None})
    assert r.status_code == 400 and r.json()["requestId"] == "unknown", r.text  # a null: nwaku's reader fails
    many = {"requestId": "e4", "contentFilters": [str(i) for i in range(101)], "pubsubTopic": CT_SHARD}
    for method in ("POST", "DELETE"):
        r = b.http.request(method, "/filter/v2/subscriptions", json=many)
        assert r.status_code == 400 and "exceeds maximum content topics: 100" in r.json()["statusDesc"], r.text
    r = b.post("/filter/v2/subscriptions", {"requestId": "e5", "contentFilters": [CT], "pubsubTopic": CT_SHARD})
    assert r.status_code == 200, r.text
    r = b.get("/filter/v2/subscriptions/")
    assert (r.status_code, r.json()) == (200, {"requestId": "", "statusDesc": "OK"}), r.text
    r = b.http.request("DELETE", "/filter/v2/subscriptions/all", json={"requestId": "e6"})
    assert r.status_code == 200, r.text


# --- property-based: schemathesis from the document we serve -----------------------------------
# (schemathesis's own pytest plugin does not run under pytest 9: each operation's cases are drawn
# here with hypothesis from `APIOperation.as_strategy()`.)

OPENAPI = Path(__file__).resolve().parents[2] / "ingest" / "rest" / "openapi.yaml"


def _operations() -> list[Any]:
    import schemathesis

    schema = schemathesis.openapi.from_path(str(OPENAPI))
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", _operations(), ids=lambda op: op.label)
def test_openapi_no_server_error_and_schema_conformance(nodes, operation):
    """Cases generated from the document: no 5xx, every status code, content type and body as
    documented (the filter routes on B, whose filter client subscribes at A; the rest on A).
    REST_FUZZ_EXAMPLES per operation (default 25), REST_FUZZ_SEED to repeat a run."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as fixed_seed
    from schemathesis import checks

    a, b = nodes
    target = b if operation.path.startswith("/filter/") else a  # B has a filter client (of A)
    seed = int(os.environ.get("REST_FUZZ_SEED", "0")) or random.randrange(1, 100_000)
    print(f"{operation.label}: seed={seed}")

    def no_server_error_but_nwakus(ctx, response, case):
        """nwaku's own 5xx refusals are answered as nwaku: its self-store's archive errors (an
        unknown cursor), lightpush v3's 420 (a message already seen), which chronos maps to 500,
        and every refusal of lightpush v1 (503)."""
        if response.status_code == 500 and (
                response.text.startswith("error in handleSelfStoreRequest: BAD_RESPONSE: ")
                or "Dropping already-seen message" in response.text):
            return None
        if (response.status_code == 503 and case.path == "/lightpush/v1/message"
                and response.text.startswith("Failed to request a message push: ")):
            return None
        return checks.not_a_server_error(ctx, response, case)

    @fixed_seed(seed)
    @settings(max_examples=int(os.environ.get("REST_FUZZ_EXAMPLES", "25")), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy())
    def run(case):
        case.call_and_validate(base_url=target.url, checks=[
            no_server_error_but_nwakus, checks.status_code_conformance, checks.content_type_conformance,
            checks.response_schema_conformance])

    run()


def test_still_healthy_after_fuzzing(nodes):
    a, b = nodes
    a.post("/admin/v1/log-level/INFO")
    assert a.get("/health").json()["nodeHealth"] == "READY"
    assert a.proc.proc.poll() is None and b.proc.proc.poll() is None
