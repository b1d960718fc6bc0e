"""The REST API of a node that uses service nodes (nwaku's --lightpushnode, --storenode,
--relay=false; docs/rest.md) on real bridge processes and the embedded Kafka, through HTTP only:

- A: a full node (relay on every shard of cluster 1, store, lightpush service, REST, metrics);
- B: relays shard 0 only, no store of its own, A as its lightpush node and store node (not as a
  relay peer: what reaches A comes through lightpush);
- C: relay off, no store, a lightpush node that is not running (a dial failure).

Issue #68 F, G, I, O, H: each assertion below failed before the change that made it pass."""
from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from core.kafka import ensure_topics
from core.topics import autoshard
from tests.integration.test_rest_api import Node, b64, wait_for
from tools.processes import free_port, start_bridge

pytestmark = pytest.mark.integration

CT = f"/svc-test/1/{uuid.uuid4().hex[:6]}/proto"
SHARD = f"/waku/2/rs/1/{autoshard(CT, 8)}"
DEAD_PEER = "/ip4/127.0.0.1/tcp/{port}/p2p/16Uiu2HAmVHyyhzRu2YGnf1E8Sm1BEHBYKQrjcbwCkTFo3uuWeGaC"


def start_node(kafka: str, tmp, name: str, *extra: str, store: bool = True, tcp_port: int = 0,
               topic: str | None = None) -> Node:
    topic = topic or f"test.svc.{name}.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    log = open(tmp / f"{name}.log", "a")
    proc = start_bridge([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp / name / 'key'}",
        "bridge.listen_host=127.0.0.1", f"bridge.tcp_port={tcp_port}", "bridge.ws_port=-1", "bridge.cluster_id=1",
        "rln.enabled=false",
        "filter.enabled=false", f"store_service.enabled={'true' if store else 'false'}",
        f"warehouse.root={tmp / name / 'wh'}", f"warehouse.checkpoints={tmp / name / 'cp'}",
        "rest.enabled=true", "rest.port=0", *extra], log=log)
    line = wait_for("the rest api line", lambda: next((x for x in proc.lines if x.startswith("rest api on ")), None))
    node = Node(proc, line.removeprefix("rest api on "))
    node.topic = topic  # type: ignore[attr-defined]
    if store:
        wait_for("the store", lambda: node.get("/store/v3/messages").json()["statusCode"] == 200)
    return node


class Stack:
    def __init__(self, kafka: str, tmp) -> None:
        self.kafka, self.tmp = kafka, tmp
        self.a_port, self.a_metrics = free_port(), free_port()
        self.a_topic = f"test.svc.a.{uuid.uuid4().hex[:8]}"
        self.a = self.start_a()
        a_addr = self.a.proc.tcp_addr
        self.b = start_node(kafka, tmp, "b", "bridge.pubsub_topics=/waku/2/rs/1/0", "bridge.all_shards=false",
                            f"bridge.lightpush_node={a_addr}", f"bridge.store_node={a_addr}", "bridge.metrics_port=-1",
                            store=False)
        self.c = start_node(kafka, tmp, "c", "bridge.relay=false", "bridge.pubsub_topics=", "bridge.all_shards=true",
                            f"bridge.lightpush_node={DEAD_PEER.format(port=free_port())}", "bridge.metrics_port=-1",
                            store=False)

    def start_a(self) -> Node:
        return start_node(self.kafka, self.tmp, "a", "bridge.pubsub_topics=", "bridge.all_shards=true",
                          f"bridge.metrics_port={self.a_metrics}", tcp_port=self.a_port, topic=self.a_topic)

    def close(self) -> None:
        for n in (self.c, self.b, self.a):
            n.http.close()
            n.proc.stop()


@pytest.fixture(scope="module")
def stack(kafka, tmp_path_factory) -> Iterator[Stack]:
    s = Stack(kafka, tmp_path_factory.mktemp("svc"))
    try:
        yield s
    finally:
        s.close()


def payloads(node: Node, topic: str, auto: bool = False) -> list[bytes]:
    r = node.get(f"/relay/v1/{'auto/' if auto else ''}messages/{quote(topic, safe='')}")
    assert r.status_code == 200, r.text
    return [base64.b64decode(m["payload"]) for m in r.json()]


def test_lightpush_through_the_service_node(stack):
    """F + G: B's REST lightpush goes to A over libp2p (v1: lightpush 2.0.0-beta1, v3: 3.0.0);
    A relays, stores and caches it (A's REST-subscribed topic shows it); B's own cache has it."""
    a, b = stack.a, stack.b
    r = b.post("/relay/v1/subscriptions", [SHARD])
    assert r.status_code == 200
    payloads(a, SHARD)
    r = b.post("/lightpush/v1/message", {"pubsubTopic": SHARD, "message": {"payload": b64(b"v1"), "contentTopic": CT}})
    assert (r.status_code, r.text) == (200, "OK")
    r = b.post("/lightpush/v3/message", {"message": {"payload": b64(b"v3"), "contentTopic": CT}})  # autosharded
    assert r.status_code == 200 and set(r.json()) == {"relayPeerCount"}, r.text
    assert payloads(a, SHARD) == [b"v1", b"v3"]  # G: what A's lightpush service accepted is in A's cache
    assert payloads(b, "/waku/2/rs/1/0") == []
    # F: the node's own lightpushed messages, once each (A may also relay them back to B).
    assert sorted(payloads(b, SHARD)) == [b"v1", b"v3"]
    # Stored at A (source lightpush), read through B's store route without peerAddr (I).
    got = wait_for("the pushes in A's store", lambda: (lambda body: body if len(body.get("messages", ())) == 2
                                                       else None)(b.get("/store/v3/messages", contentTopics=CT,
                                                                        includeData="true").json()))
    assert sorted(base64.b64decode(m["message"]["payload"]) for m in got["messages"]) == [b"v1", b"v3"]
    # A shard B does not relay but A does: accepted (the service node decides).
    elsewhere = next(f"/waku/2/rs/1/{i}" for i in range(1, 8) if f"/waku/2/rs/1/{i}" != SHARD)
    r = b.post("/lightpush/v1/message", {"pubsubTopic": elsewhere, "message": {"payload": b64(b"far"),
                                                                              "contentTopic": CT}})
    assert (r.status_code, r.text) == (200, "OK")
    # A refusal of the service node comes back with its code (v3) and text (v1).
    r = b.post("/lightpush/v3/message", {"pubsubTopic": "/waku/2/rs/1/99", "message": {"payload": b64(b"x"),
                                                                                    "contentTopic": CT}})
    assert r.status_code == 421 and r.json()["statusDesc"].startswith("UNSUPPORTED_PUBSUB_TOPIC"), r.text
    r = b.post("/lightpush/v1/message", {"pubsubTopic": "/waku/2/rs/1/99", "message": {"payload": b64(b"x"),
                                                                                    "contentTopic": CT}})
    assert r.status_code == 503 and r.text == "Failed to request a message push: not_published_to_any_peer"


def test_oversized_lightpush_refused_by_the_service_node(stack):
    """The suite's test_light_push_with_payload_of_1_MB: a 1 MiB message pushed through A is
    refused by A with nwaku's relay text (nwaku's service reads a request of any size). Before,
    A's service closed the stream at the 256 KiB frame limit unread and B's REST answered 503
    `Push request timed out`."""
    b = stack.b
    big = {"payload": b64(b"a" * 1024 * 1024), "contentTopic": CT}
    r = b.post("/lightpush/v1/message", {"pubsubTopic": SHARD, "message": big})
    assert (r.status_code, r.text) == (
        503, "Failed to request a message push: Message size exceeded maximum of 153600 bytes")
    r = b.post("/lightpush/v3/message", {"pubsubTopic": SHARD, "message": big})
    assert r.status_code == 413 and r.json()["statusDesc"].endswith(
        "Message size exceeded maximum of 153600 bytes"), r.text


def test_own_lightpush_in_own_cache_when_self_hosted(stack):
    """F: without a lightpush node the node serves REST lightpush itself, and its own message is
    in its relay cache."""
    a = stack.a
    payloads(a, SHARD)
    r = a.post("/lightpush/v1/message", {"message": {"payload": b64(b"self"), "contentTopic": CT}})
    assert (r.status_code, r.text) == (200, "OK")
    assert payloads(a, SHARD) == [b"self"]


def test_dial_failure_and_light_node(stack):
    """F: a lightpush node that is down: nwaku's texts; H: relay off refuses the relay routes;
    I: no store and no store node: 412."""
    c = stack.c
    msg = {"pubsubTopic": SHARD, "message": {"payload": b64(b"x"), "contentTopic": CT}}
    r = c.post("/lightpush/v1/message", msg)
    assert (r.status_code, r.text) == (503, "Failed to request a message push: dial_failure")
    r = c.post("/lightpush/v3/message", msg)
    assert r.status_code == 505 and r.json()["statusDesc"].startswith("dial_failure: "), r.text
    r = c.get("/store/v3/messages")
    assert (r.status_code, r.text) == (412, "No suitable service peer & no discovery method")
    for method, path in (("POST", "/relay/v1/subscriptions"), ("GET", f"/relay/v1/messages/{quote(SHARD, safe='')}"),
                         ("POST", "/relay/v1/auto/messages")):
        r = c.http.request(method, path, json=["x"] if method == "POST" else None)
        assert (r.status_code, r.text) == (
            404, "/relay endpoints are not available. Please check your configuration: --relay"), path
    health = c.get("/health").json()["protocolsHealth"]
    assert {"Relay": "NOT_MOUNTED"} in health and {"Lightpush": "NOT_MOUNTED"} in health


def test_autosharded_publish_on_a_shard_not_joined_and_cache_dedupe(stack):
    """O: nwaku publishes on the content topic's shard even when not joined; a message is cached
    once however often it is added, and a content topic subscribed again does not hand back
    what was cached before."""
    a, b = stack.a, stack.b
    other_ct = next(f"/svc-o/1/t{i}/proto" for i in range(100) if autoshard(f"/svc-o/1/t{i}/proto", 8) != 0)
    r = b.post("/relay/v1/auto/messages", {"payload": b64(b"far"), "contentTopic": other_ct})
    assert (r.status_code, r.text) == (200, "OK")
    ct = f"/svc-dedupe/1/{uuid.uuid4().hex[:6]}/proto"
    assert a.post("/relay/v1/auto/subscriptions", [ct]).status_code == 200
    same = {"payload": b64(b"same"), "contentTopic": ct, "timestamp": time.time_ns()}
    for _ in range(2):
        assert a.post("/relay/v1/auto/messages", same).status_code == 200
    assert payloads(a, ct, auto=True) == [b"same"]
    assert a.post("/relay/v1/auto/messages", {"payload": b64(b"old"), "contentTopic": ct}).status_code == 200
    assert a.http.request("DELETE", "/relay/v1/auto/subscriptions", json=[ct]).status_code == 200
    assert a.post("/relay/v1/auto/subscriptions", [ct]).status_code == 200
    assert a.post("/relay/v1/auto/messages", {"payload": b64(b"new"), "contentTopic": ct}).status_code == 200
    assert payloads(a, ct, auto=True) == [b"new"]


def test_nwaku_metric_names_and_metadata_line(stack):
    """H: nwaku's names beside ours; nwaku's `Created WakuMetadata protocol` line, once."""
    text = httpx.get(f"http://127.0.0.1:{stack.a_metrics}/metrics").text
    names = {line.split(" ")[0].split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for name in ("libp2p_peers", "libp2p_pubsub_peers", "libp2p_pubsub_topics", "libp2p_pubsub_subscriptions_total",
                 "libp2p_gossipsub_peers_per_topic_mesh", "waku_peer_store_size", "waku_histogram_message_size_count",
                 "waku_node_messages_total", "waku_bridge_received_total", "libp2p_total_dial_attempts_total"):
        assert name in names, name
    topics = next(float(x.split(" ")[1]) for x in text.splitlines() if x.startswith("libp2p_pubsub_topics "))
    assert topics >= 8
    log = (stack.tmp / "a.log").read_text()
    assert log.count("Created WakuMetadata protocol") == 1


def test_lightpush_node_redialled_after_restart(stack):
    """F: the service node stops (dial failure) and comes back on its address: B pushes again."""
    b = stack.b
    msg = {"pubsubTopic": SHARD, "message": {"payload": b64(b"again"), "contentTopic": CT}}
    stack.a.http.close()
    assert stack.a.proc.stop() == 0
    r = b.post("/lightpush/v1/message", msg)
    assert (r.status_code, r.text) == (503, "Failed to request a message push: dial_failure")
    stack.a = stack.start_a()
    r = wait_for("a push through the restarted node",
                 lambda: (lambda r: r if r.status_code == 200 else None)(b.post("/lightpush/v1/message", msg)),
                 timeout=30, every=1.0)
    assert r.text == "OK"
