"""`capacity.py --soak S`: our stack for S seconds with every service loaded at once (issue 70).

Relay in, filter, store queries and lightpush run together, each at `--soak-scale` x 70 % of its
measured capacity (SOAK_CAPACITY: docs/benchmarks.md, capacity), in rounds of `--soak-round`
seconds (600: the p99 per 10 minutes); each round starts its clients afresh (go-waku clients in
their own processes, as capacity.py's ladders), so light clients also come and go every round.
`./spark-submit.sh maintain` runs every `--soak-maintain-every` seconds with the stack's settings
and a retention of `--soak-retention` seconds (vacuum keeping removed files 0.1 h), so retention,
compaction and vacuum run under the load. Every minute: RSS and open files of every process of
the stack, the warehouse's and the broker's disk.

At the end (the store settled): every message the clients had accepted (relay publishes, filter
publishes, lightpushes answered OK) that no retention run could have deleted is in the Delta
store exactly once; one received before a retention run's cutoff is gone. Pushes: every
(message, subscribed client) pair of every round delivered. Trends: RSS and open files per
process, as a least-squares slope over the samples after the first round (per hour).

The JSON (capacity.py's last line) carries `soak`: rounds, maintain runs, samples, accounting.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from tests.benchmarks.side_by_side import (
    GoClient,
    Side,
    _merged,
    common,
    cpu_delta,
    process_groups,
    say,
    start_filter_many,
    start_ours,
    wait_stored,
)
from tests.benchmarks.stats import latency_summary, rate
from tools.processes import group_pids

REPO_ROOT = Path(__file__).resolve().parents[2]

# Ours, the highest held steps of docs/benchmarks.md's capacity section (2026-12-03/04, 2 cores):
# relay stored/s; filter pushes/s to 100 kept-stream clients at fan-out 10; store pages/s at 16
# clients; lightpush pushes/s acknowledged and stored (the ladder's top).
SOAK_CAPACITY = {"relay": 1000.0, "filter": 4000.0, "store": 195.0, "lightpush": 200.0}
SOAK_SHARE = 0.7
FILTER_CLIENTS, FILTER_FANOUT = 100, 10
STORE_CLIENTS, LIGHTPUSH_CLIENTS = 16, 10
RETENTION_BAND_S = 10.0  # either side of a retention cutoff: present or deleted, both fine


def soak_rates(scale: float) -> dict[str, float]:
    """Offered rate of each service: `scale` x 70 % of its capacity (filter: messages a second,
    each pushed to FILTER_FANOUT clients)."""
    r = {k: round(v * SOAK_SHARE * scale, 3) for k, v in SOAK_CAPACITY.items()}
    r["filter_messages"] = round(r["filter"] / FILTER_FANOUT, 3)
    return r


def _rss_and_fds(pids: list[int]) -> tuple[float, int]:
    rss, fds = 0.0, 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1]) / 1024
            fds += len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            continue
    return round(rss, 1), fds


def _du_mb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return round(total / 2**20, 1)


def _members(root: int) -> dict[str, list[int]]:
    """{process name: pids} of the stack (side_by_side's names: bridge, broker, <job> job)."""
    out: dict[str, list[int]] = {}
    for pgid, name in process_groups(root).items():
        out.setdefault(name, []).extend(group_pids(pgid))
    return out


class Sampler(threading.Thread):
    """Every `every` s: RSS (MiB) and open files of each named process of the stack, disk (MiB)."""

    def __init__(self, side: Side, every: float) -> None:
        super().__init__(daemon=True)
        self.side, self.every = side, every
        self.samples: list[dict] = []
        self.stop_event = threading.Event()

    def sample(self) -> None:
        row: dict = {"t": round(time.time(), 1), "processes": {}}
        for name, pids in _members(self.side.root_pid).items():
            if name.startswith("maintain"):
                continue  # a batch run: not a process of the stack that should stay flat
            rss, fds = _rss_and_fds(pids)
            row["processes"][name] = {"rss_mb": rss, "fds": fds, "pids": len(pids)}
        row["warehouse_mb"] = _du_mb(self.side.tmp / "warehouse")
        row["kafka_mb"] = _du_mb(self.side.tmp / "kafka")
        self.samples.append(row)

    def run(self) -> None:
        while not self.stop_event.wait(self.every):
            self.sample()


class Maintainer(threading.Thread):
    """`./spark-submit.sh maintain` with the stack's settings every `every` s (the first after
    `every`), one run at a time."""

    def __init__(self, side: Side, every: float, extra: list[str]) -> None:
        super().__init__(daemon=True)
        self.side, self.every, self.extra = side, every, extra
        self.runs: list[dict] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(self.every):
            argv = [str(REPO_ROOT / "spark-submit.sh"), "maintain"]
            for o in [*self.side.overrides, *self.extra]:
                argv += ["--set", o]
            log = self.side.tmp / f"maintain-{len(self.runs)}.log"
            began = time.time()
            with log.open("w") as out:
                rc = subprocess.call(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            ended = time.time()
            text = log.read_text(errors="replace")
            report = next((ln for ln in text.splitlines() if "deleted_by_age" in ln), "")
            m = re.search(r"retention: deleting messages received before ([0-9.]+)", text)
            self.runs.append({"start": round(began, 1), "end": round(ended, 1), "seconds": round(ended - began, 1),
                              "rc": rc, "cutoff": float(m.group(1)) if m else None, "report": report[-600:]})
            say(f"soak: maintain run {len(self.runs)}: rc {rc}, {ended - began:.0f} s")


def _round(side: Side, k: int, seconds: float, rates: dict[str, float], since_ns: int) -> dict:
    """One round: every client started, `seconds` of load, every client finished."""
    tag = f"soak{k}"
    d = side.tmp / tag
    d.mkdir()
    topics = [f"/soak/1/f{j}/proto" for j in range(FILTER_CLIENTS // FILTER_FANOUT)]
    fms = start_filter_many(side, topics, FILTER_CLIENTS, seconds + 25, lambda i: d / f"filter-clients{i}.log",
                            keep_streams=True, connect_rate=50.0)
    for fm in fms:
        fm.wait_event("ready", 240)
    relay_ct = ["--content-topic", "/soak/1/relay/proto"]
    probe = GoClient(["store-probe", *common(side), *relay_ct, "--interval-ms", "100", "--timeout", "30",
                      "--seconds", str(seconds + 20)], d / "probe.log")
    probe.wait_event("ready", 120)
    round_start = time.time()
    relay = GoClient(["relay-publish", *common(side), *relay_ct, "--rate", str(rates["relay"]), "--seconds",
                      str(seconds), "--linger", "2", "--timeout", "120", "--payload-size", "256"], d / "relay.log")
    fpub = GoClient(["relay-publish", *common(side), *[a for t in topics for a in ("--content-topic", t)],
                     "--rotate-content-topics", "--rate", str(rates["filter_messages"]), "--seconds", str(seconds),
                     "--linger", "2", "--timeout", "120"], d / "filter-publisher.log")
    per = rates["lightpush"] / LIGHTPUSH_CLIENTS
    lps = [GoClient(["lightpush", *common(side), "--content-topic", f"/soak/1/lp{j}/proto", "--rate", f"{per:.6f}",
                     "--count", str(max(1, math.ceil(per * seconds))), "--quiet", "--payload-size", "256",
                     "--timeout", str(seconds + 120), "--prefix", f"{tag}-lp{j}"], d / f"lightpush{j}.log")
           for j in range(LIGHTPUSH_CLIENTS)]
    store_topics = ["/soak/1/relay/proto", *topics[:4], "/soak/1/lp0/proto"]
    sb = [GoClient(["store-bench", *common(side), *[a for t in store_topics for a in ("--content-topic", t)],
                    "--seconds", str(seconds - 5), "--seed", str(k * 100 + i + 1), "--start-ns", str(since_ns),
                    "--end-ns", str(time.time_ns()), "--timeout", "60",
                    "--rate", f"{rates['store'] / STORE_CLIENTS:.6f}"], d / f"store{i}.log", stdin=True)
          for i in range(STORE_CLIENTS)]
    everyone = [relay, fpub, probe, *fms, *lps, *sb]
    try:
        for p in sb:
            p.wait_event("ready", 180)
        for p in sb:
            assert p.proc.stdin is not None
            p.proc.stdin.write("go\n")
            p.proc.stdin.flush()
        c0 = side.cpu_by_process()
        time.sleep(max(0.0, round_start + seconds - time.time()))
        c1 = side.cpu_by_process()
        round_end = time.time()
        relay.finish(120)
        fpub.finish(120)
        lp_sums = [p.finish(240) for p in lps]
        sb_sums = [p.finish(120) for p in sb]
        fsum = _merged([fm.finish(120) for fm in fms])
        psum = probe.finish(60)
    finally:
        for p in everyone:
            p.kill()
    # filter: every (message, client) pair of the round
    recv: dict[str, list[int]] = {}
    for h, _ts, rt, *_client in fsum.get("receipts", []):
        recv.setdefault(h, []).append(rt)
    push_lat = []
    pairs = 0
    for h, ts in fpub.publishes:
        got = recv.get(h, [])[:FILTER_FANOUT]
        pairs += FILTER_FANOUT
        push_lat += [(rt - ts) / 1e6 for rt in got]
    f = latency_summary(push_lat, pairs, digits=1)
    # relay: stored -> queryable (the probe's first sight)
    seen = {h: at for h, _ts, at in psum.get("seen", [])}
    q = latency_summary([(seen[h] - ts) / 1e6 for h, ts in relay.publishes if h in seen], len(relay.publishes),
                        digits=1)
    # store pages
    s_lat = [x for s in sb_sums for x in s.get("latencies_ms", [])]
    s_err = sum(int(s.get("errors") or 0) for s in sb_sums)
    s = latency_summary(s_lat, len(s_lat) + s_err, digits=1)
    # lightpush answers
    lp_lat, lp_ok, lp_offered, lp_hashes, first_error = [], 0, 0, [], None
    for ls in lp_sums:
        start = (ls.get("start_unix_ms") or 0) / 1000
        for i, (ms, st, h) in enumerate(zip(ls.get("latencies_ms", []), ls.get("statuses", []),
                                            ls.get("hashes", []), strict=False)):
            lp_offered += 1
            if str(st).startswith("OK"):
                lp_ok += 1
                lp_lat.append(ms)
                lp_hashes.append((h, int((start + i / per) * 1e9)))
            elif first_error is None:
                first_error = st
    lp = latency_summary(lp_lat, lp_offered, digits=1)
    cpu = cpu_delta(c0, c1)
    window = round_end - round_start
    out = {
        "round": k, "start": round(round_start, 1), "seconds": round(window, 1),
        "relay": {"published": len(relay.publishes), "queryable_missing": q.missing, "queryable_p50_ms": q.p50,
                  "queryable_p99_ms": q.p99, "per_s": rate(len(relay.publishes), window)},
        "filter": {"published": len(fpub.publishes), "pairs": pairs, "delivered": f.delivered, "missing": f.missing,
                   "duplicates": fsum.get("duplicates"), "push_p50_ms": f.p50, "push_p99_ms": f.p99,
                   "push_max_ms": f.max, "clients_failed": fsum.get("failed_clients"),
                   "pushes_per_s": rate(f.delivered, window)},
        "store": {"pages": len(s_lat), "errors": s_err, "p50_ms": s.p50, "p99_ms": s.p99,
                  "last_errors": sorted({str(x.get("last_error")) for x in sb_sums if x.get("last_error")})[:5],
                  "late": sum(int(x.get("late") or 0) for x in sb_sums), "pages_per_s": rate(len(s_lat), window)},
        "lightpush": {"offered": lp_offered, "acknowledged": lp_ok, "missing": lp_offered - lp_ok,
                      "first_error": first_error, "p50_ms": lp.p50, "p99_ms": lp.p99,
                      "per_s": rate(lp_ok, window)},
        "cpu_by_process_s": cpu, "cores": round(sum(cpu.values()) / window, 3),
    }
    accepted = ([(h, ts, "relay") for h, ts in relay.publishes] + [(h, ts, "filter") for h, ts in fpub.publishes]
                + [(h, ts, "lightpush") for h, ts in lp_hashes])
    (d / "accepted.json").write_text(json.dumps(accepted))
    return out


def _slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return round(sum((t - mt) * (v - mv) for t, v in points) / den * 3600, 2) if den else None


def _account(side: Side, rounds_dir: list[Path], maintains: list[dict], retention_s: float) -> dict:
    """Every accepted message against the Delta store: present once unless a retention run could
    have deleted it."""
    from deltalake import DeltaTable

    table = DeltaTable(str(side.tmp / "warehouse" / "messages")).to_pyarrow_table(columns=["message_hash"])
    counts = Counter(b.hex() for b in table.column("message_hash").to_pylist())
    # a run's cutoff as it logged it (else the span its cutoff can lie in), +- RETENTION_BAND_S
    cutoffs = [((m["cutoff"] or m["start"] - retention_s) - RETENTION_BAND_S,
                (m["cutoff"] or m["end"] - retention_s) + RETENTION_BAND_S) for m in maintains if m["rc"] == 0]
    out: dict = {"rows_in_store": table.num_rows, "duplicated_rows": sum(c - 1 for c in counts.values() if c > 1)}
    for kind in ("relay", "filter", "lightpush"):
        out[kind] = {"accepted": 0, "must_be_stored": 0, "stored": 0, "lost": 0, "duplicated": 0,
                     "deleted_by_retention": 0, "in_retention_band": 0, "kept_past_retention": 0}
    lost_examples: list = []
    for d in rounds_dir:
        for h, ts, kind in json.loads((d / "accepted.json").read_text()):
            a = out[kind]
            a["accepted"] += 1
            c = counts.get(h.removeprefix("0x"), 0)
            t = ts / 1e9
            if c > 1:
                a["duplicated"] += 1
            if any(lo <= t <= hi for lo, hi in cutoffs):
                a["in_retention_band"] += 1
            elif any(t < lo for lo, _ in cutoffs):  # older than a run's cutoff: deleted
                a["deleted_by_retention" if c == 0 else "kept_past_retention"] += 1
            else:
                a["must_be_stored"] += 1
                if c:
                    a["stored"] += 1
                else:
                    a["lost"] += 1
                    if len(lost_examples) < 10:
                        lost_examples.append([kind, h, ts])
    out["lost_examples"] = lost_examples
    return out


def run_soak(args: argparse.Namespace, tmp: Path) -> dict:
    rates = soak_rates(args.soak_scale)
    retention = [f"store.retention_days={args.soak_retention / 86400:.9f}", "store.vacuum_retain_hours=0.1"]
    say(f"soak: {args.soak:.0f} s in rounds of {args.soak_round:.0f} s at {rates} "
        f"(scale {args.soak_scale} x 70 % of {SOAK_CAPACITY}); maintain every {args.soak_maintain_every:.0f} s, "
        f"retention {args.soak_retention:.0f} s")
    side = start_ours(tmp, [*retention, *args.overrides])
    from tests.benchmarks.capacity import wait_for_filter_query  # a message before the filter query: never pushed
    filter_query_after_s = wait_for_filter_query(tmp / "var" / "filter-job.log")
    out: dict = {"rates": rates, "scale": args.soak_scale, "capacity_basis": SOAK_CAPACITY,
                 "seconds": args.soak, "round_s": args.soak_round, "maintain_every_s": args.soak_maintain_every,
                 "retention_s": args.soak_retention, "startup_s": round(side.startup_s, 1),
                 "filter_query_after_s": round(filter_query_after_s, 1)}
    sampler = Sampler(side, 60.0)
    maint = Maintainer(side, args.soak_maintain_every, retention)
    rounds: list[dict] = []
    dirs: list[Path] = []
    try:
        time.sleep(args.settle)
        since = time.time_ns()
        sampler.sample()
        sampler.start()
        maint.start()
        began = time.time()
        k = 0
        while time.time() - began < args.soak - 30:
            seconds = min(args.soak_round, args.soak - (time.time() - began))
            r = _round(side, k, seconds, rates, since)
            rounds.append(r)
            dirs.append(side.tmp / f"soak{k}")
            say(f"soak round {k}: relay {r['relay']['per_s']}/s queryable p99 {r['relay']['queryable_p99_ms']} ms "
                f"(missing {r['relay']['queryable_missing']}); filter {r['filter']['pushes_per_s']} pushes/s p99 "
                f"{r['filter']['push_p99_ms']} ms (missing {r['filter']['missing']}); store "
                f"{r['store']['pages_per_s']} pages/s p99 {r['store']['p99_ms']} ms ({r['store']['errors']} errors); "
                f"lightpush {r['lightpush']['per_s']}/s p99 {r['lightpush']['p99_ms']} ms "
                f"(missing {r['lightpush']['missing']}); {r['cores']} cores")
            k += 1
        maint.stop_event.set()
        maint.join()  # a run under way finishes
        sampler.stop_event.set()
        sampler.sample()
        still = float(args.ours_still_s)
        wait_stored(side, float("inf"), 600, still_s=still)
        out["accounting"] = _account(side, dirs, maint.runs, args.soak_retention)
    finally:
        side.stop()
    out["rounds"] = rounds
    out["maintain_runs"] = maint.runs
    out["samples"] = sampler.samples
    after = [s for s in sampler.samples if rounds and s["t"] >= rounds[0]["start"] + args.soak_round]
    trends: dict = {}
    for name in sorted({n for s in after for n in s["processes"]}):
        pts = [(s["t"], s["processes"][name]["rss_mb"]) for s in after if name in s["processes"]]
        fds = [(s["t"], float(s["processes"][name]["fds"])) for s in after if name in s["processes"]]
        trends[name] = {"rss_mb_first": pts[0][1] if pts else None, "rss_mb_last": pts[-1][1] if pts else None,
                        "rss_mb_per_hour": _slope_per_hour(pts), "fds_first": fds[0][1] if fds else None,
                        "fds_last": fds[-1][1] if fds else None, "fds_per_hour": _slope_per_hour(fds)}
    out["trends_after_first_round"] = trends
    out["disk_mb"] = [(s["t"], s["warehouse_mb"], s["kafka_mb"]) for s in sampler.samples]
    acc = out.get("accounting", {})
    out["summary"] = {
        "lost": sum(acc.get(k, {}).get("lost", 0) for k in ("relay", "filter", "lightpush")),
        "duplicated": acc.get("duplicated_rows"),
        "pushes_missing": sum(r["filter"]["missing"] or 0 for r in rounds),
        "lightpush_refused": sum(r["lightpush"]["missing"] for r in rounds),
        "store_errors": sum(r["store"]["errors"] for r in rounds),
        "maintain_failed": sum(1 for m in maint.runs if m["rc"] != 0),
        "worst_p99_ms": {svc: max((r[svc][key] if r[svc][key] is not None else math.inf) for r in rounds)
                         if rounds else None
                         for svc, key in (("relay", "queryable_p99_ms"), ("filter", "push_p99_ms"),
                                          ("store", "p99_ms"), ("lightpush", "p99_ms"))},
    }
    if args.soak_plot:
        plot(out, Path(args.soak_plot))
    return out


def plot(out: dict, path: Path) -> None:
    """p99 per round per service, RSS per process, disk: one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds, samples = out["rounds"], out["samples"]
    t0 = samples[0]["t"] if samples else 0.0
    fig, ax = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    for svc, key, label in (("relay", "queryable_p99_ms", "relay stored -> queryable"),
                            ("filter", "push_p99_ms", "filter push"), ("store", "p99_ms", "store page"),
                            ("lightpush", "p99_ms", "lightpush answer")):
        xs = [(r["start"] + r["seconds"] / 2 - t0) / 60 for r in rounds]
        ys = [r[svc][key] if r[svc][key] is not None else float("nan") for r in rounds]
        ax[0].plot(xs, ys, marker="o", label=label)
    ax[0].axhline(100, color="grey", linestyle=":", label="100 ms")
    ax[0].set_yscale("log")
    ax[0].set_ylabel("p99 per round (ms, log)")
    ax[0].legend(fontsize=8)
    names = sorted({n for s in samples for n in s["processes"]})
    for name in names:
        pts = [((s["t"] - t0) / 60, s["processes"][name]["rss_mb"]) for s in samples if name in s["processes"]]
        ax[1].plot([p[0] for p in pts], [p[1] for p in pts], label=name)
    ax[1].set_ylabel("RSS (MiB)")
    ax[1].legend(fontsize=8)
    ax[2].plot([(s["t"] - t0) / 60 for s in samples], [s["warehouse_mb"] for s in samples], label="warehouse")
    ax[2].plot([(s["t"] - t0) / 60 for s in samples], [s["kafka_mb"] for s in samples], label="broker")
    for m in out["maintain_runs"]:
        ax[2].axvspan((m["start"] - t0) / 60, (m["end"] - t0) / 60, color="orange", alpha=0.2)
    ax[2].set_ylabel("disk (MiB); maintain shaded")
    ax[2].set_xlabel("minutes")
    ax[2].legend(fontsize=8)
    fig.suptitle(f"soak {out['seconds'] / 60:.0f} min, rates {out['rates']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
