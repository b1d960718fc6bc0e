"""Capacity at saturation, ours against go-waku v0.10.0's own node: for each service, the highest
offered rate a node holds with p99 <= 100 ms and nothing missing (issue 70).

    flock /tmp/bench.lock .venv/bin/python tests/benchmarks/capacity.py [--quick]
        [--sides gowaku,ours] [--services relay,filter,store,lightpush]
        [--relay-rates 250,500,...] [--filter-rates ...] [--store-rates ...] [--lightpush-rates ...]
        [--clients 20] [--fanout 1] [--keep-streams] [--connect-rate 50] [--store-clients 16]
        [--lightpush-clients 20] [--warm S] [--window S] [--keep]
        [--soak S [--soak-scale X] [--soak-round 600] [--soak-maintain-every 600] [--soak-retention 900]
         [--soak-plot docs/img/soak.png]]

The nodes, clients and CPU accounting are side_by_side.py's (its docstring: how each node is
started, the go-waku harness .cache/interop/wakuinterop, every kind of client in its own
process). Each side runs alone on this machine, one after the other; on each, every service's
ladder: the offered rate rises step by step, each step held `--warm` s (its figures reported
apart: warm-up) and then measured for `--window` s. A step is **held** when every unit offered
in the window was served (missing 0, no error) and its p99 is <= `--p99-ms` (100); the ladder
stops at the first step not held. A service's **capacity** is what the node *processed* per
second at its highest held step (stored/s, pushes delivered/s, pages answered/s, pushes
acknowledged and stored/s), never the offered rate; its CPU per unit is the CPU seconds of every
process of the node in that window over the units processed in it.

- **relay**: a go-waku relay publisher at the step's rate on one content topic and
  `store-probe` asking for the newest page every 20 ms: p99 of stored -> queryable (first returned
  by a store query - message timestamp) over every message of the window (side_by_side's
  queryable phase).
- **filter**: `filter-many` go-waku light clients (`--clients`, each its own node, started
  `--connect-rate` a second) on `--clients / --fanout` content topics (each message is pushed to
  `--fanout` clients) and a relay publisher rotating over the topics; push latency = client
  receipt - message timestamp, over every (message, subscribed client) pair offered
  (side_by_side's filter phase; at most 100 clients a process). The clients read pushes as
  go-waku's light client does (one push a stream), or with `--keep-streams` as nwaku's and
  js-waku's do (every push of a stream until the service ends it; go-waku's subscribe, ping and
  unsubscribe). go-waku's node holds 20
  filter subscribers (DefaultMaxSubscribers; raised to `--clients` through the
  GOWAKU_FILTER_MAX_SUBSCRIBERS its build adds, tests/interop/gowaku-node/build.sh) and answers
  one filter request a second a peer: each of its filter steps gets a node of its own. go-waku's
  light client takes at most 15 pushes/s per peer, which caps a step at 15 x clients / fanout
  msg/s (not with `--keep-streams`: the light node's limiter is bypassed with its handler).
- **store**: `--store-clients` `store-bench` clients, open loop (Poisson arrivals at the step's
  rate over all clients, latency from when each page was due: no coordinated omission), random
  store queries over what the relay and filter ladders stored (go-waku: the legacy store, all it
  serves; ours: store v3).
- **lightpush**: `--lightpush-clients` go-waku lightpush clients (v2, what v0.10.0 speaks), open
  loop at rate / clients each, latency from when each push was due to its answer; a unit counts
  when acknowledged OK and, at the end, the node's store grew by every acknowledged push. A
  go-waku relay peer (`stay`) is in the node's mesh for the ladder: go-waku refuses a lightpush
  with no relay peer to publish to. go-waku's lightpush service answers one request a second a
  client peer (v0.10.0's `WithRateLimiter(1, 1)`, not a flag of `cmd/waku`): its capacity is at
  most one push/s per client, which this benchmark reports as it is.

`--soak S`: instead of the ladders, our stack for S s with every service loaded at once, maintain
on a schedule, RSS, open files and disk sampled (tests/benchmarks/capacity_soak.py).

Not measured here (issue 70 asks for them): the store on 10M rows, several bridges.

The last line is JSON: per side and service the ladder, and the flat keys
`ours_<service>_capacity`, `gowaku_<service>_capacity`, `ours_<service>_cpu_per_unit_ms`,
`gowaku_<service>_cpu_per_unit_ms` for relay, filter, store and lightpush.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from core.config import load_config  # noqa: E402
from tests.benchmarks.relay_flat_out import GO_BIN, load1  # noqa: E402
from tests.benchmarks.side_by_side import (  # noqa: E402
    FILTER_PUSH_LIMIT,
    GoClient,
    Side,
    common,
    cpu_delta,
    phase_filter,
    phase_queryable,
    phase_store,
    say,
    start_gowaku,
    start_ours,
    wait_stored,
)
from tests.benchmarks.stats import latency_summary, rate  # noqa: E402

SERVICES = ("relay", "filter", "store", "lightpush")
UNITS = {"relay": "stored/s", "filter": "pushes/s", "store": "pages/s", "lightpush": "pushes/s"}
LADDERS = {  # offered rates (per second) of the full run and of --quick
    "relay": ([250, 500, 1000, 2000, 4000, 8000], [100, 400]),
    "filter": ([20, 60, 150, 300], [40, 200]),
    "store": ([50, 100, 200, 400, 800, 1600], [50, 200]),
    "lightpush": ([5, 10, 20, 50, 100, 200, 400], [5, 20]),
}


def phase_lightpush(side: Side, msg_rate: float, clients: int, warm: float, window: float,
                    ours_still_s: float) -> dict:
    """`clients` go-waku lightpush clients at msg_rate / clients each, open loop; our store has
    settled after `ours_still_s` without growth (it commits a trickle every
    store.max_trigger_delay_s), go-waku's SQLite at once."""
    per = msg_rate / clients
    seconds = warm + window + 5
    still = ours_still_s if side.name == "ours" else 3.0
    stored0, _ = wait_stored(side, float("inf"), 300, still_s=still)
    procs = [GoClient(["lightpush", *common(side), "--content-topic", f"/cap/1/lp{j}/proto", "--rate", f"{per:.6f}",
                       "--count", str(max(1, math.ceil(per * seconds))), "--quiet", "--payload-size", "256",
                       "--timeout", "60", "--prefix", f"cap-lp-{int(msg_rate)}-{j}"],
                      side.tmp / f"lightpush-{int(msg_rate)}-{j}.log") for j in range(clients)]
    try:
        for p in procs:
            p.wait_event("connected", 120)
        ws = time.time() + warm
        time.sleep(warm)
        c0 = side.cpu_by_process()
        time.sleep(window)
        c1 = side.cpu_by_process()
        we = time.time()
        sums = [p.finish(seconds + 120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    lat: list[float] = []
    offered = ok = 0
    first_error = None
    acked = 0
    for s in sums:
        start = (s.get("start_unix_ms") or 0) / 1000
        acked += sum(1 for st in s.get("statuses", []) if str(st).startswith("OK"))
        for i, (ms, st) in enumerate(zip(s.get("latencies_ms", []), s.get("statuses", []), strict=False)):
            if ws <= start + i / per < we:
                offered += 1
                if str(st).startswith("OK"):
                    ok += 1
                    lat.append(ms)
                elif first_error is None:
                    first_error = st
        if s.get("error") and first_error is None:
            first_error = s.get("error")
    n, _ = wait_stored(side, stored0 + acked, 300, still_s=still)
    x = latency_summary(lat, offered, digits=1)
    cpu = cpu_delta(c0, c1)
    cpu_s = sum(cpu.values())
    return {
        "rate": msg_rate, "clients": clients, "window_s": round(we - ws, 1), "offered": offered, "acknowledged": ok,
        "missing": offered - ok, "first_error": first_error, "acknowledged_total": acked,
        "stored_total": n - stored0, "not_stored": max(0, acked - (n - stored0)),
        "p50_ms": x.p50, "p99_ms": x.p99, "max_ms": x.max,
        "processed_per_s": rate(ok, we - ws), "cpu_s": round(cpu_s, 2), "cpu_by_process_s": cpu,
        "cores": round(cpu_s / (we - ws), 3), "cpu_ms_per_unit": round(cpu_s * 1000 / ok, 3) if ok else None,
    }


def step(side: Side, service: str, r: float, args: argparse.Namespace, since_ns: int) -> dict:
    """One step of a ladder: {processed_per_s, p99_ms, missing, cpu_ms_per_unit, ...}."""
    if service == "relay":
        q = phase_queryable(side, r, args.warm, args.window)
        done = q["offered"] - (q["missing"] or 0)
        return {**q, "p99_ms": q["queryable_p99_ms"], "processed_per_s": rate(done, q["window_s"]),
                "cpu_ms_per_unit": round(q["cpu_s"] * 1000 / done, 3) if done else None}
    if service == "filter":
        f = phase_filter(side, r, args.clients, args.warm, args.window, fanout=args.fanout,
                         keep_streams=args.keep_streams, connect_rate=args.connect_rate)
        return {**f, "p99_ms": f["push_p99_ms"], "processed_per_s": rate(f["delivered"], f["window_s"]),
                "cpu_ms_per_unit": f["cpu_ms_per_push"],
                "missing": (f["missing"] or 0) + (1 if f.get("clients_failed") else 0)}
    if service == "store":
        s = phase_store(side, args.store_clients, args.window, since_ns, time.time_ns(), pages_per_s=r)
        # pages answered over the clients' run (phase_store's pages_per_s also counts the clients' exit)
        return {**s, "p99_ms": s["query_p99_ms"], "processed_per_s": rate(s["pages"], args.window),
                "missing": s["errors"], "cpu_ms_per_unit": s["cpu_ms_per_page"],
                "cores": round(s["cpu_s"] / args.window, 3)}
    lp = phase_lightpush(side, r, args.lightpush_clients, args.warm, args.window, args.ours_still_s)
    return {**lp, "missing": lp["missing"] + lp["not_stored"]}


def held(s: dict, p99_ms: float) -> bool:
    return not s.get("error") and s.get("missing") == 0 and s.get("p99_ms") is not None and s["p99_ms"] <= p99_ms


def ladder(name: str, service: str, side_box: list[Side], args: argparse.Namespace, since_ns: int,
           restart: Callable[[], Side] | None) -> dict:
    steps: list[dict] = []
    best: dict | None = None
    for i, r in enumerate(args.rates[service]):
        if restart is not None and i:  # go-waku's filter: a node a step (20 subscribers, 1 request/s a peer)
            side_box[0].stop()
            side_box[0] = restart()
        say(f"{name} {service}: offering {r:g}/s (load {load1():.1f})")
        try:
            s = step(side_box[0], service, r, args, since_ns)
        except Exception as exc:  # noqa: BLE001 - a step that fails ends the ladder; reported
            s = {"rate": r, "error": str(exc)[:500]}
        s["held"] = held(s, args.p99_ms)
        s["load_avg_1m"] = round(load1(), 1)
        steps.append(s)
        say(f"{name} {service} {r:g}/s: processed {s.get('processed_per_s')} {UNITS[service]}, "
            f"p99 {s.get('p99_ms')} ms, "
            f"missing {s.get('missing')}, {s.get('cpu_ms_per_unit')} CPU ms a unit, cores {s.get('cores')}"
            + (f", error {s['error']}" if s.get("error") else "") + ("" if s["held"] else "  -> not held"))
        if not s["held"]:
            break
        best = s
    return {"unit": UNITS[service], "steps": steps,
            "capacity": best["processed_per_s"] if best else None,
            "capacity_offered": best["rate"] if best else None,
            "cpu_ms_per_unit": best.get("cpu_ms_per_unit") if best else None,
            "cores_at_capacity": best.get("cores") if best else None,
            "cpu_by_process_s_at_capacity": best.get("cpu_by_process_s") if best else None,
            "stopped_at": steps[-1]["rate"] if steps and not steps[-1]["held"] else None,
            "top_of_ladder_held": bool(steps) and steps[-1]["held"] and len(steps) == len(args.rates[service])}


def wait_for_filter_query(log: Path, timeout: float = 900.0) -> float:
    """Seconds until our filter job's query has started (a message relayed before it is never
    pushed: the real-time query starts at the topic's end)."""
    began = time.monotonic()
    while "filter query started" not in (log.read_text(errors="replace") if log.exists() else ""):
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"our filter query did not start in {timeout:.0f} s ({log})")
        time.sleep(0.5)
    return time.monotonic() - began


def run_side(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    say(f"{name}: starting (load {load1():.1f})")
    counter = [0]

    # go-waku's filter service holds 20 subscribers unless its limit is raised
    limit = args.clients if args.clients > 20 else None

    def fresh() -> Side:
        counter[0] += 1
        d = tmp / f"node{counter[0]}"
        d.mkdir()
        return start_gowaku(d, limit)

    side = start_gowaku(tmp, limit) if name == "gowaku" else start_ours(tmp, args.overrides)
    box = [side]
    out: dict = {"startup_s": round(side.startup_s, 1), **side.extra}
    if name == "ours" and "filter" in args.services:  # up = the store job's table; the filter query comes later
        out["filter_query_after_s"] = round(wait_for_filter_query(tmp / "var" / "filter-job.log"), 1)
    since = time.time_ns()
    relay_peer: GoClient | None = None
    try:
        say(f"{name}: up in {side.startup_s:.1f} s at {side.addr}; settling {args.settle:.0f} s")
        time.sleep(args.settle)
        for service in args.services:
            if service == "lightpush":  # a relay peer in the node's mesh (go-waku refuses to publish without)
                relay_peer = GoClient(["stay", *common(box[0]), "--seconds", "100000", "--timeout", "120"],
                                      tmp / "relay-peer.log")
                relay_peer.wait_event("connected", 120)
                time.sleep(3)
            restart = fresh if (name == "gowaku" and service == "filter") else None
            out[service] = ladder(name, service, box, args, since, restart)
    finally:
        if relay_peer is not None:
            relay_peer.kill()
        box[0].stop()
    return out


def headline(result: dict) -> dict:
    out: dict = {}
    for side, prefix in (("gowaku", "gowaku_"), ("ours", "ours_")):
        r = result.get(side) or {}
        for service in SERVICES:
            lad = r.get(service) or {}
            out[f"{prefix}{service}_capacity"] = lad.get("capacity")
            out[f"{prefix}{service}_cpu_per_unit_ms"] = lad.get("cpu_ms_per_unit")
    for service in SERVICES:
        o, g = out.get(f"ours_{service}_capacity"), out.get(f"gowaku_{service}_capacity")
        out[f"{service}_capacity_ratio"] = round(o / g, 2) if o and g else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two steps a service, short windows: a few minutes a side")
    parser.add_argument("--sides", default="gowaku,ours")
    parser.add_argument("--services", default=",".join(SERVICES))
    for s in SERVICES:
        parser.add_argument(f"--{s}-rates", default=None, help=f"offered rates of the {s} ladder (per second)")
    parser.add_argument("--clients", type=int, default=20, help="filter light clients")
    parser.add_argument("--fanout", type=int, default=1,
                        help="filter: clients a message is pushed to (clients / fanout content topics)")
    parser.add_argument("--connect-rate", type=float, default=50.0,
                        help="filter: light clients started (dial, subscribe) a second; 0: all at once")
    parser.add_argument("--keep-streams", action="store_true",
                        help="filter: clients read every push of a stream (nwaku, js-waku) instead of one a "
                             "stream (go-waku's light client)")
    parser.add_argument("--store-clients", type=int, default=16)
    parser.add_argument("--lightpush-clients", type=int, default=None, help="default 20 (quick: 5)")
    parser.add_argument("--warm", type=float, default=None, help="warm-up seconds of each step (reported apart)")
    parser.add_argument("--window", type=float, default=None, help="measured seconds of each step")
    parser.add_argument("--settle", type=float, default=None, help="seconds after start-up before the first ladder")
    parser.add_argument("--p99-ms", type=float, default=100.0, help="a step is held with p99 at most this")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="extra local_run --set k=v for our stack")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories (logs)")
    parser.add_argument("--soak", type=float, default=0.0, metavar="S",
                        help="instead of the ladders: our stack for S s with every service loaded at once "
                             "(tests/benchmarks/capacity_soak.py)")
    parser.add_argument("--soak-scale", type=float, default=1.0,
                        help="soak: each service at this x 70 %% of its measured capacity")
    parser.add_argument("--soak-round", type=float, default=600.0, help="soak: seconds a round (p99 per round)")
    parser.add_argument("--soak-maintain-every", type=float, default=600.0,
                        help="soak: ./spark-submit.sh maintain every this many seconds")
    parser.add_argument("--soak-retention", type=float, default=900.0,
                        help="soak: store retention (seconds) of the maintain runs")
    parser.add_argument("--soak-plot", default=None, metavar="PNG", help="soak: write the plot here")
    args = parser.parse_args()
    q = args.quick
    args.services = [s for s in args.services.split(",") if s]
    bad = [s for s in args.services if s not in SERVICES]
    if bad:
        parser.error(f"unknown services {bad}: choose from {','.join(SERVICES)}")
    args.rates = {}
    for s in SERVICES:
        given = getattr(args, f"{s}_rates")
        ladder_rates = given.split(",") if given else LADDERS[s][1 if q else 0]
        args.rates[s] = [float(x) for x in ladder_rates if x != ""]
    for name, full, quick in [("warm", 60.0, 5.0), ("window", 60.0, 10.0), ("settle", 20.0, 5.0),
                              ("lightpush_clients", 20, 5)]:
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    # our store job commits a trickle every store.max_trigger_delay_s: settled = that and 5 s still
    args.ours_still_s = float(load_config(args.overrides).get("store.max_trigger_delay_s")) + 5.0
    if args.fanout < 1 or args.clients % args.fanout:
        parser.error(f"--fanout {args.fanout} must divide --clients {args.clients}")
    too_fast = [r for r in args.rates["filter"] if r * args.fanout / args.clients > FILTER_PUSH_LIMIT]
    if too_fast and not args.keep_streams:
        parser.error(f"filter rates {too_fast} over {args.clients} clients: more than go-waku's light client's "
                     f"{FILTER_PUSH_LIMIT:g} pushes/s a peer")
    if not GO_BIN.exists():
        print(f"{GO_BIN} missing: bash tests/interop/go/build.sh", file=sys.stderr)
        return 2
    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": q, "cores": os.cpu_count(),
                    "p99_goal_ms": args.p99_ms, "warm_s": args.warm, "window_s": args.window,
                    "rates": args.rates, "clients": args.clients, "fanout": args.fanout,
                    "keep_streams": args.keep_streams, "connect_rate": args.connect_rate,
                    "store_clients": args.store_clients, "lightpush_clients": args.lightpush_clients,
                    "overrides": args.overrides}
    if args.soak > 0:
        from tests.benchmarks.capacity_soak import run_soak
        tmp = Path(tempfile.mkdtemp(prefix="capacity-soak-"))
        code = 0
        try:
            result["soak"] = run_soak(args, tmp)
            result["soak"]["load_avg_1m_end"] = round(load1(), 1)
            summary = result["soak"]["summary"]
            say(f"soak: {summary}")
            code = 0 if not (summary["lost"] or summary["duplicated"] or summary["pushes_missing"]) else 1
        except Exception as exc:  # noqa: BLE001 - reported in the JSON
            say(f"soak: failed: {exc} (logs in {tmp})")
            result["soak"] = {"error": str(exc)[:2000]}
            args.keep, code = True, 1
        finally:
            if args.keep:
                say(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps(result), flush=True)
        return code
    for name in [s.strip() for s in args.sides.split(",") if s.strip()]:
        tmp = Path(tempfile.mkdtemp(prefix=f"capacity-{name}-"))
        try:
            result[name] = run_side(name, args, tmp)
            result[name]["load_avg_1m_end"] = round(load1(), 1)
        except Exception as exc:  # noqa: BLE001 - the other side still runs; reported in the JSON
            say(f"{name}: failed: {exc} (logs in {tmp})")
            result[name] = {"error": str(exc)[:2000]}
            args.keep = True
        finally:
            if args.keep:
                say(f"kept {tmp}")
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    result.update(headline(result))
    for service in args.services:
        say(f"{service}: " + ", ".join(f"{side} {result.get(f'{side}_{service}_capacity')} {UNITS[service]} "
                                      f"({result.get(f'{side}_{service}_cpu_per_unit_ms')} CPU ms a unit)"
                                      for side in ("gowaku", "ours") if side in result))
    print(json.dumps(result), flush=True)
    return 0 if all("error" not in result.get(s, {}) for s in ("gowaku", "ours") if s in result) else 1


if __name__ == "__main__":
    sys.exit(main())
