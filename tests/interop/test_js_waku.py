"""js-waku (`@waku/sdk` 0.0.36; relay from 0.0.27) against the bridge, unmodified, on its defaults
(cluster 1, 8 shards, autosharding): it finds us, subscribes by filter and receives what another
peer relays, pages the store v3 across page boundaries, lightpushes, and publishes over relay.
Counts are exact: every message, once."""
from __future__ import annotations

import uuid

import pytest

from schemas import pipeline_records_pb2 as pr
from tests.integration.test_filter_service import streaming_progress, wait_until
from tests.interop.conftest import CLUSTER, PUBSUB_TOPIC, SHARDS, Interop, js_client

pytestmark = pytest.mark.integration


def hx(h: bytes) -> str:
    return "0x" + h.hex()


def topic(name: str) -> str:
    """A content topic of its own per test, on the relay peer's shard (same app and version)."""
    return f"/interop/1/{name}/proto"


def common(env: Interop, content_topic: str) -> list[str]:
    return ["--peer", env.ws_addr, "--cluster-id", str(CLUSTER), "--shards", str(SHARDS),
            "--content-topic", content_topic, "--timeout", "60"]


def test_js_light_node_finds_the_bridge(interop: Interop):
    summary = js_client("info", *common(interop, topic("info"))).finish()
    assert summary["ok"], summary
    md = summary["metadata"]
    assert (md["cluster_id"], md["shards"], md["same_cluster"], md["on_shard"]) == (1, list(range(8)), True, True)
    for codec in ("/vac/waku/filter-subscribe/2.0.0-beta1", "/vac/waku/store-query/3.0.0",
                  "/vac/waku/lightpush/3.0.0", "/vac/waku/metadata/1.0.0"):
        assert codec in summary["protocols"]
    assert summary["pubsub_topic"] == PUBSUB_TOPIC
    assert summary["health"] in ("MinimallyHealthy", "SufficientlyHealthy")


def test_js_filter_receives_what_others_relay(interop: Interop):
    ct = topic(f"filter-js-{uuid.uuid4().hex[:6]}")
    client = js_client("filter", *common(interop, ct), "--seconds", "40")
    client.wait_event("ready")
    peer = next(e for e in client.events if e.get("event") == "connected")["local_peer_id"]
    subs = interop.cfg.path("warehouse.root") + "/subscriptions"
    wait_until(lambda: interop.spark.read.format("delta").load(subs)
               .where(f"peer_id = '{peer}' AND content_topic = '{ct}'").count() == 1,
               120, "the js subscription in Delta", progress=lambda: streaming_progress(interop.spark))
    sent = interop.publish(20, "jsf", rate=5, content_topic=ct)
    wait_until(lambda: len(client.of("push")) >= 20, 60, "20 pushes at js-waku")
    summary = client.finish()
    assert summary["ok"], summary
    assert sorted(summary["hashes"]) == sorted(hx(h) for h in sent)  # each once, nothing else
    assert summary["received"] == 20


def test_js_store_pages_find_every_message(interop: Interop):
    ct = topic(f"store-js-{uuid.uuid4().hex[:6]}")
    sent = interop.publish(45, "jss", content_topic=ct)
    wait_until(lambda: set(sent) <= interop.stored_hashes(), 120, "45 messages in the Delta store")
    interop.wait_served(ct, 45)
    for direction in ("--forward", "--backward"):
        run = js_client("store", *common(interop, ct), "--page-size", "7", direction)
        summary = run.finish()
        assert summary["ok"], summary
        assert summary["messages"] == 45 and summary["duplicates"] == 0 and summary["undecoded"] == 0
        assert sorted(summary["hashes"]) == sorted(hx(h) for h in sent)
        assert summary["pages"] == 7  # 6 full pages of 7 and one of 3
        if direction == "--forward":
            assert summary["hashes"] == [hx(h) for h in sent]  # store order is publication order here


def test_js_lightpush_is_stored_and_relayed(interop: Interop):
    ct = topic(f"lightpush-js-{uuid.uuid4().hex[:6]}")
    before = interop.relay_peer.received
    summary = js_client("lightpush", *common(interop, ct), "--count", "5").finish()
    assert summary["ok"], summary
    assert summary["pushed_ok"] == 5 and summary["protocol"] == "/vac/waku/lightpush/3.0.0"
    pushed = {bytes.fromhex(h[2:]) for h in summary["hashes"]}
    wait_until(lambda: pushed <= interop.stored_hashes(), 120, "the lightpushed messages in the Delta store")
    wait_until(lambda: interop.relay_peer.received >= before + 5, 30, "the lightpushed messages at a relay peer")
    by_key = {bytes(r.key): pr.IngestRecord.FromString(r.value) for r in interop.kafka_records()}
    assert all(by_key[h].source == pr.LIGHTPUSH and by_key[h].pubsub_topic == PUBSUB_TOPIC for h in pushed)


def test_js_relay_node_publishes_through_the_bridge(interop: Interop):
    ct = topic(f"relay-js-{uuid.uuid4().hex[:6]}")
    summary = js_client("relay-publish", *common(interop, ct), "--count", "10").finish()
    assert summary["ok"], summary
    assert summary["published"] == 10
    published = {bytes.fromhex(h[2:]) for h in summary["hashes"]}
    wait_until(lambda: published <= interop.stored_hashes(), 120, "the relayed messages in the Delta store")
    keys = [bytes(r.key) for r in interop.kafka_records()]
    assert all(keys.count(h) == 1 for h in published)  # produced once each
