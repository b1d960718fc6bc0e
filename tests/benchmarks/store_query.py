"""Store query benchmark: history pages over libp2p (/vac/waku/store/2.0.0-beta2) from a Delta
messages table of N rows, with 16 concurrent clients.

    .venv/bin/python tests/benchmarks/store_query.py [--quick] [--rows N] [--clients 16] [--seconds S]
        [--servers K] [--client-procs P] [--client py|go] [--rate R[,R2,...]]
        [--layout maintained|compacted] [--cache-mb MB] [--preload-mb MB] [--compacted-2g]

By default on the shipped settings: the table laid out as `maintain` leaves it and each server
with conf/pipeline.toml's store_service.cache_mb (512), preload_mb (256) and
max_concurrent_queries (2). Named variants:
  --layout compacted   files of 250,000 rows, row groups of --row-group (16,384) rows (the
                       layout of the figures before issue 40);
  --cache-mb / --preload-mb MB  another cache or preload (e.g. the whole table cached);
  --compacted-2g       the benchmark's former defaults: --layout compacted --cache-mb 2048
                       --preload-mb 0.

1. Writes N messages straight into a Delta table in a temp dir with `deltalake` (no Spark):
   received_time over two days (two or three received_date partitions), 8 pubsub topics
   (static shards), 40 content topics with a skewed (Zipf-like) popularity, 64-byte random
   payloads, real store digests; rows sorted by (received_time, digest) across files. Layout
   `maintained` (default): what `maintain`'s OPTIMIZE ZORDER BY received_time writes with the
   shipped settings, files of store.optimize_target_file_bytes (128 MiB) and Parquet row groups
   of Spark's parquet.block.size (4 MiB, conf/spark-defaults.conf), both as rows estimated from
   the generated rows' Parquet size (printed); the newest hour's 1 s micro-batch files the
   store job adds between two hourly `maintain` runs are not modelled. (--table PATH reuses a
   table written earlier; its layout is reported as "given table".)
2. Starts `--servers` store server processes (the online reader + the libp2p protocol, as the
   bridge mounts it; several serve the same table side by side) and waits until they listen.
3. C clients, each its own libp2p host and connection, in their own processes (one per client
   unless `--client-procs` is given), round-robin over the servers; all connect and warm up,
   then start together and run concurrently for S seconds: pick a
   random query (any or one pubsub topic; none, one or three content topics; direction; page
   size 20 or 100; start at a random time or at the end) and page along the cursor for up to
   10 pages; every page is timed from request to decoded response (a new stream per page,
   as the reference clients do; --reuse-streams: one stream per client). Queries with no
   result are timed too.
   `--client go`: each client is a go-waku node instead (tests/interop/go `store-bench`, built
   on first use; one process a client), paging store v3 as apps do: one of the 8 pubsub topics
   (go-waku requires one), the same content topics and popularity, a time window starting
   (forward) or ending (backward) at a random time in 80 % of queries, else from the newest /
   oldest message, up to 10 pages along the cursor, a new stream per page (go-waku's own
   requests, no client-side rate limit).

4. Closed loop by default: each client sends its next page when the previous one is answered,
   so the clients saturate the servers and latency is what a page waits at that throughput.
   `--rate R`: open loop, R pages/s offered by all clients together (each R/C a second, at
   Poisson arrivals of its own seeded source); a page is timed from when it was due, so a client
   still waiting on an answer is charged for the wait (`late_pages`, `max_lag_ms`). A list
   `--rate 50,100,200` runs each rate in turn against the same servers (start-up once).

Prints per-page latency percentiles (tests/benchmarks/stats.py: nearest rank over every page
sent, a failed one as +inf: null where it decides), pages/s and messages/s over the run; the
last line is JSON (with a list of rates, one entry a rate in `runs`; `layout`, `cache_mb`,
`preload_mb` say which variant ran). Server figures are deltas over each run.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks.stats import latency_summary  # noqa: E402 - run as a script: the repository joins sys.path first
from tests.benchmarks.stats import rate as per_second  # noqa: E402

BASE_T = 1_795_000_000.0  # 2026-11-18T...
SPAN_S = 2 * 86_400.0
PUBSUB = tuple(f"/waku/2/rs/1/{i}" for i in range(8))
CONTENT = tuple(f"/bench/1/topic-{i:02d}/proto" for i in range(40))
CONTENT_WEIGHTS = tuple(1.0 / (i + 1) for i in range(40))
PAYLOAD_BYTES = 64


# --- the table ------------------------------------------------------------------------------

def maintained_layout(sample, target_file_bytes: int, block_bytes: int) -> tuple[int, int]:
    """(rows a file, rows a row group) of the layout `maintain` leaves with the shipped settings:
    OPTIMIZE into files of `target_file_bytes` (store.optimize_target_file_bytes), Parquet row
    groups of `block_bytes` (Spark's parquet.block.size, conf/spark-defaults.conf). Both are
    bytes; the rows they hold are estimated from `sample` (Arrow rows) written to Parquet in
    memory with snappy, the writers' default compression."""
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(sample, buf, compression="snappy")
    per_row = max(1.0, buf.tell() / max(1, sample.num_rows))
    return max(1, int(target_file_bytes / per_row)), max(1, int(block_bytes / per_row))


def write_table(path: str, rows: int, row_group: int, chunk: int = 500_000, base_t: float = BASE_T,
                untimed_share: float = 0.0, rows_per_file: int = 250_000,
                maintained: tuple[int, int] | None = None, storage_options: dict[str, str] | None = None) -> float:
    """Writes the table; `untimed_share` of the rows get no sender timestamp (null), as
    messages without one are stored (store_ingest.py --seed-rows uses this). Files of
    `rows_per_file` rows and row groups of `row_group` rows, or with `maintained` (bytes a file,
    bytes a row group) the rows those hold (`maintained_layout`). Rows sorted by
    (received_time, digest) across files (a file per received_date at most)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from ingest.store.reader import MESSAGES_ARROW_SCHEMA, write_messages

    began = time.monotonic()
    rng = np.random.default_rng(1)
    weights = np.array(CONTENT_WEIGHTS) / sum(CONTENT_WEIGHTS)
    chunks = max(1, math.ceil(rows / chunk))
    written = 0
    pending = None  # sorted rows not yet written (less than a file)
    for _ in range(chunks):
        n = min(chunk, rows - written)
        lo = base_t + SPAN_S * written / rows
        hi = base_t + SPAN_S * (written + n) / rows
        rt = np.round(np.sort(rng.uniform(lo, hi, n)), 3)  # ms resolution: some ties
        ct_idx = rng.choice(len(CONTENT), n, p=weights)
        ps_idx = rng.integers(0, len(PUBSUB), n)
        payload = rng.bytes(PAYLOAD_BYTES * n)
        payloads = [payload[i * PAYLOAD_BYTES:(i + 1) * PAYLOAD_BYTES] for i in range(n)]
        ct_bytes = [c.encode() for c in CONTENT]
        digests = [hashlib.sha256(ct_bytes[c] + p).digest() for c, p in zip(ct_idx.tolist(), payloads, strict=True)]
        hashes = rng.bytes(32 * n)
        days = (rt // 86_400).astype("int64").astype("datetime64[D]").astype(str)
        table = pa.table({
            "received_time": pa.array(rt, pa.float64()),
            "digest": pa.array(digests, pa.binary()),
            "message_hash": pa.array([hashes[i * 32:(i + 1) * 32] for i in range(n)], pa.binary()),
            "pubsub_topic": pa.array(np.array(PUBSUB)[ps_idx]),
            "content_topic": pa.array(np.array(CONTENT)[ct_idx]),
            "payload": pa.array(payloads, pa.binary()),
            "version": pa.array(np.zeros(n, "int64")),
            "timestamp": pa.array((rt * 1e9).astype("int64"), mask=rng.random(n) < untimed_share),
            "meta": pa.nulls(n, pa.binary()),
            "rate_limit_proof": pa.nulls(n, pa.binary()),
            "source": pa.array(["relay"] * n),
            "bridge_id": pa.array(["bench"] * n),
            "kafka_topic": pa.array(["waku.messages"] * n),
            "kafka_partition": pa.array(ps_idx % 4, pa.int32()),
            "kafka_offset": pa.array(np.arange(written, written + n), pa.int64()),
            "kafka_timestamp": pa.array((rt * 1e6).astype("int64"), pa.timestamp("us", tz="UTC")),
            "received_date": pa.array(days),
        }, schema=MESSAGES_ARROW_SCHEMA)
        table = table.take(pc.sort_indices(table, [("received_time", "ascending"), ("digest", "ascending")]))
        if maintained is not None:
            rows_per_file, row_group = maintained_layout(table.slice(0, 50_000), *maintained)
            print(f"  maintained layout: ~{rows_per_file:,} rows a file, ~{row_group:,} a row group",
                  file=sys.stderr, flush=True)
            maintained = None
        # Chunks cover consecutive received_time ranges: whole files of rows_per_file, the rest
        # carried into the next chunk's first file.
        pending = table if pending is None else pa.concat_tables([pending, table])
        written += n
        last = written >= rows
        start = 0
        while pending.num_rows - start >= rows_per_file or (last and start < pending.num_rows):
            write_messages(path, pending.slice(start, rows_per_file), max_row_group_size=row_group,
                           storage_options=storage_options)
            start += rows_per_file
        pending = pending.slice(start)
        print(f"  wrote {written:,} rows ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
    return time.monotonic() - began


# --- the server process ---------------------------------------------------------------------

def serve(path: str, cache_mb: int, threads: int, preload_mb: int, store_json: str | None = None) -> None:
    import trio
    from libp2p.crypto.ed25519 import create_new_key_pair

    from core.settings import ObjectStoreSettings
    from ingest.host import build_host, listen_addrs
    from ingest.store.reader import ReaderSettings, StoreReader
    from ingest.store.server import StoreServer, StoreServiceSettings

    store = ObjectStoreSettings(**json.loads(store_json)) if store_json else ObjectStoreSettings()
    reader = StoreReader(ReaderSettings(path, cache_mb=cache_mb, preload_mb=preload_mb, object_store=store))
    reader.refresh()
    began = time.monotonic()
    preloaded = reader.preload(preload_mb)
    preload_s = time.monotonic() - began
    # The hash index (store v3 cursors) is built before serving, as start-up: reported apart,
    # not inside the first queries' latency.
    began = time.monotonic()
    reader.index_hashes()
    index_s = time.monotonic() - began
    reader.follow()
    from ingest.cli import _quiet_gc

    _quiet_gc()  # as `waku-bridge run` does once started
    settings = StoreServiceSettings(max_concurrent_queries=threads)

    async def main() -> None:
        addrs = listen_addrs("127.0.0.1", 0, -1)
        host = build_host(create_new_key_pair(), addrs)
        server = StoreServer(reader, settings)
        server.mount(host)
        async with host.run(addrs):
            ru = resource.getrusage(resource.RUSAGE_SELF)
            cpu0 = ru.ru_utime + ru.ru_stime
            print(f"LISTEN {host.get_addrs()[0]}", flush=True)
            # The server's view since it listens, at each line on stdin; until stdin closes.
            while await trio.to_thread.run_sync(sys.stdin.readline):
                v = server.metrics.value
                ru = resource.getrusage(resource.RUSAGE_SELF)
                print("STATS " + json.dumps({
                    "preloaded_row_groups": preloaded,
                    "preload_s": round(preload_s, 1),
                    "hash_index_s": round(index_s, 1),
                    "cpu_s": round(ru.ru_utime + ru.ru_stime - cpu0, 2),
                    "queries": v("waku_store_queries_total"),
                    "server_latency_sum_s": v("waku_store_query_seconds_sum"),
                    "row_groups_read": reader.row_groups_read,
                    "cache_mb": round(reader._cache.bytes / 2**20),
                    "rejected": sum(v("waku_store_rejected_total", reason=r) for r in
                                    ("too_many_content_topics", "bad_page_size", "bad_cursor_time", "bad_cursor_digest",
                                     "no_query", "error")),
                }), flush=True)

    trio.run(main)


# --- the clients ----------------------------------------------------------------------------

def random_query(rnd: random.Random):
    from core.store_page import Index, StoreQuery

    pubsub = rnd.choice(("",) + PUBSUB)
    k = rnd.choice((0, 1, 1, 3))
    contents = tuple(dict.fromkeys(rnd.choices(CONTENT, weights=CONTENT_WEIGHTS, k=k)))
    forward = rnd.random() < 0.5
    size = rnd.choice((20, 20, 100))
    cursor = None if rnd.random() < 0.2 else Index.at_time(BASE_T + rnd.random() * SPAN_S)
    return StoreQuery(pubsub, contents, cursor, forward, size)


def run_clients(targets: list[tuple[str, int]], seconds: float, reuse: bool = False, rate: float = 0.0) -> None:
    """A client process (`--client-role`): one StoreClient per (server address, seed); each
    connects and warms its connection, then the process prints READY and waits for GO on stdin
    (all client processes start together), pages for `seconds` and prints its RESULT. `rate` >
    0: each client's pages are due at Poisson arrivals of `rate` a second (open loop), timed
    from when they are due (as the go-waku client's --rate)."""
    import trio

    latencies: list[float] = []
    counts = {"pages": 0, "messages": 0, "late": 0, "max_lag_s": 0.0}
    ready = 0
    go = trio.Event()

    async def one(addr: str, seed: int) -> None:
        nonlocal ready
        from ingest.store.client import StoreClient

        rnd = random.Random(seed)
        async with StoreClient.running(timeout=60, reuse_streams=reuse) as client:
            peer = await client.connect(addr)
            await client.query(peer, random_query(rnd))  # warm the connection
            ready += 1
            await go.wait()
            arrivals = random.Random(seed + 1_000_003)
            due = time.perf_counter()
            end = due + seconds

            async def next_due() -> float:
                """When the next page is due (open loop; waits for it), or now (closed loop)."""
                nonlocal due
                if rate <= 0:
                    return time.perf_counter()
                due += arrivals.expovariate(rate)
                wait = min(due, end) - time.perf_counter()  # one due after the run: wait for its end only
                if wait > 0:
                    await trio.sleep(wait)
                elif -wait > 0.001:
                    counts["late"] += 1
                    counts["max_lag_s"] = max(counts["max_lag_s"], -wait)
                return due

            while time.perf_counter() < end:
                query = random_query(rnd)
                for _ in range(10):
                    t0 = await next_due()
                    if t0 >= end:
                        break
                    page = await client.query(peer, query)
                    latencies.append(time.perf_counter() - t0)
                    counts["pages"] += 1
                    counts["messages"] += len(page.messages)
                    if page.cursor is None or time.perf_counter() >= end:
                        break
                    query = query.with_cursor(page.cursor)

    async def main() -> tuple[float, float]:
        async with trio.open_nursery() as nursery:
            for addr, seed in targets:
                nursery.start_soon(one, addr, seed)
            while ready < len(targets):
                await trio.sleep(0.05)
            print("READY", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            ru = resource.getrusage(resource.RUSAGE_SELF)
            cpu0, t0 = ru.ru_utime + ru.ru_stime, time.perf_counter()
            go.set()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime - cpu0

    from ingest.cli import _quiet_gc

    _quiet_gc()
    elapsed, cpu_s = trio.run(main)
    print("RESULT " + json.dumps({"latencies": latencies, "elapsed": elapsed, "cpu_s": cpu_s, **counts}), flush=True)


def go_client(go_bin: str, addr: str, seed: int, seconds: float, rate: float) -> subprocess.Popen:
    """A go-waku client process (tests/interop/go, `store-bench`): store v3 as apps page it,
    time windows over the table's span, one new stream per page (go-waku's own requests);
    `rate` > 0: its pages due at Poisson arrivals of `rate` a second."""
    cmd = [go_bin, "store-bench", "--peer", addr, "--cluster-id", "0", "--seconds", str(seconds),
           "--seed", str(seed), "--rate", str(rate), "--pubsub-topics", ",".join(PUBSUB), "--timeout", "60",
           "--start-ns", str(int(BASE_T * 1e9)), "--end-ns", str(int((BASE_T + SPAN_S) * 1e9))]
    for c in CONTENT:  # in popularity order: go-waku's client weighs the i-th 1/(i+1), as here
        cmd += ["--content-topic", c]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=REPO_ROOT)


def client_ready(p: subprocess.Popen, kind: str) -> bool:
    """Whether the client process connected and warmed up (a py client prints READY, a
    go-waku client {"event": "ready"}; either's failure is printed)."""
    if kind != "go":
        line = p.stdout.readline()
        if line.strip() != "READY":
            print(f"a client process did not start: {line!r}", file=sys.stderr)
            return False
        return True
    for line in p.stdout:
        event = json.loads(line)
        if event.get("event") == "ready":
            return True
        if event.get("event") == "summary":
            print(f"go-waku client: {event.get('error')}", file=sys.stderr)
            return False
    return False


def client_result(p: subprocess.Popen, kind: str) -> dict:
    """{latencies (s), elapsed, cpu_s, pages, messages, errors, late, max_lag_s} of one client
    process (and a go-waku client's `starts`)."""
    if kind != "go":
        line = p.stdout.readline()
        if not line.startswith("RESULT "):
            raise SystemExit(f"a client process failed: {line!r}")
        return {"errors": 0, **json.loads(line[len("RESULT "):])}
    for line in p.stdout:
        event = json.loads(line)
        if event.get("event") == "summary":
            if not event.get("ok"):
                raise SystemExit(f"a go-waku client failed: {event.get('error')}")
            return {"latencies": [x / 1000 for x in event["latencies_ms"]], "elapsed": event["elapsed_s"],
                    "cpu_s": event["cpu_s"], "pages": event["pages"], "messages": event["messages"],
                    "errors": event["errors"], "last_error": event.get("last_error"),
                    "late": event.get("late", 0), "max_lag_s": event.get("max_lag_ms", 0) / 1000,
                    # with store-bench --times: each page's due time (unix s)
                    "starts": [x / 1000 for x in event.get("starts_unix_ms") or []]}
    raise SystemExit("a go-waku client exited without a summary")


def server_stats(servers: list[subprocess.Popen]) -> list[dict]:
    """Each server's cumulative view (STATS) since it listens."""
    for server in servers:
        server.stdin.write("STATS\n")
        server.stdin.flush()
    stats = []
    for server in servers:
        line = server.stdout.readline()
        if not line.startswith("STATS "):
            raise SystemExit(f"a store server did not report: {line!r}")
        stats.append(json.loads(line[len("STATS "):]))
    return stats


SERVER_COUNTS = ("cpu_s", "queries", "server_latency_sum_s", "row_groups_read", "rejected")


def summarize_run(rate: float, results: list[dict], before: list[dict], after: list[dict]) -> dict:
    """One run's figures: the clients' pages and latencies (every page sent; open loop: from
    when it was due), and the servers' counts during the run."""
    ms = [x * 1000 for r in results for x in r["latencies"]]
    counts = {k: sum(r[k] for r in results) for k in ("pages", "messages", "errors")}
    # Over every page sent: one that failed (a go-waku client counts it and goes on; a py client's
    # failure ends the run) is missing, +inf.
    latency = latency_summary(ms, len(ms) + counts["errors"], digits=2)
    elapsed = max(r["elapsed"] for r in results)
    client_cpu = sum(r["cpu_s"] for r in results)
    per_server = [{k: round(a.get(k, 0) - b.get(k, 0), 3) for k in SERVER_COUNTS} | {"cache_mb": a.get("cache_mb")}
                  for b, a in zip(before, after, strict=True)]
    server = {k: round(sum(s[k] for s in per_server), 3) for k in SERVER_COUNTS}
    run = {
        "rate_offered": rate or None,
        "seconds": round(elapsed, 1),
        "pages": counts["pages"],
        "messages": counts["messages"],
        "errors": counts["errors"],
        "client_errors_seen": sorted({r["last_error"] for r in results if r.get("last_error")})[:3],
        "pages_per_s": per_second(counts["pages"], elapsed),
        "messages_per_s": per_second(counts["messages"], elapsed),
        "latency_p50_ms": latency.p50,
        "latency_p90_ms": latency.p90,
        "latency_p99_ms": latency.p99,
        "latency_max_ms": latency.max,
        # CPU per page (less sensitive than wall-clock figures to other load on the machine).
        "server_cpu_ms_per_page": round(1000 * server["cpu_s"] / max(1, counts["pages"]), 2),
        "client_cpu_ms_per_page": round(1000 * client_cpu / max(1, counts["pages"]), 2),
        "server_mean_ms": round(1000 * server["server_latency_sum_s"] / max(1, server["queries"]), 2),
        "server": server,
        "per_server": per_server,
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }
    if rate:
        # Pages sent over 1 ms after they were due (the client still waited on the previous
        # answer); their wait is in their latency.
        run["late_pages"] = sum(r.get("late", 0) for r in results)
        run["max_lag_ms"] = round(1000 * max(r.get("max_lag_s", 0) for r in results), 1)
    return run


def shipped_defaults() -> dict[str, int]:
    """The shipped settings the default run uses: conf/pipeline.toml alone (no site file, no
    environment) and Spark's Parquet row group size from conf/spark-defaults.conf."""
    from core.config import load_config

    cfg = load_config(environ={})
    block = 128 * 2**20  # parquet-mr's own default, should the line be gone
    for line in (REPO_ROOT / "conf" / "spark-defaults.conf").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "spark.hadoop.parquet.block.size":
            block = int(parts[1])
    return {"cache_mb": int(cfg.get("store_service.cache_mb")), "preload_mb": int(cfg.get("store_service.preload_mb")),
            "threads": int(cfg.get("store_service.max_concurrent_queries")),
            "target_file_bytes": int(cfg.get("store.optimize_target_file_bytes")), "block_bytes": block}


def main() -> int:
    shipped = shipped_defaults()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200k rows, 15 s")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--layout", choices=("maintained", "compacted"), default="maintained",
                    help="maintained: files and row groups as `maintain` leaves them with the shipped settings "
                         f"({shipped['target_file_bytes'] >> 20} MiB files, {shipped['block_bytes'] >> 20} MiB row "
                         "groups; default); compacted: files of 250,000 rows, row groups of --row-group rows")
    ap.add_argument("--row-group", type=int, default=16_384, help="Parquet row group size (rows; --layout compacted)")
    ap.add_argument("--cache-mb", type=int, default=shipped["cache_mb"],
                    help=f"the reader's cache a server (default: store_service.cache_mb, {shipped['cache_mb']})")
    ap.add_argument("--threads", type=int, default=shipped["threads"],
                    help="store_service.max_concurrent_queries of the server (0: every query inline; default "
                         f"{shipped['threads']})")
    ap.add_argument("--reuse-streams", action="store_true",
                    help="each client keeps one stream for all its pages (default: a new stream per page)")
    ap.add_argument("--preload-mb", type=int, default=shipped["preload_mb"],
                    help="before serving, read the newest row groups into the cache, up to this much "
                         f"(default: store_service.preload_mb, {shipped['preload_mb']}; 0: a cold start)")
    ap.add_argument("--compacted-2g", action="store_true",
                    help="the set-up of the figures before issue 40: --layout compacted --cache-mb 2048 "
                         "--preload-mb 0")
    ap.add_argument("--table", help="the Delta table at this path: reused when it exists, else written there "
                                    "(--rows rows); never deleted")
    ap.add_argument("--keep", action="store_true", help="keep the generated table")
    ap.add_argument("--client-procs", type=int, default=0,
                    help="client processes the clients are spread over (default: one per client)")
    ap.add_argument("--servers", type=int, default=1,
                    help="store server processes on the same table (clients round-robin over them)")
    ap.add_argument("--client", choices=("py", "go"), default="py",
                    help="py: py-libp2p clients, store 2.0.0-beta2, a cursor at a random time (default); "
                         "go: go-waku clients (tests/interop/go, built on first use), store v3 with time "
                         "windows, one process a client")
    ap.add_argument("--rate", default="0",
                    help="pages/s offered by all clients together, open loop (Poisson arrivals, latency from "
                         "when a page is due); a comma-separated list runs each in turn against the same "
                         "servers; 0: closed loop, each client sends its next page when answered (default)")
    ap.add_argument("--warehouse", choices=["local", "s3"], default="local",
                    help="s3: the table on a SeaweedFS S3 gateway started for the run (tools/object_store.py), "
                         "written by the same seeded generator as a local one")
    ap.add_argument("--s3", help=argparse.SUPPRESS)  # a server's object store settings (JSON)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--client-role", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compacted_2g:
        args.layout, args.cache_mb, args.preload_mb = "compacted", 2048, 0
    if args.serve:
        serve(args.serve, args.cache_mb, args.threads, args.preload_mb, args.s3)
        return 0
    if args.client_role:
        spec = json.loads(args.client_role)
        run_clients([tuple(t) for t in spec["targets"]], spec["seconds"], spec["reuse"], spec.get("rate", 0.0))
        return 0
    args.client_procs = args.client_procs or args.clients
    try:
        rates = [float(x) for x in args.rate.split(",")]
    except ValueError:
        ap.error(f"--rate: expected pages/s or a comma-separated list of them, got {args.rate!r}")
    if any(r < 0 or not math.isfinite(r) for r in rates):
        ap.error(f"--rate: pages/s must be 0 or more, got {args.rate!r}")
    rows = args.rows or (200_000 if args.quick else 10_000_000)
    seconds = args.seconds or (15.0 if args.quick else 60.0)

    if args.table and args.warehouse == "s3":
        ap.error("--table: a local table; --warehouse s3 writes its own")
    tmp = None if args.table else tempfile.mkdtemp(prefix="waku-store-bench-")
    path = args.table or os.path.join(tmp, "messages")
    s3 = None
    storage_options = None
    if args.warehouse == "s3":
        from tools.object_store import SeaweedS3

        assert tmp is not None
        s3 = SeaweedS3(os.path.join(tmp, "s3")).start()
        s3.create_bucket("waku")
        path, storage_options = "s3a://waku/messages", s3.settings.storage_options()
    write_s = None
    if s3 is not None or not os.path.exists(os.path.join(path, "_delta_log")):
        print(f"writing {rows:,} messages to {path} ({args.layout} layout)", file=sys.stderr, flush=True)
        if args.layout == "maintained":
            write_s = write_table(path, rows, args.row_group,
                                  maintained=(shipped["target_file_bytes"], shipped["block_bytes"]),
                                  storage_options=storage_options)
        else:
            write_s = write_table(path, rows, args.row_group, storage_options=storage_options)
    else:
        args.layout = "given table"
    from deltalake import DeltaTable

    dt = DeltaTable(path, storage_options=storage_options)
    actual_rows = sum(pa_num for pa_num in __import__("pyarrow").table(dt.get_add_actions(flatten=True))
                      .column("num_records").to_pylist())
    files = len(dt.file_uris())

    go_bin = None
    if args.client == "go":
        built = subprocess.run(["bash", str(REPO_ROOT / "tests/interop/go/build.sh")], capture_output=True, text=True)
        go_bin = built.stdout.strip().splitlines()[-1] if built.stdout.strip() else ""
        if built.returncode != 0 or not os.path.exists(go_bin):
            raise SystemExit(f"cannot build the go-waku client: {go_bin or built.stderr.strip()}")
        args.client_procs = args.clients  # a go-waku node a process
    servers = [subprocess.Popen([sys.executable, __file__, "--serve", path, "--cache-mb", str(args.cache_mb),
                                 "--threads", str(args.threads), "--preload-mb", str(args.preload_mb),
                                 *(["--s3", json.dumps(dataclasses.asdict(s3.settings))] if s3 else [])],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
               for _ in range(args.servers)]
    procs: list[subprocess.Popen] = []
    runs = []
    try:
        addrs = []
        for server in servers:
            line = server.stdout.readline()
            if not line.startswith("LISTEN "):
                raise SystemExit(f"a store server did not start: {line!r}")
            addrs.append(line.split()[1])
        # Clients round-robin over the servers and the client processes.
        targets: list[list] = [[] for _ in range(min(args.client_procs, args.clients))]
        for i in range(args.clients):
            targets[i % len(targets)].append((addrs[i % len(addrs)], 1000 + i))
        for rate in rates:
            print(f"{len(servers)} store server(s); {args.clients} clients in {len(targets)} processes "
                  f"for {seconds:.0f} s, " + (f"{rate:g} pages/s offered" if rate else "closed loop"),
                  file=sys.stderr, flush=True)
            per_client = rate / args.clients
            if args.client == "go":
                procs = [go_client(go_bin, addr, seed, seconds, per_client) for t in targets for addr, seed in t]
            else:
                procs = [subprocess.Popen([sys.executable, __file__, "--client-role", json.dumps(
                             {"targets": t, "seconds": seconds, "reuse": args.reuse_streams, "rate": per_client})],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
                         for t in targets]
            for p in procs:  # every client connected and warmed, then all start at once
                if not client_ready(p, args.client):
                    raise SystemExit("a client process did not start")
            before = server_stats(servers)  # after the clients' connections and warm-up queries
            for p in procs:
                p.stdin.write("GO\n")
                p.stdin.flush()
            results = [client_result(p, args.client) for p in procs]
            for p in procs:
                p.wait(timeout=30)
            after = server_stats(servers)
            runs.append(summarize_run(rate, results, before, after))
            print(f"{runs[-1]['pages']} pages in {runs[-1]['seconds']} s: {runs[-1]['pages_per_s']} pages/s, "
                  f"p50 {runs[-1]['latency_p50_ms']} ms, p99 {runs[-1]['latency_p99_ms']} ms", file=sys.stderr)
        for server in servers:
            server.stdin.close()
            server.wait(timeout=30)
    finally:
        for p in servers + procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if s3 is not None:
            s3.stop()
        if tmp and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    result = {
        "benchmark": "store_query",
        "rows": actual_rows,
        "files": files,
        "layout": args.layout,
        "warehouse": args.warehouse,
        "row_group_rows": args.row_group if args.layout == "compacted" else None,
        "cache_mb": args.cache_mb,
        "write_s": None if write_s is None else round(write_s, 1),
        "clients": args.clients,
        "client_procs": len(targets),
        "servers": args.servers,
        "stream_per_page": not args.reuse_streams,
        "server_threads": args.threads,
        "preload_mb": args.preload_mb,
        "client": args.client,
        "protocol": "v3" if args.client == "go" else "beta2",
        # start-up, apart from the runs: each server's preload and hash index
        "startup": [{k: s.get(k) for k in ("preloaded_row_groups", "preload_s", "hash_index_s")} for s in after],
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    if len(runs) == 1:
        result.update(runs[0])
    else:
        result["runs"] = runs
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
