"""js-waku (`@waku/sdk` 0.0.36) against the bridge, issue 36 items 6, 7 and 9:
- a store walk one message per page through 120 messages, forward and backward, on the default
  limits: never refused (it was 429 after 48 pages forward / 68 backward);
- a bridge with ws and wss listeners: js-waku works over ws (it timed out: the ws port answered
  TLS), a TLS client completes its handshake on wss, and js-waku dials wss too when told to
  accept the self-signed certificate;
- a filter subscription on a pubsub topic the bridge does not relay is taken (200) as nwaku's
  service takes it (issue 68; filter.refuse_unrelayed_topics=true refuses it with 400)."""
from __future__ import annotations

import socket
import ssl
import uuid

import pytest

from core.kafka import ensure_topics
from tests.conftest import free_port
from tests.integration.test_filter_service import wait_until
from tests.integration.test_metadata import self_signed
from tests.interop.conftest import CLUSTER, SHARDS, Interop, js_client
from tests.interop.test_js_waku import common, hx, topic
from tools.processes import start_bridge

pytestmark = pytest.mark.integration


def test_js_store_walks_120_pages_of_one_message_both_ways(interop: Interop):
    ct = topic(f"paging-js-{uuid.uuid4().hex[:6]}")
    sent = interop.publish(120, "jsp", content_topic=ct)
    wait_until(lambda: set(sent) <= interop.stored_hashes(), 180, "120 messages in the Delta store")
    interop.wait_served(ct, 100)  # (a page holds 100 at most)
    walks = {}
    for direction in ("--forward", "--backward"):
        run = js_client("store", *common(interop, ct), "--page-size", "1", direction)
        summary = run.finish(600)
        assert summary["ok"], (direction, summary.get("error"), run.tail())
        assert summary["messages"] == 120 and summary["duplicates"] == 0, summary
        assert sorted(summary["hashes"]) == sorted(hx(h) for h in sent)
        assert summary["pages"] in (120, 121)  # one message a page (and at most an empty last one)
        walks[direction] = summary["hashes"]
    assert walks["--backward"] == walks["--forward"][::-1]  # the same store order, both ways


def test_js_filter_on_an_unrelayed_topic_is_taken_as_nwaku_takes_it(interop: Interop, monkeypatch):
    """The bridge relays shards 0-7 of cluster 1; js-waku subscribes on shard 9. js-waku itself
    skips a peer whose metadata lacks the shard, so the harness drops the bridge's shards from
    js-waku's peer store first (--forget-peer-shards: js-waku then uses the peer, as it does a
    peer it has no metadata of) and the bridge answers 200, as nwaku's service does (it checks
    no topic; filter.refuse_unrelayed_topics=true would answer 400: tests/unit/
    test_filter_unrelayed_topic.py); js-waku then unsubscribes, 200 too."""
    monkeypatch.setenv("DEBUG", "waku:filter-core:error")
    unrelayed = f"/waku/2/rs/{CLUSTER}/9"
    run = js_client("filter", *common(interop, topic("unrelayed")), "--pubsub-topic", unrelayed,
                    "--forget-peer-shards", "--seconds", "2")
    summary = run.finish()
    assert run.of("peer_shards_forgotten"), run.tail()
    assert summary["ok"] and summary.get("subscribed") is True and summary.get("unsubscribed") is True, summary


@pytest.fixture(scope="module")
def ws_and_wss(interop: Interop, tmp_path_factory):
    """A second bridge on the interop broker listening on tcp, ws and wss (a self-signed
    certificate made now); filter and store off (they are not what is tested)."""
    root = tmp_path_factory.mktemp("wss")
    cert, key = self_signed(root)
    tag = uuid.uuid4().hex[:8]
    kafka = interop.cfg.bootstrap_servers()
    ensure_topics(kafka, {f"interop.{tag}.wss.messages": 1})
    ws_port, wss_port = free_port(), free_port()
    overrides = [
        f"kafka.bootstrap_servers={kafka}", f"topics.messages=interop.{tag}.wss.messages",
        f"warehouse.root={root / 'warehouse'}", f"warehouse.checkpoints={root / 'checkpoints'}",
        f"bridge.key_file={root / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
        f"bridge.ws_port={ws_port}", f"bridge.wss_port={wss_port}", f"bridge.tls_cert_file={cert}",
        f"bridge.tls_key_file={key}", "bridge.metrics_port=-1", f"bridge.cluster_id={CLUSTER}", "rln.enabled=false",
        f"bridge.num_shards_in_cluster={SHARDS}", "bridge.pubsub_topics=", "bridge.all_shards=true",
        "filter.enabled=false", "store_service.enabled=false",
    ]
    log = (root / "bridge.log").open("a")
    bridge = start_bridge(overrides, log=log, env={"WAKU_CONFIG": ""})
    try:
        yield bridge, ws_port, wss_port, cert
    finally:
        bridge.stop()
        log.close()


def info_args(addr: str) -> list[str]:
    return ["--peer", addr, "--cluster-id", str(CLUSTER), "--shards", str(SHARDS), "--timeout", "60"]


def test_js_info_over_ws_beside_wss(ws_and_wss):
    bridge, ws_port, _wss_port, _cert = ws_and_wss
    ws = next(a for a in bridge.addrs if f"/tcp/{ws_port}/ws/" in a)
    summary = js_client("info", *info_args(ws)).finish()
    assert summary["ok"], summary
    assert summary["metadata"]["cluster_id"] == CLUSTER and "/vac/waku/metadata/1.0.0" in summary["protocols"]


def test_tls_client_and_js_over_wss(ws_and_wss, monkeypatch):
    bridge, _ws_port, wss_port, cert = ws_and_wss
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", wss_port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(open(cert).read())
    # js-waku on Node verifies certificates; told to accept any, it dials the wss listener too.
    monkeypatch.setenv("NODE_TLS_REJECT_UNAUTHORIZED", "0")
    wss = next(a for a in bridge.addrs if f"/tcp/{wss_port}/wss/" in a)
    summary = js_client("info", *info_args(wss)).finish()
    assert summary["ok"], summary
    assert summary["metadata"]["cluster_id"] == CLUSTER
