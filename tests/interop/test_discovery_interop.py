"""Discovery against go-waku v0.10.0 and js-waku (issue 39): the bridge's ENR (secp256k1
identity) decoded byte for byte by go-waku's parser; go-waku's peer-exchange client and js-waku's
peer-exchange discovery asking the bridge; go-waku dials the peer it got; go-waku relays
through the bridge (secp256k1 identity) into Kafka. discv5: go-waku's own node (cmd/waku) with
our ENR as its only bootstrap node finds the bridge and connects over relay, a second one
bootstrapped only from the first finds it through the DHT, and the bridge finds and dials them.
A bridge process with Kafka only (no Spark jobs, no store or filter)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid

import httpx
import pytest

from core.kafka import ensure_topics
from ingest.enr import LIGHTPUSH, RELAY, decode_text
from tests.conftest import free_port
from tests.integration.test_bridge_process import count_records
from tests.integration.test_filter_service import wait_until
from tests.interop.conftest import GO_BIN, go_client, js_client
from tests.interop.test_rest_gowaku import gowaku_bin
from tools.processes import start_bridge

pytestmark = pytest.mark.integration

CLUSTER = 1
SHARD_TOPIC = "/waku/2/rs/1/0"
GO_FLAGS = ["--cluster-id", str(CLUSTER), "--pubsub-topic", SHARD_TOPIC]


def test_enr_and_peer_exchange_with_go_waku(kafka, tmp_path):
    # A go-waku relay node the bridge knows by its ENR (a static peer given as enr:...).
    other = go_client("serve", "--seconds", "300", *GO_FLAGS)
    try:
        ready = other.wait_event("ready")
        topic = f"test.discovery.{uuid.uuid4().hex[:8]}"
        ensure_topics(kafka, {topic: 1})
        ws_port = free_port()
        log = (tmp_path / "bridge.log").open("a")
        bridge = start_bridge([
            f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp_path / 'key'}",
            "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", f"bridge.ws_port={ws_port}",
            "bridge.metrics_port=-1", f"bridge.cluster_id={CLUSTER}", "rln.enabled=false", "bridge.pubsub_topics=",
            "bridge.all_shards=true",
            "store_service.enabled=false", "filter.enabled=false", "bridge.enr_udp_port=9000",
            f"bridge.static_peers={ready['enr']}",
        ], log=log, env={"WAKU_CONFIG": ""})
        try:
            wait_until(lambda: any(line.startswith("enr:") for line in bridge.lines), 60, "the bridge's enr: line")
            ours = decode_text(next(line for line in bridge.lines if line.startswith("enr:")))
            bridge_id = bridge.tcp_addr.rsplit("/p2p/", 1)[1]
            assert str(ours.peer_id()) == bridge_id and bridge_id.startswith("16Uiu2")

            # go-waku's parser: the same record, byte for byte, and the same reading of it.
            dec = subprocess.run([str(GO_BIN), "enr-decode", "--enr", ours.text()],
                                 capture_output=True, text=True, timeout=60)
            got = json.loads([line for line in dec.stdout.splitlines() if line.startswith("{")][-1])
            assert got["ok"], got
            assert bytes.fromhex(got["rlp_hex"]) == ours.raw and got["text"] == ours.text()
            assert got["peer_id"] == bridge_id and got["seq"] == ours.seq
            assert got["waku2"] == RELAY | LIGHTPUSH and got["cluster"] == CLUSTER
            assert sorted(got["shards"]) == list(range(8))  # go-waku keeps them in a map
            assert (got["ip"], got["tcp"], got["udp"]) == ("127.0.0.1", int(bridge.tcp_addr.split("/")[4]), 9000)
            assert f"/ip4/127.0.0.1/tcp/{ws_port}/ws/p2p/{bridge_id}" in got["multiaddrs"]

            # The bridge dialled the static peer; go-waku's peer-exchange client gets its ENR and dials it.
            wait_until(lambda: any(e["peer"] == bridge_id for e in other.of("peer_connected")), 60,
                       "the bridge connected to its static peer")
            px = go_client("px", "--peer", bridge.tcp_addr, "--count", "5", *GO_FLAGS).finish()
            assert px["ok"], px
            assert px["bridge_supports_protocol"] is True
            assert [p["peer"] for p in px["peers"]] == [ready["peer_id"]]
            assert px["peers"][0]["connected"] is True, px["peers"][0]
            assert px["peers"][0]["enr"] == ready["enr"]

            # Relay with the secp256k1 identity: go-waku publishes, the bridge relays into Kafka.
            pub = go_client("relay-publish", "--peer", bridge.tcp_addr, "--count", "3", *GO_FLAGS).finish()
            assert pub["ok"] and pub["published"] == 3, pub
            wait_until(lambda: count_records(kafka, topic) >= 3, 60, "3 relayed messages in Kafka")

            # js-waku (a light node over ws: noise with our secp256k1 key) discovers it the same way.
            # It cannot dial it: js-waku in Node has no TCP transport, and go-waku v0.10.0 leaves
            # its ws address out of its ENR (WithMultiaddress writes the field only when some
            # addresses do not fit), so the record has only ip/tcp.
            ws = next(a for a in bridge.addrs if f"/tcp/{ws_port}/ws/" in a)
            js = js_client("px", "--peer", ws, "--cluster-id", str(CLUSTER), "--shards", "8",
                           "--timeout", "60").finish()
            assert js["peer_id"] == bridge_id and js["connected"], js
            assert [p["peer"] for p in js["peers"]] == [ready["peer_id"]], js
            other_tcp = next(a for a in ready["addrs"] if "/ws" not in a).split("/p2p/")[0]
            assert js["peers"][0]["addrs"] == [other_tcp], js["peers"][0]
        finally:
            bridge.stop()
            log.close()
    finally:
        other.proc.terminate()
        other.finish(60)


def _gowaku_node(binary, tmp_path, name: str, bootstrap: str, rest_port: int) -> subprocess.Popen:
    """go-waku v0.10.0's node on cluster 1, shard 0, with discv5 on and one bootstrap ENR."""
    return subprocess.Popen([
        str(binary), "--tcp-port", "0", "--address", "127.0.0.1", "--nodekey", os.urandom(32).hex(),
        "--cluster-id", str(CLUSTER), "--pubsub-topic", SHARD_TOPIC, "--relay", "--circuit-relay=false",
        "--nat", "none", "--discv5-discovery", "--discv5-bootstrap-node", bootstrap, "--discv5-udp-port",
        str(free_port()), "--metrics-server=false", "--log-level", "DEBUG", "--log-encoding", "nocolor",
        "--rest", "--rest-port", str(rest_port), "--rest-admin"],
        stdout=(tmp_path / f"{name}.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _metric(url: str, name: str) -> float:
    """A metric's value (summed over its labels unless `name` gives them, as exposed)."""
    text = httpx.get(url, timeout=10).text
    labels = "" if "{" in name else "(?:{[^}]*})?"
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}{labels} (\S+)$", text, re.M))


def _peers(rest: str) -> list[dict]:
    try:
        return httpx.get(f"{rest}/admin/v1/peers", timeout=10).json() or []
    except (httpx.HTTPError, ValueError):
        return []


def test_discv5_with_gowaku_nodes(kafka, tmp_path):
    binary = gowaku_bin()
    topic = f"test.discv5.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 1})
    metrics_port = free_port()
    log = (tmp_path / "bridge.log").open("a")
    bridge = start_bridge([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp_path / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1",
        f"bridge.metrics_port={metrics_port}", "bridge.metrics_host=127.0.0.1", f"bridge.cluster_id={CLUSTER}",
        "rln.enabled=false",
        "bridge.pubsub_topics=", "bridge.all_shards=true", "store_service.enabled=false", "filter.enabled=false",
        "bridge.discv5_port=0", "bridge.discv5_lookup_interval_s=2",
    ], log=log, env={"WAKU_CONFIG": ""})
    nodes: list[subprocess.Popen] = []
    try:
        wait_until(lambda: any(line.startswith("enr:") for line in bridge.lines), 60, "the bridge's enr: line")
        ours = decode_text(next(line for line in bridge.lines if line.startswith("enr:")))
        udp = int(next(line for line in bridge.lines if line.startswith("discv5 on udp ")).rsplit(":", 1)[1])
        assert ours.port(b"udp") == udp and ours.relay_shards() == (CLUSTER, tuple(range(8)))
        bridge_id = bridge.tcp_addr.rsplit("/p2p/", 1)[1]
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"

        # go-waku #1: our ENR its only bootstrap node. Its discv5 handshakes with us, asks FINDNODE,
        # and its peer connector dials us over relay.
        rest1 = free_port()
        nodes.append(_gowaku_node(binary, tmp_path, "gowaku1", ours.text(), rest1))
        g1 = f"http://127.0.0.1:{rest1}"
        wait_until(lambda: any(bridge_id in str(p) and p.get("connected") for p in _peers(g1)), 120,
                   "go-waku #1 found the bridge through discv5 and connected")
        peer = next(p for p in _peers(g1) if bridge_id in str(p))
        print("go-waku #1's view of the bridge:", peer)
        assert any("/vac/waku/relay/2.0.0" in x for x in peer.get("protocols", [])), peer
        info1 = httpx.get(f"{g1}/debug/v1/info", timeout=10).json()
        enr1 = decode_text(info1["enrUri"])
        go1_id = str(enr1.peer_id())
        assert enr1.port(b"udp")
        assert _metric(metrics, "waku_discv5_requests_answered_total") >= 1

        # We find it (it contacted us: handshake, then our PING and FINDNODE to it) and dial it.
        wait_until(lambda: _metric(metrics, "waku_discv5_nodes_verified_total") >= 1, 60,
                   "the bridge verified go-waku #1 (PING/PONG)")
        wait_until(lambda: any(go1_id in x for x in _peers_of_bridge(tmp_path)), 60,
                   "the bridge logged go-waku #1 as a found relay peer")
        wait_until(lambda: _metric(metrics, 'waku_discv5_requests_sent_total{message="FINDNODE",outcome="answered"}')
                   >= 1, 60, "go-waku answered a FINDNODE of the bridge's lookups")

        # go-waku #2 knows only go-waku #1: it finds the bridge through the DHT.
        rest2 = free_port()
        nodes.append(_gowaku_node(binary, tmp_path, "gowaku2", enr1.text(), rest2))
        g2 = f"http://127.0.0.1:{rest2}"
        wait_until(lambda: any(bridge_id in str(p) for p in _peers(g2)), 180,
                   "go-waku #2 found the bridge through go-waku #1's table")
        dropped = _metric(metrics, "waku_discv5_packets_dropped_total")
        print("discv5 packets dropped:", dropped, "received:", _metric(metrics, "waku_discv5_packets_received_total"))
    finally:
        for p in nodes:
            p.terminate()
        for p in nodes:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        bridge.stop()
        log.close()


def _peers_of_bridge(tmp_path) -> list[str]:
    """The bridge log's "discv5: found relay peer <id>" lines."""
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        try:
            return [line for line in (tmp_path / "bridge.log").read_text().splitlines() if "found relay peer" in line]
        except OSError:
            time.sleep(0.1)
    return []
