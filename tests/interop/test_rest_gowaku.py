"""The same REST calls against our bridge and against go-waku v0.10.0's own node (`cmd/waku`,
built by tests/interop/gowaku-node/build.sh) side by side: go-waku relays with the bridge
(static peer) and uses it as its store, lightpush and filter node. Prints one row per call (HTTP
status, content type, the JSON shape or text of each side: docs/rest.md "go-waku v0.10.0 side by
side"); asserts what must agree: a message published over REST on either side is relayed to the
other's cache with the same fields, and a store page of the bridge's history is the same page
(hashes, fields) through either REST API."""
from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from core.kafka import ensure_topics
from tools.processes import free_port, start_bridge

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_BIN = REPO_ROOT / ".cache" / "interop" / "gowaku-node"
NODE_BUILD = REPO_ROOT / "tests" / "interop" / "gowaku-node" / "build.sh"
SHARD = "/waku/2/rs/1/0"
ENC = quote(SHARD, safe="")


def gowaku_bin() -> Path:
    """The node binary, built by the interop set-up (`scripts/setup.sh --with-interop`, which
    `make test` runs): missing is a failure, not a skip."""
    if not NODE_BIN.exists():
        pytest.fail(f"{NODE_BIN} missing: the set-up builds it (bash scripts/setup.sh --with-interop, "
                    f"or bash {NODE_BUILD.relative_to(REPO_ROOT)})")
    return NODE_BIN


def wait_for(what: str, check, timeout: float = 60.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(every)


def as_hex(h: str) -> str:
    return h if h.startswith("0x") else "0x" + base64.b64decode(h).hex()


def shape(r: httpx.Response) -> str:
    ctype = r.headers.get("content-type", "").split(";")[0]
    if ctype == "application/json":
        body = r.json()
        if isinstance(body, dict):
            return "{" + ", ".join(sorted(body)) + "}"
        if isinstance(body, list):
            return "[" + ("{" + ", ".join(sorted(body[0])) + "}" if body and isinstance(body[0], dict) else "") + "]"
        return repr(body)[:60]
    return repr(r.text.strip()[:60])


def test_rest_side_by_side_with_gowaku(kafka, tmp_path):
    binary = gowaku_bin()
    topic = f"test.rest.gowaku.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, {topic: 2})
    ours = start_bridge([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp_path / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        "bridge.cluster_id=1", "rln.enabled=false", "bridge.pubsub_topics=", "bridge.all_shards=true",
        f"warehouse.root={tmp_path / 'wh'}", f"warehouse.checkpoints={tmp_path / 'cp'}",
        f"topics.subscriptions=test.rest.gowaku.subs.{uuid.uuid4().hex[:8]}",
        "rest.enabled=true", "rest.port=0", "rest.admin=true"], log=open(tmp_path / "bridge.log", "w"))
    go_port = free_port()
    go = subprocess.Popen([
        str(binary), "--tcp-port", "0", "--address", "127.0.0.1", "--nodekey", os.urandom(32).hex(),
        "--cluster-id", "1", "--pubsub-topic", SHARD, "--relay", "--staticnode", ours.tcp_addr,
        "--storenode", ours.tcp_addr, "--lightpushnode", ours.tcp_addr, "--filternode", ours.tcp_addr,
        "--circuit-relay=false", "--nat", "none", "--discv5-discovery=false", "--metrics-server=false",
        "--log-level", "WARN", "--log-encoding", "nocolor", "--rest", "--rest-port", str(go_port), "--rest-admin"],
        stdout=open(tmp_path / "gowaku.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    rows: list[tuple[str, str, str]] = []
    try:
        url = ours.wait_rest_url(60)
        assert url
        a = httpx.Client(base_url=url, timeout=20)
        g = httpx.Client(base_url=f"http://127.0.0.1:{go_port}", timeout=20)
        wait_for("our store", lambda: a.get("/store/v3/messages").json()["statusCode"] == 200)
        wait_for("go-waku connected to the bridge", lambda: any(
            ours.peer_id in str(p) for p in g.get("/admin/v1/peers").json() or []))
        wait_for("relay peers", lambda: a.get("/health").json()["connectionStatus"] != "Disconnected")
        # Our filter service mounts once Kafka acknowledged its restart record (go-waku's filter
        # subscription is refused "protocols not supported" before).
        wait_for("our filter service", lambda: {"Filter": "READY"} in a.get("/health").json()["protocolsHealth"])

        def both(name: str, method: str, path: str, body: Any = None, go_path: str | None = None,
                 go_body: Any = None) -> tuple[httpx.Response, httpx.Response]:
            ra = a.request(method, path, json=body)
            rg = g.request(method, go_path or path, json=go_body if go_body is not None else body)
            rows.append((name, f"{ra.status_code} {shape(ra)}", f"{rg.status_code} {shape(rg)}"))
            return ra, rg

        ct = f"/rest-gowaku/1/{uuid.uuid4().hex[:6]}/proto"
        both("GET /health", "GET", "/health")
        both("GET /info", "GET", "/info")
        both("GET /debug/v1/info", "GET", "/debug/v1/info")
        both("GET /debug/v1/version", "GET", "/debug/v1/version")
        both("POST /relay/v1/subscriptions", "POST", "/relay/v1/subscriptions", [SHARD])
        both("GET /relay/v1/messages (drain)", "GET", f"/relay/v1/messages/{ENC}")
        sent = {"ours": b"from-ours", "go": b"from-go"}
        ra, rg = both("POST /relay/v1/messages", "POST", f"/relay/v1/messages/{ENC}",
                      {"payload": base64.b64encode(sent["ours"]).decode(), "contentTopic": ct},
                      go_body={"payload": base64.b64encode(sent["go"]).decode(), "contentTopic": ct})
        assert ra.status_code == 200 and rg.status_code == 200, (ra.text, rg.text)
        # Each side's cache: its own publish and the other's, relayed.
        got: dict[str, list[dict]] = {"ours": [], "go": []}

        def cached() -> bool:
            got["ours"] += a.get(f"/relay/v1/messages/{ENC}").json() or []
            got["go"] += g.get(f"/relay/v1/messages/{ENC}").json() or []
            return all({base64.b64decode(m["payload"]) for m in got[k]} >= set(sent.values()) for k in got)
        wait_for("both messages in both caches", cached, timeout=30, every=0.5)
        rows.append(("GET /relay/v1/messages", "200 [{" + ", ".join(sorted(got["ours"][0])) + "}]",
                     "200 [{" + ", ".join(sorted(got["go"][0])) + "}]"))
        mine = {base64.b64decode(m["payload"]): m for m in got["ours"]}
        theirs = {base64.b64decode(m["payload"]): m for m in got["go"]}
        for p in sent.values():  # go-waku leaves out zero values (omitempty)
            for key in ("payload", "contentTopic", "timestamp", "version"):
                assert mine[p].get(key, 0) == theirs[p].get(key, 0), (p, key, mine[p], theirs[p])
        # The bridge's history, through either REST API (go-waku asks the bridge: its storenode).
        params = f"includeData=true&pubsubTopic={ENC}&contentTopics={quote(ct, safe='')}&pageSize=5"
        wait_for("both stored", lambda: len(a.get(f"/store/v3/messages?{params}").json()["messages"]) == 2)
        ra, rg = both("GET /store/v3/messages", "GET", f"/store/v3/messages?{params}")
        assert ra.status_code == 200 and rg.status_code == 200, rg.text
        rows.append(("  its messages[0]", "{" + ", ".join(sorted(ra.json()["messages"][0])) + "}",
                     "{" + ", ".join(sorted((rg.json().get("messages") or [{}])[0])) + "}"))
        ours_page = [(m["messageHash"], m["message"]["payload"]) for m in ra.json()["messages"]]
        # go-waku names the fields in snake case (its protobuf JSON), the hash maybe in base64.
        go_page = [(as_hex(m["message_hash"]), m["message"]["payload"]) for m in rg.json()["messages"]]
        assert ours_page == go_page
        both("GET /store/v3/messages (bad cursor)", "GET", f"/store/v3/messages?{params}&cursor=0x12")
        both("GET /store/v3/messages (no topics)", "GET", "/store/v3/messages?includeData=true")
        msg = {"payload": base64.b64encode(b"lp").decode(), "contentTopic": ct}
        both("POST /lightpush/v3/message", "POST", "/lightpush/v3/message", {"pubsubTopic": SHARD, "message": msg})
        both("POST /lightpush/v1/message", "POST", "/lightpush/v1/message", {"pubsubTopic": SHARD, "message": msg})
        both("POST /relay (bad base64)", "POST", f"/relay/v1/messages/{ENC}", {"payload": "***", "contentTopic": ct})
        both("POST /relay (no payload)", "POST", f"/relay/v1/messages/{ENC}", {"contentTopic": ct})
        both("GET /admin/v1/peers", "GET", "/admin/v1/peers")
        _, rg = both("POST /filter/v2/subscriptions", "POST", "/filter/v2/subscriptions",
                     {"requestId": "1", "contentFilters": [ct], "pubsubTopic": SHARD})
        if rg.status_code != 200:  # go-waku answers "subscription failed"; its log has the cause
            print("go-waku's filter subscription:", [line for line in (tmp_path / "gowaku.log").read_text().splitlines()
                                                     if "subscri" in line.lower()][-3:])
        both("GET /filter/v2/subscriptions/{id} (ping)", "GET", "/filter/v2/subscriptions/2")
        both("GET /filter/v2/messages/{contentTopic}", "GET", f"/filter/v2/messages/{quote(ct, safe='')}")
        both("DELETE /filter/v2/subscriptions", "DELETE", "/filter/v2/subscriptions",
             {"requestId": "3", "contentFilters": [ct], "pubsubTopic": SHARD})
        both("GET /no/such/route", "GET", "/no/such/route")
    finally:
        print("\n| call | ours | go-waku v0.10.0 |\n|---|---|---|")
        for name, x, y in rows:
            print(f"| {name} | {x} | {y} |")
        go.terminate()
        try:
            go.wait(20)
        except subprocess.TimeoutExpired:
            go.kill()
        assert ours.stop() == 0
