"""nwaku's sharding options as the interop suite (logos-delivery-interop-tests) starts nwaku, on
a real bridge process and the embedded Kafka, through HTTP only (docs/rest.md, docs/interop.md):

- `--cluster-id=2 --shard=0 --shard=1 --shard=999` starts (the suite's test_single_pubsub_topic;
  refused before: `expected 0-7 (8 shards in cluster 2)`) and relays shard 999;
- `--content-topic` is in the relay cache from start, as nwaku's REST server subscribes its cache
  to it: `GET /relay/v1/auto/messages/{contentTopic}` reads it without a POST of
  /relay/v1/auto/subscriptions (the suite's test_retrieve_messages_without_subscribing_via_api
  and test_subscribe_and_publish_on_another_content_topic_*; 404 before)."""
from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from core.kafka import ensure_topics
from tests.integration.test_rest_api import Node, b64, wait_for
from tools.processes import start_bridge

pytestmark = pytest.mark.integration

CT = "/myapp/1/latest/proto"  # shard 0 of 8
OTHER_CT = "/toychat/2/huilong/proto"  # shard 3, not given at start


@pytest.fixture(scope="module")
def node(kafka, tmp_path_factory) -> Iterator[Node]:
    tmp = tmp_path_factory.mktemp("nwaku-sharding")
    topic = f"test.nwaku-sharding.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    log = open(tmp / "node.log", "w")
    proc = start_bridge(
        [f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp / 'key'}",
         "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
         "bridge.discv5_port=-1", "rln.enabled=false", "filter.enabled=false", "store_service.enabled=false",
         f"warehouse.root={tmp / 'wh'}", f"warehouse.checkpoints={tmp / 'cp'}",
         "rest.enabled=true", "rest.port=0"],
        nwaku_args=["--cluster-id=2", "--shard=0", "--shard=1", "--shard=999", f"--content-topic={CT}"],
        log=log)
    line = wait_for("the rest api line", lambda: next((x for x in proc.lines if x.startswith("rest api on ")), None))
    n = Node(proc, line.removeprefix("rest api on "))
    try:
        yield n
    finally:
        n.http.close()
        proc.stop()


def payloads(node: Node, path: str) -> list[bytes]:
    r = node.get(path)
    assert r.status_code == 200, (r.status_code, r.text)
    return [base64.b64decode(m["payload"]) for m in r.json()]


def test_cluster_2_starts_with_shard_999_and_relays_it(node):
    shard = "/waku/2/rs/2/999"
    assert payloads(node, f"/relay/v1/messages/{quote(shard, safe='')}") == []
    r = node.post(f"/relay/v1/messages/{quote(shard, safe='')}", {"payload": b64(b"999"), "contentTopic": OTHER_CT})
    assert (r.status_code, r.text) == (200, "OK")
    assert payloads(node, f"/relay/v1/messages/{quote(shard, safe='')}") == [b"999"]


def test_the_start_up_content_topic_is_cached_without_an_auto_subscription(node):
    auto = f"/relay/v1/auto/messages/{quote(CT, safe='')}"
    assert payloads(node, auto) == []
    r = node.post("/relay/v1/auto/messages", {"payload": b64(b"auto"), "contentTopic": CT})
    assert (r.status_code, r.text) == (200, "OK")
    assert payloads(node, auto) == [b"auto"]
    # A content topic neither given at start nor subscribed: 404 with the topic, as nwaku.
    r = node.get(f"/relay/v1/auto/messages/{quote(OTHER_CT, safe='')}")
    assert (r.status_code, r.text) == (404, OTHER_CT)
