"""Store layout benchmark: how many data files one store page must open, per layout.

    python tests/benchmarks/store_layout.py [--quick]

A day of messages (received_time uniform over 24 h, content topics with Zipf popularity over
1,000 topics) is laid out into files in several ways; for each file the min/max statistics Delta
keeps (received_time, content_topic) are computed exactly as Delta computes them. A page query
(cursor at a random time, forward, 20 messages, with no topic filter or one topic of a given
popularity) must open every file whose statistics overlap the page's receive-time span and can
contain the topic. That count, not engine speed, decides how cheap a page is; it is the same on
any engine that skips files by statistics (Spark, delta-rs). The p99 is by nearest rank
(tests/benchmarks/stats.py).

Layouts: micro-batch files as the store job writes them (1 s batches, sorted inside), the same
compacted to large files sorted by received_time (maintain: OPTIMIZE ZORDER BY received_time),
large files Z-ordered on (received_time, content_topic), and unsorted large files (no layout).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: `tests` importable

from tests.benchmarks.stats import percentile

DAY = 86_400.0
TOPICS = 1000


def make_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, DAY, rows))
    ranks = np.arange(1, TOPICS + 1)
    p = 1 / ranks**1.1
    topic = rng.choice(TOPICS, size=rows, p=p / p.sum())
    return t, topic


def file_stats(order: np.ndarray, t: np.ndarray, topic: np.ndarray, rows_per_file: int):
    """(min_t, max_t, min_topic, max_topic) per file when rows are written in `order`."""
    stats = []
    for start in range(0, len(order), rows_per_file):
        idx = order[start:start + rows_per_file]
        stats.append((t[idx].min(), t[idx].max(), topic[idx].min(), topic[idx].max()))
    return np.array(stats)


def zorder(t: np.ndarray, topic: np.ndarray, bits: int = 16) -> np.ndarray:
    """Row order of a Z-order (bit interleaving) on the ranks of the two columns."""
    rt = (np.argsort(np.argsort(t)) * ((1 << bits) - 1) // max(1, len(t) - 1)).astype(np.uint64)
    rc = (topic.astype(np.uint64) * ((1 << bits) - 1) // (TOPICS - 1)).astype(np.uint64)
    z = np.zeros(len(t), dtype=np.uint64)
    for b in range(bits):
        z |= ((rt >> np.uint64(b)) & np.uint64(1)) << np.uint64(2 * b + 1)
        z |= ((rc >> np.uint64(b)) & np.uint64(1)) << np.uint64(2 * b)
    return np.argsort(z, kind="stable")


def page_files(stats: np.ndarray, t: np.ndarray, topic: np.ndarray, t0: float, which: int | None,
               page: int = 20) -> int:
    """Files a stats-pruning reader opens for one forward page after t0 (topic `which` or any)."""
    start = np.searchsorted(t, t0, side="right")
    if which is None:
        end_idx = min(len(t) - 1, start + page - 1)
    else:
        matches = np.flatnonzero(topic[start:] == which)
        end_idx = start + matches[page - 1] if len(matches) >= page else len(t) - 1
    t_end = t[end_idx]
    sel = (stats[:, 1] >= t0) & (stats[:, 0] <= t_end)
    if which is not None:
        sel &= (stats[:, 2] <= which) & (stats[:, 3] >= which)
    return int(sel.sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = 500_000 if args.quick else 5_000_000
    queries = 300 if args.quick else 1000
    big = 100_000  # ~128 MiB files of 1 KiB messages: compaction's target
    t, topic = make_data(rows, seed=1)
    rng = np.random.default_rng(2)
    per_second = rows / DAY
    batch_rows = max(1, int(round(per_second)))  # 1 s micro-batches
    arrival = np.argsort(t + rng.normal(0, 0.5, rows), kind="stable")  # bridges' clocks/jitter
    layouts = {
        "microbatch_1s_sorted": (arrival, batch_rows),
        "compacted_sorted_by_time": (np.arange(rows), big),
        "zorder_time_topic": (zorder(t, topic), big),
        "unsorted": (rng.permutation(rows), big),
    }
    filters = {"any_topic": None, "popular_topic": 0, "mid_topic": 50, "rare_topic": 900}
    t0s = rng.uniform(0, DAY * 0.95, queries)
    results: dict[str, object] = {"rows": rows, "queries": queries}
    print(f"{rows} messages over 24 h ({per_second:.0f}/s); files opened per 20-message page (mean / p99)")
    print(f"{'layout':<28}{'files':>8}" + "".join(f"{name:>22}" for name in filters))
    for name, (order, per_file) in layouts.items():
        stats = file_stats(order, t, topic, per_file)
        line = f"{name:<28}{len(stats):>8}"
        for fname, which in filters.items():
            counts = np.array([page_files(stats, t, topic, t0, which) for t0 in t0s])
            mean, p99 = float(counts.mean()), float(percentile(counts.tolist(), 99) or 0)
            results[f"{name}.{fname}.mean"] = round(mean, 2)
            results[f"{name}.{fname}.p99"] = round(p99, 1)
            line += f"{mean:>13.1f} / {p99:>6.0f}"
        results[f"{name}.files"] = len(stats)
        print(line)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
