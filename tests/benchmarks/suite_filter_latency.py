"""The interop suite's filter path, timed: bridge A (relay, filter service) and bridge B (its REST
filter client, `rest.filter_peer` = A) on a running broker with the Spark live job (as
tools/interop_suite/run.py starts them), then, as tests/filter of the suite do, a REST publish on
A and B's `GET /filter/v2/messages/{contentTopic}`, polled here every 5 ms: publish answered →
the push in B's cache. The suite reads once, 0.1 s after the publish answered.

    .venv/bin/python tests/benchmarks/suite_filter_latency.py --kafka 127.0.0.1:19292 \
        --warehouse /tmp/h-filter/warehouse --checkpoints /tmp/h-filter/checkpoints [--set K=V ...]

Two runs: `steady` (one subscription, --count publishes one after another) and `fresh` (a new
content topic subscribed, then published on at once, as the suite's tests right after their
set-up). `--set` settings go to both bridges (the launcher's WAKU_SUITE_SETS)."""
from __future__ import annotations

import argparse
import base64
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.processes import start_bridge

CLUSTER, SHARD = 3, 1
TOPIC = f"/waku/2/rs/{CLUSTER}/{SHARD}"


def start(name: str, root: Path, args: argparse.Namespace, *extra: str):
    log = open(root / f"{name}.log", "w")
    proc = start_bridge([
        f"kafka.bootstrap_servers={args.kafka}", f"bridge.key_file={root / name / 'key'}",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        f"bridge.cluster_id={CLUSTER}", "rln.enabled=false", f"bridge.pubsub_topics={TOPIC}",
        f"warehouse.root={args.warehouse}", f"warehouse.checkpoints={args.checkpoints}",
        "topics.messages_partitions=2", "topics.subscriptions_partitions=2", "topics.push_partitions=1",
        "rest.enabled=true", "rest.port=0", *extra, *args.set], log=log, timeout=120)
    deadline = time.monotonic() + 120
    while not (line := next((x for x in proc.lines if x.startswith("rest api on ")), None)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: no rest api line")
        time.sleep(0.1)
    return proc, httpx.Client(base_url=line.removeprefix("rest api on "), timeout=10)


def publish(a: httpx.Client, ct: str, i: int) -> float:
    body = {"payload": base64.b64encode(f"m{i}".encode()).decode(), "contentTopic": ct, "timestamp": time.time_ns()}
    r = a.post(f"/relay/v1/messages/{quote(TOPIC, safe='')}", json=body)
    assert r.status_code == 200, r.text
    return time.monotonic()


def wait_push(b: httpx.Client, ct: str, since: float, limit: float) -> float | None:
    while time.monotonic() - since < limit:
        got = b.get(f"/filter/v2/messages/{quote(ct, safe='')}").json()
        if got:
            return time.monotonic() - since
        time.sleep(0.005)
    return None


def summary(name: str, lat: list[float | None]) -> None:
    got = sorted(x for x in lat if x is not None)
    q = (lambda p: got[min(len(got) - 1, int(p * len(got)))] * 1000) if got else (lambda p: float("nan"))
    within = sum(1 for x in got if x <= 0.1)
    print(f"{name}: n={len(lat)} received={len(got)} within 0.1 s={within} "
          f"p50={q(0.5):.0f} ms p90={q(0.9):.0f} ms max={q(1.0):.0f} ms "
          f"mean={statistics.mean(got) * 1000 if got else float('nan'):.0f} ms", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kafka", required=True)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--checkpoints", required=True)
    p.add_argument("--count", type=int, default=30)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--background", type=float, default=0.0,
                   help="messages/s published meanwhile on another content topic (the suite's other tests)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="suite-filter-latency-"))
    a_proc, a = start("a", root, args, "filter.enabled=true")
    b_proc = None
    try:
        deadline = time.monotonic() + 180
        while {"Filter": "READY"} not in a.get("/health").json()["protocolsHealth"]:
            if time.monotonic() > deadline:
                raise RuntimeError("A's filter service not ready")
            time.sleep(0.5)
        b_proc, b = start("b", root, args, f"bridge.static_peers={a_proc.tcp_addr}",
                          f"rest.filter_peer={a_proc.tcp_addr}", "filter.enabled=false")
        time.sleep(3)  # relay mesh
        stop = threading.Event()
        if args.background > 0:
            def trickle() -> None:
                with httpx.Client(base_url=str(a.base_url), timeout=10) as c:
                    i = 0
                    while not stop.wait(1 / args.background):
                        i += 1
                        publish(c, "/latency/1/background/proto", i)
            threading.Thread(target=trickle, daemon=True).start()
        tag = uuid.uuid4().hex[:6]
        ct = f"/latency/1/{tag}/proto"
        r = b.post("/filter/v2/subscriptions", json={"requestId": "1", "contentFilters": [ct], "pubsubTopic": TOPIC})
        assert r.status_code == 200, r.text
        time.sleep(1)
        wait_push(b, ct, publish(a, ct, -1), 5.0)  # the first: connections and streams
        steady = [wait_push(b, ct, publish(a, ct, i), 3.0) for i in range(args.count)]
        summary("steady", steady)
        fresh = []
        for i in range(args.count):
            cti = f"/latency/1/{tag}-{i}/proto"
            r = b.post("/filter/v2/subscriptions", json={"requestId": f"f{i}", "contentFilters": [cti],
                                                          "pubsubTopic": TOPIC})
            assert r.status_code == 200, r.text
            fresh.append(wait_push(b, cti, publish(a, cti, i), 3.0))
        summary("fresh (subscribe, then publish at once)", fresh)
        stop.set()
        print(f"logs: {root}")
    finally:
        for proc in (b_proc, a_proc):
            if proc is not None:
                proc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
