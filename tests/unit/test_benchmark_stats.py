"""tests/benchmarks/stats.py: the one percentile definition every benchmark uses (nearest rank),
latency over everything offered (missing as +inf, null where a percentile falls on one), also per
slice of a window, the rate over a measured window, and the same rule over a Prometheus histogram."""
from __future__ import annotations

import math
import random

import pytest

from tests.benchmarks.stats import (
    INF,
    finite,
    histogram_percentile,
    latency_summary,
    p99_by_slice,
    percentile,
    rank_index,
    rate,
)

SEED = random.randrange(2**32)


def nearest_rank_by_definition(values: list[float], p: float) -> float:
    """The smallest observed value with at least p % of the values at or below it."""
    ordered = sorted(values)
    for v in ordered:
        if sum(1 for x in ordered if x <= v) * 100 >= p * len(ordered):
            return v
    return ordered[-1]


def test_percentile_is_nearest_rank_on_random_data():
    print(f"seed {SEED}")
    rnd = random.Random(SEED)
    for _ in range(300):
        n = rnd.randint(1, 60)
        values = [round(rnd.expovariate(1.0), 3) for _ in range(n)]
        if rnd.random() < 0.3:
            values += [INF] * rnd.randint(1, 5)
        for p in (0, 1, 10, 50, 90, 99, 99.9, 100, rnd.uniform(0, 100)):
            assert percentile(values, p) == nearest_rank_by_definition(values, p), (values, p)


def test_percentile_known_values():
    ten = [float(x) for x in range(1, 11)]
    assert percentile(ten, 50) == 5.0  # rank ceil(5) = 5, not an interpolated 5.5
    assert percentile(ten, 90) == 9.0
    assert percentile(ten, 99) == 10.0
    assert percentile(ten, 0) == 1.0 and percentile(ten, 100) == 10.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0  # unsorted input
    assert percentile([], 50) is None
    assert [rank_index(100, p) for p in (1, 50, 99, 100)] == [0, 49, 98, 99]
    with pytest.raises(ValueError):
        percentile(ten, 101)


def test_latency_summary_counts_missing_as_inf():
    print(f"seed {SEED}")
    rnd = random.Random(SEED)
    delivered = [rnd.uniform(0.001, 0.5) for _ in range(995)]
    s = latency_summary(delivered, 1000, scale=1000, digits=1)  # 0.5 % missing
    assert (s.offered, s.delivered, s.missing) == (1000, 995, 5)
    ordered = sorted(x * 1000 for x in delivered)
    assert s.p50 == round(ordered[499], 1) and s.p90 == round(ordered[899], 1) and s.p99 == round(ordered[989], 1)
    assert s.max is None  # the largest of what was offered is a missing one
    # 2 % missing: the p99 falls on a missing one and is null, not the p99 of the lucky ones
    s = latency_summary(delivered[:980], 1000)
    assert s.missing == 20 and s.p99 is None and s.p90 is not None
    assert s.fields("latency_", "_ms") == {"latency_p50_ms": s.p50, "latency_p90_ms": s.p90, "latency_p99_ms": None,
                                           "latency_max_ms": None, "latency_missing": 20}
    # nothing missing: max is the largest latency
    full = latency_summary(delivered, len(delivered), digits=None)
    assert full.max == max(delivered) and full.missing == 0
    # nothing delivered, or nothing offered
    assert latency_summary([], 3).p50 is None and latency_summary([], 3).missing == 3
    assert latency_summary([], 0) == latency_summary([], 0) and latency_summary([], 0).p99 is None
    with pytest.raises(ValueError):
        latency_summary([1.0, 2.0], 1)


def test_latency_summary_agrees_with_percentile_over_inf_padded_values():
    print(f"seed {SEED}")
    rnd = random.Random(SEED + 1)
    for _ in range(200):
        delivered = [rnd.uniform(0, 10) for _ in range(rnd.randint(0, 40))]
        offered = len(delivered) + rnd.randint(0, 5)
        s = latency_summary(delivered, offered, digits=None)
        padded = delivered + [INF] * (offered - len(delivered))
        for p, got in ((50, s.p50), (90, s.p90), (99, s.p99), (100, s.max)):
            assert got == finite(percentile(padded, p)), (delivered, offered, p)


def test_rate_over_a_measured_window():
    assert rate(150, 10.0) == 15.0
    assert rate(1, 3.0, digits=3) == 0.333
    assert rate(5, 0.0) is None and rate(5, -1.0) is None and rate(5, math.nan) is None


def test_histogram_percentile_is_nearest_rank_over_bucket_bounds():
    print(f"seed {SEED}")
    rnd = random.Random(SEED + 2)
    bounds = [0.001, 0.002, 0.005, 0.01, 0.05, 0.1, 1.0, INF]
    for _ in range(200):
        values = [rnd.expovariate(50) for _ in range(rnd.randint(1, 80))]
        buckets = [(le, float(sum(1 for v in values if v <= le))) for le in bounds]
        missing = rnd.randint(0, 3)
        for p in (50, 90, 99):
            # the bound of the bucket holding the nearest-rank value (missing as +inf)
            v = percentile(values + [INF] * missing, p)
            want = None if v == INF else next(le for le in bounds if v is not None and v <= le)
            want = finite(want) if want is not None else None
            assert histogram_percentile(buckets, p, len(values) + missing) == want, (values, missing, p)
    assert histogram_percentile([], 50) is None
    assert histogram_percentile([(0.1, 0.0), (INF, 0.0)], 50) is None
    assert histogram_percentile([(0.1, 1.0), (INF, 2.0)], 99) is None  # in the overflow bucket


def test_rank_is_not_moved_by_floating_point():
    assert rank_index(10, (0.1 + 0.2) * 100) == 2  # 30.000000000000004 % of 10: rank 3
    assert percentile([float(x) for x in range(1, 11)], (0.1 + 0.2) * 100) == 3.0


def test_p99_by_slice_counts_each_sample_in_its_slice_and_missing_as_inf():
    rng = random.Random(SEED)
    print("seed", SEED)
    samples = [(100.0 + rng.random() * 30, rng.random() * 10) for _ in range(300)]
    got = p99_by_slice(samples, 100.0, 130.0, 10.0)
    for i, p99 in enumerate(got):  # each slice is latency_summary over its own samples
        own = [lat for t, lat in samples if 100 + 10 * i <= t < 110 + 10 * i]
        assert p99 == latency_summary(own, len(own), digits=1).p99
    # one never delivered among a slice's two: its p99 falls on +inf (None); the other slices keep theirs
    assert p99_by_slice([(100.5, 200.0), (105.0, 200.0), (115.0, None), (129.99, 10.0)], 100.0, 130.0, 10.0) == [
        200.0, None, 10.0]
    # a window not a whole number of slices: the last slice takes the rest; one slice at least
    assert len(p99_by_slice([(104.9, 1.0)], 100.0, 105.0, 10.0)) == 1
    assert p99_by_slice([(112.0, 5.0)], 100.0, 112.5, 10.0) == [None, 5.0]
