"""Filter through the REST API, HTTP only: bridge A's REST filter client (`rest.filter_peer`) is
subscribed at bridge B, the interop bridge with its filter service and the subscriptions and
filter Spark jobs (tests/interop/conftest.py); messages published with A's
`POST /relay/v1/messages` are relayed to B, matched by B's filter job and pushed to A's client,
and read with `GET /filter/v2/messages/{contentTopic}` and `/{pubsubTopic}/{contentTopic}`. Ping,
unsubscribe and unsubscribe-all answer as nwaku's code does (docs/rest.md)."""
from __future__ import annotations

import base64
import uuid
from urllib.parse import quote

import pytest

from tests.integration.test_rest_api import Node, b64, start_rest_bridge, wait_for
from tests.interop.conftest import PUBSUB_TOPIC

pytestmark = pytest.mark.integration

SHARD = quote(PUBSUB_TOPIC, safe="")


@pytest.fixture
def rest_a(interop, kafka, tmp_path):
    a = start_rest_bridge(kafka, tmp_path, "rest-filter-a", f"bridge.static_peers={interop.tcp_addr}",
                          f"rest.filter_peer={interop.tcp_addr}")
    try:
        yield a
    finally:
        a.http.close()
        assert a.proc.stop() == 0


def test_rest_filter_client_reads_pushes_from_another_bridge(interop, rest_a):
    a: Node = rest_a
    tag = uuid.uuid4().hex[:6]
    ct1, ct2 = f"/rest-filter/1/{tag}-one/proto", f"/rest-filter/1/{tag}-two/proto"
    wait_for("A relays with B", lambda: a.get("/health").json()["connectionStatus"] != "Disconnected")

    r = a.post("/filter/v2/subscriptions", {"requestId": "sub-1", "contentFilters": [ct1, ct2],
                                            "pubsubTopic": PUBSUB_TOPIC})
    assert (r.status_code, r.json()) == (200, {"requestId": "sub-1", "statusDesc": "OK"}), r.text
    r = a.get("/filter/v2/subscriptions/ping-1")
    assert (r.status_code, r.json()) == (200, {"requestId": "ping-1", "statusDesc": "OK"})
    assert a.get(f"/filter/v2/messages/{quote(ct1, safe='')}").json() == []

    sent: dict[str, list[bytes]] = {ct1: [], ct2: []}
    got: dict[str, list[bytes]] = {ct1: [], ct2: []}

    def publish(ct: str) -> None:
        payload = f"{ct}-{len(sent[ct])}".encode()
        r = a.post(f"/relay/v1/messages/{SHARD}", {"payload": b64(payload), "contentTopic": ct})
        assert (r.status_code, r.text) == (200, "OK")
        sent[ct].append(payload)

    def read(ct: str, on_pubsub: bool = False) -> list[dict]:
        path = f"/filter/v2/messages/{SHARD}/{quote(ct, safe='')}" if on_pubsub else \
            f"/filter/v2/messages/{quote(ct, safe='')}"
        r = a.get(path)
        assert r.status_code == 200, r.text
        body = r.json()
        for m in body:
            assert set(m) == {"payload", "contentTopic", "version", "timestamp", "ephemeral"}, m
            assert m["contentTopic"] == ct and m["version"] == 0 and m["ephemeral"] is False
            got[ct].append(base64.b64decode(m["payload"]))
        return body

    def first_push() -> bool:
        # Publish again until A's relay mesh with B carries it (the subscriptions exchange takes
        # a moment) and B's filter job has the subscription.
        publish(ct1)
        return bool(read(ct1))

    wait_for("the first push of ct1", first_push, timeout=180, every=1.0)
    publish(ct2)
    publish(ct1)
    # go-waku's form for ct2; another pubsub topic's form gives none of them.
    wait_for("ct2's push", lambda: read(ct2, on_pubsub=True), timeout=120, every=0.3)
    other = quote("/waku/2/rs/1/7" if PUBSUB_TOPIC != "/waku/2/rs/1/7" else "/waku/2/rs/1/6", safe="")
    assert a.get(f"/filter/v2/messages/{other}/{quote(ct1, safe='')}").json() == []
    wait_for("every ct1 push", lambda: read(ct1) is not None and set(got[ct1]) == set(sent[ct1]),
             timeout=120, every=0.3)
    assert sorted(got[ct1]) == sorted(sent[ct1]) and got[ct2] == sent[ct2]  # each once
    assert read(ct1) == [] and read(ct2, on_pubsub=True) == []  # a read takes them out

    # Unsubscribe ct1: the cache forgets it (nwaku: 400), ct2 still pushed.
    r = a.http.request("DELETE", "/filter/v2/subscriptions",
                       json={"requestId": "unsub-1", "contentFilters": [ct1], "pubsubTopic": PUBSUB_TOPIC})
    assert (r.status_code, r.json()) == (200, {"requestId": "unsub-1", "statusDesc": "OK"}), r.text
    r = a.get(f"/filter/v2/messages/{quote(ct1, safe='')}")
    assert (r.status_code, r.text) == (400, f"Not subscribed to topic: {ct1}")
    publish(ct1)
    publish(ct2)
    wait_for("ct2's second push", lambda: read(ct2) is not None and set(got[ct2]) == set(sent[ct2]),
             timeout=120, every=0.3)
    r = a.get("/filter/v2/subscriptions/ping-2")
    assert (r.status_code, r.json()) == (200, {"requestId": "ping-2", "statusDesc": "OK"})

    # Unsubscribe all: the cache is reset, B has nothing for A any more (ping: its NOT_FOUND).
    r = a.http.request("DELETE", "/filter/v2/subscriptions/all", json={"requestId": "all-1"})
    assert (r.status_code, r.json()) == (200, {"requestId": "all-1", "statusDesc": "OK"}), r.text
    r = a.get(f"/filter/v2/messages/{quote(ct2, safe='')}")
    assert (r.status_code, r.text) == (400, f"Not subscribed to topic: {ct2}")
    r = a.get("/filter/v2/subscriptions/ping-3")
    assert (r.status_code, r.json()) == (404, {"requestId": "ping-3", "statusDesc":
                                               "NOT_FOUND: peer has no subscriptions"}), r.text
    r = a.http.request("DELETE", "/filter/v2/subscriptions",
                       json={"requestId": "unsub-2", "contentFilters": [ct2], "pubsubTopic": PUBSUB_TOPIC})
    assert r.status_code == 404 and r.json()["requestId"] == "unsub-2", r.text
