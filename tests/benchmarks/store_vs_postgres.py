"""Our store against nwaku's PostgreSQL archive, side by side (issue 71): the same rows, the same
store v3 queries, the same number of clients in their own processes, one after the other on this
machine.

    .venv/bin/python tests/benchmarks/store_vs_postgres.py [--quick] [--rows N] [--clients 16]
        [--seconds S] [--rate R[,R2,...]] [--servers K] [--cache-mb MB] [--preload-mb MB]
        [--pg-writers W] [--skip query|ingest|ours-ingest|retention] [--ours-ingest-args "..."]
        [--keep DIR] [--timeline FILE]

1. The rows: `store_query.py`'s generator (8 pubsub topics, 40 content topics of Zipf-like
   popularity, 64-byte payloads, two days of received_time ending now) writes N rows into a Delta
   `messages` table laid out as `maintain` leaves it; the same rows, read back from that table,
   are loaded into nwaku's archive: a PostgreSQL cluster of Debian's server package started in
   the run's directory on loopback (tools/nwaku_postgres.py: nwaku's schema, partitions, indexes
   and SQL), with COPY (loading is set-up, not ingest, and is reported apart).
2. The queries: one plan of store v3 queries, seeded, written as JSON lines and paged by every
   client of both sides in the same order (client i starts at plan entry i): one of the 8 pubsub
   topics, none, one or three content topics (popularity-weighted), forward or backward, page
   size 20 or 100, 80 % in a time window opened (forward) or closed (backward) at a random time,
   20 % of them with include_data false; and 10 % hash lookups of 1-20 stored hashes. Each query
   is followed along its cursor for up to 10 pages.
3. Ours: a store server process (the store service as the bridge mounts it: the Delta reader and
   the libp2p store v3 protocol, shipped settings: `store_query.py --serve`), and C go-waku v0.10.0
   clients (tests/interop/go `store-bench --plan`: go-waku's own store client, a new stream a
   page), each its own process. Theirs: C client processes each holding one connection to
   PostgreSQL (nwaku's pool gives each query worker its own) and issuing nwaku's SQL for the
   same plan entries (psycopg, prepared statements as nwaku prepares them). What theirs leaves
   out: nwaku's libp2p stream, protobuf encoding and Nim code around the SQL; ours carries all
   of it, so their latency is a lower bound of nwaku's.
   Closed loop (each client pages as fast as it is answered), then open loop at each `--rate`
   (pages/s offered by all clients together, Poisson arrivals, latency from when a page was
   due). CPU of each side's server processes (our store server; the postmaster and its
   backends) and of the clients, per page.
4. Ingest: theirs, W writer processes each inserting new messages one row at a time with
   nwaku's InsertRow (messages + messages_lookup, its own connection, autocommit as nwaku's
   pool), closed loop for S seconds: rows/s, insert p50/p99, and stored -> queryable (insert
   sent -> the row answered by a hash lookup on another connection) for one insert in 20.
   Ours: `store_ingest.py` (producers -> Kafka -> the store job -> Delta, and the store
   service's tail answering over libp2p) run as its own benchmark with `--ours-ingest-args`
   (default `--rate 33000 --producers 4`; `--quick`: its --quick): rows/s stored and
   produced -> queryable p99.
5. Retention under load: each side's 16 clients page open loop at half its own closed-loop
   rate while its retention runs: theirs nwaku's time policy (the older day: partitions
   dropped) then its size policy; ours the `maintain` job (`./spark-submit.sh maintain`:
   retention of the older day, compaction, vacuum) with `store.retention_days` 1. Query
   p50/p99 before, during and after each, rows and disk before and after.

The last line is JSON (keys of the issue: ours_p99_ms, postgres_p99_ms, ours_pages_per_s,
postgres_pages_per_s, ours_ingest_per_s, postgres_ingest_per_s, ours_retention_p99_ratio,
postgres_retention_p99_ratio, and the runs behind them).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from tests.benchmarks import store_query as sq  # noqa: E402 - run as a script: the repository joins sys.path first
from tests.benchmarks.stats import latency_summary  # noqa: E402
from tests.benchmarks.stats import rate as per_second  # noqa: E402

HASH_SHARE = 0.10
NODATA_SHARE = 0.20
PLAN_QUERIES = 20_000
TIMELINE: str | None = None  # --timeline


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the plan -------------------------------------------------------------------------------

def make_plan(path: Path, hashes: list[bytes], t0_ns: int, t1_ns: int, seed: int, n: int = PLAN_QUERIES) -> None:
    """`n` store v3 queries as JSON lines (the Go client's planEntry, the pg client's dict)."""
    rnd = random.Random(seed)
    with path.open("w") as f:
        for _ in range(n):
            q: dict = {"forward": rnd.random() < 0.5, "page_size": rnd.choice((20, 20, 100)), "include_data": True,
                       "pubsub_topic": "", "content_topics": [], "start_ns": None, "end_ns": None, "hashes": []}
            if rnd.random() < HASH_SHARE:
                q["hashes"] = ["0x" + h.hex() for h in rnd.sample(hashes, rnd.randint(1, 20))]
                q["page_size"] = 20
            else:
                k = rnd.choice((0, 1, 1, 3))
                q["pubsub_topic"] = rnd.choice(sq.PUBSUB)
                q["content_topics"] = list(dict.fromkeys(rnd.choices(sq.CONTENT, weights=sq.CONTENT_WEIGHTS, k=k)))
                q["include_data"] = rnd.random() >= NODATA_SHARE
                if rnd.random() < 0.8:
                    at = t0_ns + int(rnd.random() * (t1_ns - t0_ns))
                    q["start_ns" if q["forward"] else "end_ns"] = at
            f.write(json.dumps(q) + "\n")


def load_plan(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# --- the PostgreSQL side's processes --------------------------------------------------------

def proc_cpu_s(pids: list[int]) -> float:
    """utime + stime of these processes (Linux /proc; a process gone counts 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def pg_client(spec: dict) -> None:
    """A PostgreSQL client process (`--pg-client`): one connection, the plan from entry `seed`,
    each query along nwaku's cursor for up to 10 pages; READY, then GO on stdin, then RESULT;
    keeps its connection (its backend's CPU countable) until a line on stdin."""
    import psycopg

    from tools import nwaku_postgres as npg

    plan = load_plan(spec["plan"])
    seconds, rate, seed = spec["seconds"], spec.get("rate", 0.0), spec["seed"]
    conn = psycopg.connect(spec["dsn"], autocommit=True)
    position = seed

    def next_query() -> dict:
        nonlocal position
        q = plan[position % len(plan)]
        position += 1
        return q

    def page(q: dict, cursor: bytes | None):
        return npg.query(conn, pubsub_topic=q["pubsub_topic"] or None, content_topics=q["content_topics"],
                         start_ns=q["start_ns"], end_ns=q["end_ns"], cursor_hash=cursor, forward=q["forward"],
                         page_size=q["page_size"], include_data=q["include_data"],
                         hashes=[bytes.fromhex(h[2:]) for h in q["hashes"]])

    page(next_query(), None)  # warm the connection
    print("READY", flush=True)
    sys.stdin.readline()
    latencies: list[float] = []
    starts: list[float] = []
    counts = {"pages": 0, "messages": 0, "errors": 0, "late": 0, "max_lag_s": 0.0}
    arrivals = random.Random(seed + 1_000_003)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru.ru_utime + ru.ru_stime
    t_start = time.perf_counter()
    wall0 = time.time() - t_start
    due = t_start
    end = t_start + seconds

    def next_due() -> float:
        nonlocal due
        if rate <= 0:
            return time.perf_counter()
        due += arrivals.expovariate(rate)
        wait = min(due, end) - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        elif -wait > 0.001:
            counts["late"] += 1
            counts["max_lag_s"] = max(counts["max_lag_s"], -wait)
        return due

    last_error = None
    while time.perf_counter() < end:
        q = next_query()
        cursor = None
        for _ in range(10):
            t0 = next_due()
            if t0 >= end:
                break
            try:
                result = page(q, cursor)
            except (psycopg.Error, npg.NwakuError) as exc:  # counted and reported: a page that failed is missing
                counts["errors"] += 1
                last_error = f"{type(exc).__name__}: {exc}"
                break
            latencies.append(time.perf_counter() - t0)
            starts.append(wall0 + t0)
            counts["pages"] += 1
            counts["messages"] += len(result.rows)
            cursor = result.cursor
            if cursor is None or time.perf_counter() >= end:
                break
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print("RESULT " + json.dumps({"latencies": latencies, "starts": starts, "elapsed": time.perf_counter() - t_start,
                                  "cpu_s": ru.ru_utime + ru.ru_stime - cpu0, "last_error": last_error,
                                  **counts}), flush=True)
    sys.stdin.readline()
    conn.close()


def pg_writer(spec: dict) -> None:
    """A PostgreSQL writer process (`--pg-writer`): nwaku's InsertRow one message at a time on
    its own connection for `seconds` after GO; one insert in 20 then looked up by hash on a
    second connection until answered (stored -> queryable)."""
    import psycopg

    from tools import nwaku_postgres as npg

    rnd = random.Random(spec["seed"])
    conn = psycopg.connect(spec["dsn"], autocommit=True)
    reader = psycopg.connect(spec["dsn"], autocommit=True)
    ct = [c for c in sq.CONTENT]
    t_ns = spec["start_ns"]

    def message(i: int) -> dict:
        payload = rnd.randbytes(sq.PAYLOAD_BYTES)
        return {"message_hash": rnd.randbytes(32), "pubsub_topic": rnd.choice(sq.PUBSUB),
                "content_topic": rnd.choices(ct, weights=sq.CONTENT_WEIGHTS)[0], "payload": payload,
                "version": 0, "timestamp": t_ns + i * 1000 + spec["seed"], "meta": b""}

    npg.insert_row(conn, **message(-1))  # warm: the prepared statement
    print("READY", flush=True)
    sys.stdin.readline()
    inserts: list[float] = []
    visible: list[float] = []
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = ru.ru_utime + ru.ru_stime
    t_start = time.perf_counter()
    end = t_start + spec["seconds"]
    i = 0
    while time.perf_counter() < end:
        m = message(i)
        t0 = time.perf_counter()
        npg.insert_row(conn, **m)
        t1 = time.perf_counter()
        inserts.append(t1 - t0)
        if i % 20 == 0:
            while not npg.query(reader, hashes=[m["message_hash"]], include_data=False, page_size=20).rows:
                pass
            visible.append(time.perf_counter() - t0)
        i += 1
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print("RESULT " + json.dumps({"rows": i, "elapsed": time.perf_counter() - t_start, "inserts": inserts,
                                  "visible": visible, "cpu_s": ru.ru_utime + ru.ru_stime - cpu0}), flush=True)
    sys.stdin.readline()
    conn.close()
    reader.close()


def spawn(role: str, spec: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, role, json.dumps(spec)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)


def ready(p: subprocess.Popen) -> None:
    line = p.stdout.readline()
    if line.strip() != "READY":
        raise SystemExit(f"a client process did not start: {line!r}")


def result_of(p: subprocess.Popen) -> dict:
    line = p.stdout.readline()
    if not line.startswith("RESULT "):
        raise SystemExit(f"a client process failed: {line!r}")
    return json.loads(line[len("RESULT "):])


def run_together(procs: list[subprocess.Popen], pg) -> tuple[list[dict], float]:
    """Start `procs` (pg clients or writers) together once all are READY; their RESULTs and the
    CPU seconds PostgreSQL's processes spent meanwhile (read while their connections are open:
    a backend's CPU goes with it); then BYE, and every process is reaped."""
    try:
        for p in procs:
            ready(p)
        pids = pg.pids()
        cpu0 = proc_cpu_s(pids)
        for p in procs:
            p.stdin.write("GO\n")
            p.stdin.flush()
        results = [result_of(p) for p in procs]
        cpu = proc_cpu_s(pids) - cpu0
        for p in procs:
            p.stdin.write("BYE\n")
            p.stdin.flush()
            p.wait(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return results, cpu


# --- the runs -------------------------------------------------------------------------------

def summarize(rate: float, results: list[dict], server_cpu_s: float) -> dict:
    ms = [x * 1000 for r in results for x in r["latencies"]]
    pages = sum(r["pages"] for r in results)
    errors = sum(r["errors"] for r in results)
    latency = latency_summary(ms, len(ms) + errors, digits=2)
    elapsed = max(r["elapsed"] for r in results)
    run = {
        "rate_offered": rate or None, "seconds": round(elapsed, 1), "pages": pages,
        "messages": sum(r["messages"] for r in results), "errors": errors,
        "errors_seen": sorted({r["last_error"] for r in results if r.get("last_error")})[:3],
        "pages_per_s": per_second(pages, elapsed),
        "latency_p50_ms": latency.p50, "latency_p90_ms": latency.p90, "latency_p99_ms": latency.p99,
        "latency_max_ms": latency.max,
        "server_cpu_ms_per_page": round(1000 * server_cpu_s / max(1, pages), 3),
        "client_cpu_ms_per_page": round(1000 * sum(r["cpu_s"] for r in results) / max(1, pages), 3),
        "server_cores": round(server_cpu_s / max(elapsed, 1e-9), 2),
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }
    if rate:
        run["late_pages"] = sum(r.get("late", 0) for r in results)
        run["max_lag_ms"] = round(1000 * max(r.get("max_lag_s", 0) for r in results), 1)
    return run


def phases(results: list[dict], during: tuple[float, float]) -> dict:
    """Page latency p50/p99 before, during and after the wall-clock window `during`."""
    lo, hi = during
    buckets: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for r in results:
        for start, lat in zip(r["starts"], r["latencies"], strict=True):
            buckets["before" if start < lo else "during" if start <= hi else "after"].append(lat * 1000)
    out = {}
    for name, ms in buckets.items():
        s = latency_summary(ms, len(ms), digits=2)
        out[name] = {"pages": len(ms), "p50_ms": s.p50, "p99_ms": s.p99}
    return out


class Ours:
    """Our store server processes (one by default: one bridge's store service) and go-waku
    clients, round-robin over the servers."""

    def __init__(self, table: str, go_bin: str, plan: Path, clients: int, servers: int = 1,
                 cache_mb: int | None = None, preload_mb: int | None = None) -> None:
        shipped = sq.shipped_defaults()
        cache_mb = shipped["cache_mb"] if cache_mb is None else cache_mb
        preload_mb = shipped["preload_mb"] if preload_mb is None else preload_mb
        self.servers = [subprocess.Popen(
            [sys.executable, sq.__file__, "--serve", table, "--cache-mb", str(cache_mb),
             "--threads", str(shipped["threads"]), "--preload-mb", str(preload_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT) for _ in range(servers)]
        self.addrs = []
        for server in self.servers:
            line = server.stdout.readline()
            if not line.startswith("LISTEN "):
                raise SystemExit(f"our store server did not start: {line!r}")
            self.addrs.append(line.split()[1])
        self.go_bin, self.plan, self.clients = go_bin, plan, clients

    def run(self, seconds: float, rate: float, times: bool = False) -> tuple[dict, list[dict]]:
        per = rate / self.clients
        procs = []
        for i in range(self.clients):
            cmd = [self.go_bin, "store-bench", "--peer", self.addrs[i % len(self.addrs)], "--cluster-id", "0",
                   "--seconds", str(seconds), "--seed", str(i), "--rate", str(per), "--plan", str(self.plan),
                   "--timeout", "60", *(["--times"] if times else [])]
            procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT))
        try:
            for p in procs:
                if not sq.client_ready(p, "go"):
                    raise SystemExit("a go-waku client did not start")
            before = sq.server_stats(self.servers)
            for p in procs:
                p.stdin.write("GO\n")
                p.stdin.flush()
            results = [sq.client_result(p, "go") for p in procs]
            after = sq.server_stats(self.servers)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        cpu = sum(a["cpu_s"] - b["cpu_s"] for a, b in zip(after, before, strict=True))
        return summarize(rate, results, cpu), results

    def stop(self) -> None:
        for server in self.servers:
            if server.poll() is None:
                server.stdin.close()
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()


class Theirs:
    """nwaku's archive: the PostgreSQL cluster and SQL client processes."""

    def __init__(self, server, plan: Path, clients: int) -> None:
        self.server, self.plan, self.clients = server, plan, clients

    def run(self, seconds: float, rate: float, times: bool = False) -> tuple[dict, list[dict]]:
        procs = [spawn("--pg-client", {"dsn": self.server.dsn, "plan": str(self.plan), "seconds": seconds,
                                       "rate": rate / self.clients, "seed": i}) for i in range(self.clients)]
        results, cpu = run_together(procs, self.server)
        return summarize(rate, results, cpu), results


def with_background(side, seconds: float, rate: float, action) -> tuple[dict, dict]:
    """`side`'s clients page open loop at `rate`: a round of `seconds` before `action()` starts
    (in a thread of this process), rounds of `seconds` for as long as it runs, and a round after
    it ended; each page falls in before / during / after by when it was due against the action's
    wall-clock window. The rounds' pages together make the run's figures."""
    import threading

    window: dict = {}

    def act() -> None:
        window["start"] = time.time()
        try:
            window["outcome"] = action()
        finally:
            window["end"] = time.time()

    results: list[dict] = []
    cpu_ms: list[float] = []
    walls: list[float] = []

    def one_round() -> None:
        run, got = side.run(seconds, rate, times=True)
        results.extend(got)
        cpu_ms.append(run["server_cpu_ms_per_page"] * run["pages"])
        walls.append(run["seconds"])

    one_round()  # before
    t = threading.Thread(target=act)
    t.start()
    one_round()
    while t.is_alive():
        one_round()
    t.join()
    one_round()  # after
    rounds = len(walls)
    merged = [{**r, "elapsed": sum(walls)} for r in results]
    total = summarize(rate, merged, sum(cpu_ms) / 1000)
    total["rounds"] = rounds
    total["phases"] = phases(results, (window["start"], window["end"]))
    if TIMELINE:  # --timeline: when each page was due and how long it took, for where a stall falls
        with open(TIMELINE, "a") as fh:
            pages = [[st, la] for r in results for st, la in zip(r["starts"], r["latencies"], strict=True)]
            fh.write(json.dumps({"side": type(side).__name__.lower(), "window": [window["start"], window["end"]],
                                 "pages": pages}) + "\n")
    total["action_s"] = round(window["end"] - window["start"], 1)
    total["action"] = window.get("outcome")
    return total, window


# --- the rows -------------------------------------------------------------------------------

def table_rows(path: str):
    """The Delta table's rows (one pyarrow Table) in the columns nwaku's archive holds."""
    from deltalake import DeltaTable

    cols = ["message_hash", "pubsub_topic", "content_topic", "payload", "version", "timestamp", "meta",
            "received_time"]
    return DeltaTable(path).to_pyarrow_dataset().to_table(columns=cols)


def sample_hashes(path: str, n: int, seed: int) -> list[bytes]:
    from deltalake import DeltaTable

    table = DeltaTable(path).to_pyarrow_dataset().to_table(columns=["message_hash"])
    rnd = random.Random(seed)
    idx = rnd.sample(range(table.num_rows), min(n, table.num_rows))
    col = table.column("message_hash")
    return [col[i].as_py() for i in idx]


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def live_bytes(path: str) -> int:
    """Bytes of the files the table's current snapshot holds."""
    import pyarrow as pa
    from deltalake import DeltaTable

    return sum(pa.table(DeltaTable(path).get_add_actions(flatten=True)).column("size_bytes").to_pylist())


def delta_rows(path: str) -> int:
    import pyarrow as pa
    from deltalake import DeltaTable

    return sum(pa.table(DeltaTable(path).get_add_actions(flatten=True)).column("num_records").to_pylist())


# --- main -----------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100k rows, 4 clients, 8 s runs, store_ingest --quick")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--clients", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--rate", default="", help="open-loop pages/s after the closed-loop run (comma-separated)")
    ap.add_argument("--servers", type=int, default=1,
                    help="our store server processes (default 1: one bridge's store service; K: K bridges)")
    ap.add_argument("--cache-mb", type=int, help="our store service's cache (default: shipped, store_service.cache_mb)")
    ap.add_argument("--preload-mb", type=int, help="its preload (default: shipped, store_service.preload_mb)")
    ap.add_argument("--pg-writers", type=int, default=4, help="nwaku InsertRow writer processes (connections)")
    ap.add_argument("--skip", action="append", default=[], choices=["query", "ingest", "ours-ingest", "retention"],
                    help="leave out a part (repeatable); ours-ingest: store_ingest.py's run only")
    ap.add_argument("--ours-ingest-args", default="--rate 33000 --producers 4",
                    help="store_ingest.py's arguments for our ingest figure")
    ap.add_argument("--keep", help="keep the run's directory here (table, PostgreSQL data)")
    ap.add_argument("--timeline", help="append each retention run's window and every page's (due, latency) here, "
                                       "as JSON lines")
    ap.add_argument("--seed", type=int, default=71)
    ap.add_argument("--pg-client", help=argparse.SUPPRESS)
    ap.add_argument("--pg-writer", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global TIMELINE
    TIMELINE = args.timeline
    if args.pg_client:
        pg_client(json.loads(args.pg_client))
        return 0
    if args.pg_writer:
        pg_writer(json.loads(args.pg_writer))
        return 0

    from tools import nwaku_postgres as npg

    rows = args.rows or (100_000 if args.quick else 10_000_000)
    clients = args.clients or (4 if args.quick else 16)
    seconds = args.seconds or (8.0 if args.quick else 60.0)
    rates = [float(x) for x in args.rate.split(",") if x.strip()]
    print(f"seed {args.seed}", file=sys.stderr)
    load_start = os.getloadavg()
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="waku-store-vs-pg-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o755)  # PostgreSQL runs as its own user (as root: `postgres`), inside it
    table = str(workdir / "wh" / "messages")
    out: dict = {"benchmark": "store_vs_postgres", "rows": rows, "clients": clients, "seconds": seconds,
                 "seed": args.seed}
    ours = theirs = pg = None
    try:
        # -- the rows, both sides
        span_file = workdir / "span.json"  # a kept directory's rows keep their time span
        if span_file.exists():
            end_t = json.loads(span_file.read_text())["end_t"]
        else:
            end_t = math.floor(time.time() / 3600) * 3600 - 60  # two days ending a minute before the hour
            span_file.write_text(json.dumps({"end_t": end_t}))
        base_t = end_t - sq.SPAN_S
        shipped = sq.shipped_defaults()
        if not os.path.exists(os.path.join(table, "_delta_log")):
            log(f"writing {rows:,} rows into {table}")
            out["delta_write_s"] = round(sq.write_table(table, rows, 16_384, base_t=base_t, maintained=(
                shipped["target_file_bytes"], shipped["block_bytes"])), 1)
        log("starting PostgreSQL")
        pg = npg.PostgresServer(workdir / "pg").start()
        out["postgres_version"] = pg.version
        with pg.connect() as conn:
            if not npg.current_version(conn):
                npg.create_schema(conn)
                began = time.monotonic()
                npg.create_partitions(conn, base_t - 3600, end_t + 3 * 3600)
                rows_in = table_rows(table)
                log(f"loading {rows_in.num_rows:,} rows into PostgreSQL (COPY, indexes built after)")
                out["postgres_loaded"] = npg.bulk_load(conn, rows_in)
                del rows_in
                out["postgres_load_s"] = round(time.monotonic() - began, 1)
                log(f"  loaded in {out['postgres_load_s']} s")
            out["postgres_rows"] = npg.messages_count(conn)
        out["delta_rows"] = delta_rows(table)
        out["delta_bytes"] = dir_bytes(table)
        out["postgres_bytes"] = pg.database_bytes()
        plan = workdir / "plan.jsonl"
        make_plan(plan, sample_hashes(table, 20_000, args.seed), int(base_t * 1e9), int(end_t * 1e9), args.seed)

        built = subprocess.run(["bash", str(REPO_ROOT / "tests/interop/go/build.sh")], capture_output=True,
                               text=True)
        go_bin = built.stdout.strip().splitlines()[-1] if built.stdout.strip() else ""
        if built.returncode != 0 or not os.path.exists(go_bin):
            raise SystemExit(f"cannot build the go-waku client: {go_bin or built.stderr.strip()}")

        if "query" not in args.skip or "retention" not in args.skip:
            log("starting our store server")
            ours = Ours(table, go_bin, plan, clients, args.servers, args.cache_mb, args.preload_mb)
            theirs = Theirs(pg, plan, clients)
            out["ours_startup"] = sq.server_stats(ours.servers)
            out["ours_servers"] = args.servers
            out["ours_cache_mb"], out["ours_preload_mb"] = args.cache_mb, args.preload_mb  # None: shipped

        # -- queries
        if "query" not in args.skip:
            out["query"] = {"ours": [], "postgres": []}
            for rate in [0.0, *rates]:
                for name, side in (("ours", ours), ("postgres", theirs)):
                    mode = f"{rate:g} pages/s" if rate else "closed loop"
                    log(f"{name}: {clients} clients, {seconds:.0f} s, {mode}")
                    run, _ = side.run(seconds, rate)
                    out["query"][name].append(run)
                    log(f"  {run['pages_per_s']} pages/s, p50 {run['latency_p50_ms']} ms, "
                        f"p99 {run['latency_p99_ms']} ms,"
                        f" server {run['server_cpu_ms_per_page']} ms CPU a page, errors {run['errors']}")

        # -- ingest
        if "ingest" not in args.skip:
            out["ingest"] = {"postgres": pg_ingest(pg, args.pg_writers, 5.0 if args.quick else 30.0, end_t)}
            log(f"postgres ingest: {out['ingest']['postgres']['rows_per_s']} rows/s")
            if "ours-ingest" not in args.skip:
                out["ingest"]["ours"] = ours_ingest(["--quick"] if args.quick else shlex.split(args.ours_ingest_args))
                log(f"our ingest: {out['ingest']['ours'].get('messages_per_s')} rows/s")

        # -- retention under load
        if "retention" not in args.skip:
            out["retention"] = retention(ours, theirs, pg, table, workdir, seconds * (1.5 if args.quick else 1),
                                         out, base_t, end_t)
    finally:
        if ours is not None:
            ours.stop()
        if pg is not None:
            pg.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    def first(side: str, key: str):
        runs = out.get("query", {}).get(side) or [{}]
        return runs[0].get(key)

    out.update({
        "ours_p99_ms": first("ours", "latency_p99_ms"), "postgres_p99_ms": first("postgres", "latency_p99_ms"),
        "ours_pages_per_s": first("ours", "pages_per_s"), "postgres_pages_per_s": first("postgres", "pages_per_s"),
        "ours_ingest_per_s": out.get("ingest", {}).get("ours", {}).get("messages_per_s"),
        "postgres_ingest_per_s": out.get("ingest", {}).get("postgres", {}).get("rows_per_s"),
        "ours_retention_p99_ratio": out.get("retention", {}).get("ours", {}).get("p99_ratio"),
        "postgres_retention_p99_ratio": out.get("retention", {}).get("postgres", {}).get("p99_ratio"),
        "load_avg": [round(load_start[0], 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(), "python": platform.python_version(),
    })
    print(json.dumps(out))
    return 0


def pg_ingest(pg, writers: int, seconds: float, end_t: float) -> dict:
    """nwaku's InsertRow from `writers` processes, closed loop (messages newer than the table's)."""
    procs = [spawn("--pg-writer", {"dsn": pg.dsn, "seconds": seconds, "seed": 1 + i,
                                   "start_ns": int((end_t + 60) * 1e9)}) for i in range(writers)]
    results, cpu = run_together(procs, pg)
    n = sum(r["rows"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    ins = latency_summary([x * 1000 for r in results for x in r["inserts"]], n, digits=2)
    vis = latency_summary([x * 1000 for r in results for x in r["visible"]],
                          sum(len(r["visible"]) for r in results), digits=2)
    return {"writers": writers, "rows": n, "seconds": round(elapsed, 1), "rows_per_s": per_second(n, elapsed),
            "insert_p50_ms": ins.p50, "insert_p99_ms": ins.p99, "queryable_p50_ms": vis.p50,
            "queryable_p99_ms": vis.p99, "server_cpu_us_per_row": round(1e6 * cpu / max(1, n), 1),
            "client_cpu_us_per_row": round(1e6 * sum(r["cpu_s"] for r in results) / max(1, n), 1),
            "load_avg_1m": round(os.getloadavg()[0], 1)}


def ours_ingest(extra: list[str]) -> dict:
    """store_ingest.py as its own benchmark: its JSON line's throughput and queryable figures."""
    cmd = [sys.executable, str(REPO_ROOT / "tests/benchmarks/store_ingest.py"), *extra]
    log("our ingest: " + " ".join(cmd[1:]))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"store_ingest.py failed ({done.returncode}): {done.stderr[-2000:]}")
    r = json.loads(lines[-1])
    keep = ("offered_per_s", "messages_per_s", "committed_p50_s", "committed_p99_s", "queryable_p50_ms",
            "queryable_p99_ms", "queryable_missing", "missing", "load_avg_start", "load_avg_end")
    return {"command": " ".join(["store_ingest.py", *extra])} | {k: r.get(k) for k in keep}


def retention(ours: Ours, theirs: Theirs, pg, table: str, workdir: Path, seconds: float, out: dict,
              base_t: float, end_t: float) -> dict:
    """Each side's retention while its clients page open loop at half its closed-loop rate."""
    import dataclasses

    from tools import nwaku_postgres as npg

    res: dict = {}
    cut_s = end_t - sq.SPAN_S / 2  # keep the newer day
    runs = out.get("query", {})
    # theirs: nwaku's time retention, then its size retention down to half of what is left
    rate = 0.5 * (runs.get("postgres", [{}])[0].get("pages_per_s") or 50.0)
    before_bytes = pg.database_bytes()
    with pg.connect() as conn:
        before_rows = npg.messages_count(conn)

    def pg_retention() -> dict:
        with pg.connect() as conn:
            t0 = time.monotonic()
            removed_time = npg.apply_time_retention(conn, retention_s=end_t - cut_s, now_s=end_t)
            t1 = time.monotonic()
            target = pg.database_bytes() * 3 // 4
            removed_size = npg.apply_size_retention(conn, max_bytes=target, now_s=end_t)
            return {"time_policy_s": round(t1 - t0, 2), "time_removed": dataclasses.asdict(removed_time),
                    "size_policy_s": round(time.monotonic() - t1, 2), "size_target_bytes": target,
                    "size_removed": dataclasses.asdict(removed_size)}

    log(f"postgres retention under {rate:.0f} pages/s")
    run, _ = with_background(theirs, seconds, rate, pg_retention)
    with pg.connect() as conn:
        after_rows = npg.messages_count(conn)
    run.update(rows_before=before_rows, rows_after=after_rows, bytes_before=before_bytes,
               bytes_after=pg.database_bytes(),
               p99_ratio=ratio(run["phases"]["during"]["p99_ms"], run["phases"]["before"]["p99_ms"]))
    res["postgres"] = run
    log(f"  phases {run['phases']}")

    # ours: the maintain job, retention of the older day, compaction and vacuum
    rate = 0.5 * (runs.get("ours", [{}])[0].get("pages_per_s") or 50.0)
    rows_before, bytes_before, live_before = delta_rows(table), dir_bytes(table), live_bytes(table)
    retention_days = (time.time() - cut_s) / 86_400

    def maintain(*extra: str) -> dict:
        cmd = [str(REPO_ROOT / "spark-submit.sh"), "maintain", "--set", f"warehouse.root={workdir / 'wh'}",
               "--set", f"warehouse.checkpoints={workdir / 'cp'}",
               "--set", f"store.retention_days={retention_days:.6f}",
               *extra]
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
        if done.returncode != 0:
            return {"error": done.stderr[-1500:], "seconds": round(time.monotonic() - t0, 1)}
        return {"seconds": round(time.monotonic() - t0, 1), "report": done.stdout.strip().splitlines()[-3:]}

    log(f"our maintain under {rate:.0f} pages/s")
    run, _ = with_background(ours, seconds, rate, maintain)
    run.update(rows_before=rows_before, rows_after=delta_rows(table), bytes_before=bytes_before,
               live_bytes_before=live_before, live_bytes_after=live_bytes(table), bytes_after=dir_bytes(table),
               p99_ratio=ratio(run["phases"]["during"]["p99_ms"], run["phases"]["before"]["p99_ms"]))
    # The files retention and compaction removed stay on disk for store.vacuum_retain_hours (24 h
    # shipped: readers of older snapshots keep working); a vacuum with no horizon, after the load,
    # shows the disk the policy leaves.
    log("our vacuum with no horizon, after the load")
    run["vacuum_now"] = maintain("--skip", "retention", "--skip", "compact", "--skip", "audit",
                                 "--set", "store.vacuum_retain_hours=0")
    run["bytes_after_vacuum"] = dir_bytes(table)
    res["ours"] = run
    log(f"  phases {run['phases']}")
    return res


def ratio(a, b):
    return None if a is None or b is None or b == 0 else round(a / b, 2)


if __name__ == "__main__":
    sys.exit(main())
