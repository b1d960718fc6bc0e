"""The statistics every benchmark reports, in one place and with one definition.

Percentile: **nearest rank**. The p-th percentile of n values is the smallest value v such that
at least p % of the values are <= v: sorted ascending, the value at 1-based rank ceil(p/100 * n)
(rank 1 for p = 0). It is always one of the observed values (never an interpolation between
two), so it also works when some values are +inf.

Latency over everything offered: a message (push, page, ...) that was offered but never
delivered counts as `missing` and as +inf in the percentiles; a percentile that falls on a
missing one is reported as None (JSON null): "more than 1 % never arrived" instead of a p99
taken over the lucky ones only. `p99_by_slice` gives that p99 per slice of a window (by each
message's time), to show where the tail sits.

Rate: what was actually processed (delivered, matched, written), divided by the measured window
in which it was processed; what was offered is reported as a figure of its own, never added in.

A Prometheus histogram holds bucket counts, not values: `histogram_percentile` applies the same
nearest-rank rule (the offered ones not observed as +inf) and reports the upper bound of the
bucket that holds the ranked observation (a bound: the true value is at most that).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

INF = float("inf")
DEFINITION = "nearest rank: the smallest value with at least p % of the values at or below it"


def rank_index(n: int, p: float) -> int:
    """0-based index into n sorted values of the p-th percentile (nearest rank); n > 0."""
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside [0, 100]")
    # p * n / 100, less a rounding error's worth: 50 % of 10 is rank 5, and 30 % of 10 (3.0000000000000004
    # in floating point) rank 3, not 4
    return min(n, max(1, math.ceil(p * n / 100 - 1e-9))) - 1


def percentile(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile (0..100, nearest rank) of `values`; None when there are none. May be
    +inf when +inf values (missing ones) are among them."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[rank_index(len(ordered), p)]


def finite(x: float | None, digits: int | None = None) -> float | None:
    """`x` rounded to `digits`, or None when it is None, +inf (a missing one) or NaN."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return round(x, digits) if digits is not None else x


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles over everything offered (missing ones as +inf); None where a percentile falls
    on a missing one or nothing was offered."""
    offered: int
    delivered: int
    missing: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    def fields(self, prefix: str = "", suffix: str = "") -> dict[str, float | int | None]:
        """The summary as JSON fields `{prefix}p50{suffix}` ... plus `{prefix}missing`."""
        out: dict[str, float | int | None] = {
            f"{prefix}{name}{suffix}": getattr(self, name) for name in ("p50", "p90", "p99", "max")}
        out[f"{prefix}missing"] = self.missing
        return out


def latency_summary(latencies_of_delivered: Sequence[float], offered_count: int, *, scale: float = 1.0,
                    digits: int | None = 3) -> LatencySummary:
    """p50/p90/p99/max of the latencies of what was delivered plus one +inf for each of the
    `offered_count - len(latencies_of_delivered)` offered ones never delivered. Values are
    multiplied by `scale` (e.g. 1000 for seconds -> ms) and rounded to `digits`."""
    delivered = len(latencies_of_delivered)
    if offered_count < delivered:
        raise ValueError(f"{delivered} delivered of {offered_count} offered: count each offered one once")
    missing = offered_count - delivered
    values = [x * scale for x in latencies_of_delivered] + [INF] * missing

    def at(p: float) -> float | None:
        return finite(percentile(values, p), digits)

    return LatencySummary(offered=offered_count, delivered=delivered, missing=missing,
                          p50=at(50), p90=at(90), p99=at(99), max=at(100))


def p99_by_slice(samples: Iterable[tuple[float, float | None]], start: float, end: float, slice_s: float,
                 *, digits: int | None = 1) -> list[float | None]:
    """The p99 (`latency_summary`'s) of each `slice_s` of [start, end), by each sample's time:
    samples are (time, latency), latency None for one never delivered (+inf); None where the
    p99 falls on one, or for a slice without samples; the last slice takes what a partial one
    would hold. Where in a window its tail sits."""
    n = max(1, math.ceil((end - start) / slice_s - 1e-9))
    delivered: list[list[float]] = [[] for _ in range(n)]
    offered = [0] * n
    for t, latency in samples:
        i = min(n - 1, max(0, int((t - start) // slice_s)))
        offered[i] += 1
        if latency is not None:
            delivered[i].append(latency)
    return [latency_summary(d, o, digits=digits).p99 for d, o in zip(delivered, offered, strict=True)]


def rate(processed: int | float, seconds: float, digits: int | None = 1) -> float | None:
    """`processed` per second over a measured window of `seconds`; None for an empty window."""
    if not seconds > 0:
        return None
    r = processed / seconds
    return round(r, digits) if digits is not None else r


def histogram_percentile(buckets: Sequence[tuple[float, float]], p: float, offered: int | None = None) -> float | None:
    """The p-th percentile (nearest rank) of the observations in a cumulative histogram
    [(upper bound `le`, cumulative count)] sorted by bound: the bound of the first bucket whose
    count reaches the rank. With `offered`, the offered ones not observed count as +inf. None
    when it falls on +inf (a missing one, or the overflow bucket) or nothing was observed."""
    total = round(buckets[-1][1]) if buckets else 0
    n = max(total, offered or 0)
    if n <= 0:
        return None
    rank = rank_index(n, p) + 1
    for le, count in buckets:
        if count >= rank:
            return finite(le)
    return None
