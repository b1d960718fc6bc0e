"""go-waku v0.10.0 against the bridge, unmodified (cluster 1: it checks our metadata and drops
nodes of another cluster): it stays connected; relays in and out (a 2,000-message burst out
arrives whole); filter subscribe / ping / unsubscribe with the exact status codes and every
push received at 5, 15 and 30 msg/s (paced to its 15/s client limit); store v3 pages and hash
lookups; lightpush (v2: what v0.10.0 speaks). Counts are exact: every message, once."""
from __future__ import annotations

import uuid

import pytest

from schemas import pipeline_records_pb2 as pr
from tests.integration.test_filter_service import streaming_progress, wait_until
from tests.interop.conftest import CLUSTER, PUBSUB_TOPIC, Interop, go_client

pytestmark = pytest.mark.integration


def hx(h: bytes) -> str:
    return "0x" + h.hex()


def unhex(h: str) -> bytes:
    return bytes.fromhex(h[2:])


def topic(name: str) -> str:
    return f"/interop/1/{name}/proto"


def common(env: Interop, content_topic: str) -> list[str]:
    return ["--peer", env.tcp_addr, "--cluster-id", str(CLUSTER), "--pubsub-topic", PUBSUB_TOPIC,
            "--content-topic", content_topic, "--timeout", "90"]


def test_go_node_of_cluster_1_stays_connected(interop: Interop):
    summary = go_client("stay", *common(interop, topic("stay")), "--seconds", "8").finish()
    assert summary["ok"], summary
    assert summary["connected_at_end"] and summary["disconnects"] == 0
    for codec in ("/vac/waku/metadata/1.0.0", "/vac/waku/relay/2.0.0", "/vac/waku/store-query/3.0.0",
                  "/vac/waku/lightpush/2.0.0-beta1", "/vac/waku/filter-subscribe/2.0.0-beta1"):
        assert codec in summary["protocols"]


def test_go_relay_in(interop: Interop):
    ct = topic(f"relay-in-{uuid.uuid4().hex[:6]}")
    summary = go_client("relay-publish", *common(interop, ct), "--count", "200", "--quiet").finish()
    assert summary["ok"], summary
    sent = [unhex(h) for h in summary["hashes"]]
    assert len(set(sent)) == 200
    wait_until(lambda: set(sent) <= interop.stored_hashes(), 120, "go-waku's 200 messages in the Delta store")
    keys = [bytes(r.key) for r in interop.kafka_records()]
    assert all(keys.count(h) == 1 for h in sent)


def test_go_relay_out_burst_arrives_whole(interop: Interop):
    """2,000 messages published as fast as possible into the bridge reach a go-waku relay peer
    through it: one message per gossipsub RPC, so go-libp2p's 32-deep validation queue drops
    nothing."""
    ct = topic(f"burst-{uuid.uuid4().hex[:6]}")
    receiver = go_client("relay-receive", *common(interop, ct), "--count", "2000", "--quiet", "--timeout", "150",
                         "--mesh-wait", "30")
    # Gossipsub forwards to mesh peers: the burst starts once the bridge and go-waku are grafted
    # (a heartbeat after the subscription), as any relay peer would see it.
    assert receiver.wait_event("ready")["in_mesh"] is True
    sent = interop.publish(2000, "burst", content_topic=ct)
    summary = receiver.finish()
    counters = {k: summary.get(k) for k in ("received", "duplicates", "rejected", "dropped_to_bridge", "error")}
    assert summary["ok"], counters
    assert summary["received"] == 2000 and summary["duplicates"] == 0
    assert sorted(summary["hashes"]) == sorted(hx(h) for h in sent)
    assert not summary.get("rejected"), summary.get("rejected")


def test_go_filter_codes_and_pushes_at_5_15_30_per_s(interop: Interop):
    ct = topic(f"filter-go-{uuid.uuid4().hex[:6]}")
    # --count 100: the client stops once it has 100 pushes; --seconds only bounds a stuck run (a
    # busy machine's Spark batches may take most of a minute to deliver the first ones).
    client = go_client("filter", *common(interop, ct), "--seconds", "240", "--ping-every", "4", "--count", "100")
    client.wait_event("ready")
    subs = interop.cfg.path("warehouse.root") + "/subscriptions"
    wait_until(lambda: interop.spark.read.format("delta").load(subs)
               .where(f"content_topic = '{ct}'").count() == 1, 120, "go-waku's subscription in Delta",
               progress=lambda: streaming_progress(interop.spark))
    sent = []
    for rate, n in ((5, 10), (15, 30), (30, 60)):
        sent += interop.publish(n, f"go{rate}", rate=rate, content_topic=ct)
    summary = client.finish(timeout=330)
    assert summary["ok"], summary
    assert summary["subscribe_status"] == 200 and set(summary["ping_statuses"]) == {200}
    assert summary["unsubscribe_status"] == 200 and summary["final_ping_status"] == 404
    assert summary["received"] == 100 and summary["duplicates"] == 0
    assert sorted(summary["hashes"]) == sorted(hx(h) for h in sent)
    # go-waku counts the 404 of the ping after unsubscribing as an error response; nothing else
    assert summary.get("gowaku_filter_errors", {}) in ({}, {"error_response": 1}), summary.get("gowaku_filter_errors")


def test_go_store_v3_pages_and_lookups(interop: Interop):
    ct = topic(f"store-go-{uuid.uuid4().hex[:6]}")
    sent = interop.publish(30, "gos", content_topic=ct)
    wait_until(lambda: set(sent) <= interop.stored_hashes(), 120, "30 messages in the Delta store")
    interop.wait_served(ct, 30)
    fwd = go_client("store", *common(interop, ct), "--page-size", "7", "--forward", "--skip-ratelimit").finish()
    assert fwd["ok"], fwd
    assert fwd["messages"] == 30 and fwd["hash_mismatches"] == 0 and fwd["status"] == 200
    assert fwd["hashes"] == [hx(h) for h in sent]
    back = go_client("store", *common(interop, ct), "--page-size", "100", "--skip-ratelimit").finish()
    assert back["ok"] and back["messages"] == 30 and sorted(back["hashes"]) == sorted(fwd["hashes"])
    picks = [hx(h) for h in sent[::10]]
    look = go_client("store", *common(interop, ct), "--hashes", ",".join(picks), "--skip-ratelimit").finish()
    assert look["ok"], look
    assert sorted(look["hashes"]) == sorted(picks)


def test_go_lightpush(interop: Interop):
    ct = topic(f"lightpush-go-{uuid.uuid4().hex[:6]}")
    before = interop.relay_peer.received
    summary = go_client("lightpush", *common(interop, ct), "--count", "10").finish()
    assert summary["ok"], summary
    assert summary["pushed_ok"] == 10 and set(summary["statuses"]) == {"OK"}
    pushed = {unhex(h) for h in summary["hashes"]}
    wait_until(lambda: pushed <= interop.stored_hashes(), 120, "go-waku's lightpushed messages in the store")
    wait_until(lambda: interop.relay_peer.received >= before + 10, 30, "the lightpushed messages at a relay peer")
    by_key = {bytes(r.key): pr.IngestRecord.FromString(r.value) for r in interop.kafka_records()}
    assert all(by_key[h].source == pr.LIGHTPUSH for h in pushed)
