"""REST store query benchmark: `GET /store/v3/messages` pages from a bridge's REST API with C
concurrent HTTP clients, on the store benchmark's data (tests/benchmarks/store_query.py
`write_table`: N rows over two days, 8 shards, 40 content topics of skewed popularity).

    .venv/bin/python tests/benchmarks/rest_store_query.py --bootstrap HOST:PORT [--quick] [--rows N]
        [--clients 16] [--client-procs 4] [--seconds S] [--table PATH]

1. Writes the table (or reuses --table PATH, a `messages` table written by store_query.py --keep).
2. Starts `waku-bridge run` (a real bridge process) serving that table: store service with the
   shipped reader settings, the fresh tail off (Delta only, as store_query.py's servers), the
   REST API on a free port; Kafka at --bootstrap (the bridge's producer needs a broker).
3. C clients (httpx, one kept-alive HTTP/1.1 connection each) in P processes; each warms up,
   then all page together for S seconds, closed loop: a random query (any or one pubsub topic;
   none, one or three content topics; direction; page size 20 or 100; includeData; a time window
   starting (forward) or ending (backward) at a random time in 80 % of queries) paged along
   `paginationCursor` for up to 10 pages, each page timed from request to parsed JSON.

Prints per-page latency percentiles (stats.py), pages/s; the last line is JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks.stats import latency_summary  # noqa: E402 - run as a script: the repository joins sys.path first
from tests.benchmarks.store_query import (  # noqa: E402
    BASE_T,
    CONTENT,
    CONTENT_WEIGHTS,
    PUBSUB,
    SPAN_S,
    shipped_defaults,
    write_table,
)


def random_params(rnd: random.Random) -> dict[str, str]:
    params = {"includeData": "true", "pageSize": str(rnd.choice((20, 20, 100)))}
    pubsub = rnd.choice(("",) + PUBSUB)
    if pubsub:
        params["pubsubTopic"] = pubsub
    k = rnd.choice((0, 1, 1, 3))
    contents = list(dict.fromkeys(rnd.choices(CONTENT, weights=CONTENT_WEIGHTS, k=k)))
    if contents:
        params["contentTopics"] = ",".join(contents)
    forward = rnd.random() < 0.5
    params["ascending"] = "true" if forward else "false"
    if rnd.random() < 0.8:
        at = int((BASE_T + rnd.random() * SPAN_S) * 1e9)
        params["startTime" if forward else "endTime"] = str(at)
    return params


def run_clients(url: str, seeds: list[int], seconds: float) -> None:
    """A client process: one httpx.AsyncClient per seed; READY once all warmed, pages on GO."""
    import httpx
    import trio

    latencies: list[float] = []
    counts = {"pages": 0, "messages": 0, "errors": 0}
    ready = 0
    go = trio.Event()

    async def one(seed: int) -> None:
        nonlocal ready
        rnd = random.Random(seed)
        async with httpx.AsyncClient(base_url=url, timeout=60.0) as http:
            first = (await http.get("/store/v3/messages", params=random_params(rnd))).json()
            if first.get("paginationCursor"):  # warms the hash index (cursors) before timing
                await http.get("/store/v3/messages", params={"cursor": first["paginationCursor"]})
            ready += 1
            await go.wait()
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                params = random_params(rnd)
                for _ in range(10):
                    t0 = time.perf_counter()
                    r = await http.get("/store/v3/messages", params=params)
                    body = r.json() if r.status_code == 200 else {}
                    if body.get("statusCode") != 200:
                        counts["errors"] += 1
                        break
                    latencies.append(time.perf_counter() - t0)
                    counts["pages"] += 1
                    counts["messages"] += len(body["messages"])
                    cursor = body.get("paginationCursor")
                    if not cursor or time.perf_counter() >= end:
                        break
                    params = {**params, "cursor": cursor}

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            for s in seeds:
                nursery.start_soon(one, s)
            while ready < len(seeds):
                await trio.sleep(0.05)
            print("READY", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            t0 = time.perf_counter()
            go.set()
        return time.perf_counter() - t0

    elapsed = trio.run(main)
    print("RESULT " + json.dumps({"latencies": latencies, "elapsed": elapsed, **counts}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers for the bridge's producer")
    ap.add_argument("--quick", action="store_true", help="200k rows, 15 s")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--client-procs", type=int, default=4)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--table", help="a messages table (reused when it exists, else written there)")
    ap.add_argument("--client-role", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client_role:
        spec = json.loads(args.client_role)
        run_clients(spec["url"], spec["seeds"], spec["seconds"])
        return 0
    from tools.processes import start_bridge

    rows = args.rows or (200_000 if args.quick else 10_000_000)
    seconds = args.seconds or (15.0 if args.quick else 60.0)
    tmp = tempfile.mkdtemp(prefix="waku-rest-bench-")
    path = args.table or os.path.join(tmp, "wh", "messages")
    if not os.path.exists(os.path.join(path, "_delta_log")):
        shipped = shipped_defaults()
        print(f"writing {rows:,} messages to {path}", file=sys.stderr, flush=True)
        write_table(path, rows, 16_384, maintained=(shipped["target_file_bytes"], shipped["block_bytes"]))
    root = os.path.dirname(path)
    log = open(os.path.join(tmp, "bridge.log"), "w")
    bridge = start_bridge([f"kafka.bootstrap_servers={args.bootstrap}", f"bridge.key_file={tmp}/key",
                           "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1",
                           "bridge.metrics_port=-1", "filter.enabled=false", f"warehouse.root={root}",
                           f"warehouse.checkpoints={tmp}/cp", "store_service.fresh_tail=false",
                           "rest.enabled=true", "rest.port=0"], log=log)
    clients: list[subprocess.Popen] = []
    try:
        url = bridge.wait_rest_url(60)
        if not url:
            raise SystemExit("the bridge's REST API did not start")
        procs = max(1, min(args.client_procs, args.clients))
        seeds: list[list[int]] = [[] for _ in range(procs)]
        for i in range(args.clients):
            seeds[i % procs].append(1000 + i)
        for s in seeds:
            clients.append(subprocess.Popen(
                [sys.executable, __file__, "--bootstrap", args.bootstrap, "--client-role",
                 json.dumps({"url": url, "seeds": s, "seconds": seconds})],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT))
        for c in clients:
            assert c.stdout is not None
            line = c.stdout.readline()
            if line.strip() != "READY":
                raise SystemExit(f"a client did not start: {line!r}")
        cpu0 = bridge_cpu(bridge.proc.pid)
        for c in clients:
            assert c.stdin is not None
            c.stdin.write("GO\n")
            c.stdin.flush()
        results = []
        for c in clients:
            assert c.stdout is not None
            line = c.stdout.readline()
            results.append(json.loads(line.removeprefix("RESULT ")))
        bridge_cpu_s = bridge_cpu(bridge.proc.pid) - cpu0
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
        bridge.stop(30)
    latencies = [x for r in results for x in r["latencies"] if x != float("inf")]
    failed = sum(r["errors"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    pages = sum(r["pages"] for r in results)
    summary = latency_summary(latencies, len(latencies) + failed, scale=1000, digits=1)
    pct = {"p50": summary.p50, "p90": summary.p90, "p99": summary.p99, "max": summary.max}
    out = {"benchmark": "rest_store_query", "rows": rows, "clients": args.clients, "client_procs": len(clients),
           "seconds": round(elapsed, 1), "pages": pages, "pages_per_s": round(pages / elapsed, 1),
           "messages": sum(r["messages"] for r in results), "errors": sum(r["errors"] for r in results),
           "bridge_cpu_s": round(bridge_cpu_s, 1),
           **{f"{k}_ms": v for k, v in pct.items()}}
    print(f"{pages} pages in {elapsed:.1f} s ({out['pages_per_s']} pages/s), " +
          ", ".join(f"{k} {v} ms" for k, v in out.items() if k.endswith("_ms")), file=sys.stderr)
    print(json.dumps(out))
    return 0


def bridge_cpu(pid: int) -> float:
    from tools.processes import proc_cpu_s

    return proc_cpu_s(pid)


if __name__ == "__main__":
    sys.exit(main())
