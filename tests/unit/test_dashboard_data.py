"""The ops dashboard's data side without a browser: its endpoints from the configuration, and
rates and sums over scraped Prometheus samples."""
from __future__ import annotations

import pytest

from core.config import ConfigError, load_config
from tools.dashboard import PANELS, Dashboard, DashboardSettings, LiveHistory


def test_targets_come_from_the_bridge_and_job_ports():
    s = DashboardSettings.from_config(load_config(
        ["bridge.metrics_host=0.0.0.0", "bridge.metrics_port=9000", "job_metrics.filter_port=-1",
         "dashboard.targets=edge=http://h:1/metrics"], environ={}))
    assert s.targets == {"bridge": "http://127.0.0.1:9000/metrics", "store": "http://127.0.0.1:8010/metrics",
                         "subscriptions": "http://127.0.0.1:8011/metrics", "edge": "http://h:1/metrics"}
    with pytest.raises(ConfigError):
        DashboardSettings.from_config(load_config(["dashboard.targets=nourl"], environ={}))


def test_rates_and_gauges_over_samples():
    h = LiveHistory(keep_s=60, window_s=1)
    lab = (("reason", "a"),)
    h.add(100.0, {"bridge": {("waku_bridge_dropped_total", lab): 10.0, ("waku_bridge_relay_peers", ()): 2.0}})
    h.add(102.0, {"bridge": {("waku_bridge_dropped_total", lab): 14.0, ("waku_bridge_relay_peers", ()): 3.0}})
    h.add(104.0, {"bridge": {("waku_bridge_dropped_total", lab): 1.0}})   # a restart: counted as 0, not negative
    assert h.rate("waku_bridge_dropped_total", "reason") == {"a": [[102.0, 2.0], [104.0, 0.0]]}
    assert h.gauge("waku_bridge_relay_peers", prefix="relay peers") == {"relay peers": [[100.0, 2.0], [102.0, 3.0]]}
    w = LiveHistory(keep_s=60, window_s=4)   # rates over 4 s: from the sample 4 s or more before
    for t, v in ((0.0, 0.0), (2.0, 8.0), (4.0, 8.0), (6.0, 8.0)):
        w.add(t, {"job": {("waku_job_input_rows_total", ()): v}})
    assert w.rate("waku_job_input_rows_total", prefix="in") == {"in": [[2.0, 4.0], [4.0, 2.0], [6.0, 0.0]]}
    h.add(200.0, {})
    assert [t for t, _ in h.samples] == [200.0]  # older than keep_s is dropped


def test_panels_without_any_source_are_empty_but_present(tmp_path):
    d = Dashboard(DashboardSettings(job_metrics=str(tmp_path / "none"), messages=str(tmp_path / "none"),
                                    subscriptions=str(tmp_path / "none")))
    d.sample()
    out = d.panels()
    assert [p["id"] for p in out["panels"]] == [p[0] for p in PANELS]
    assert all(p["series"] == [] for p in out["panels"])


def test_job_throughput_is_rows_in_per_second_not_rows_over_batch_time(tmp_path):
    """A job taking in 5 rows/s in batches of 10 rows every 2 s, each batch running 0.1 s: the
    panel shows 5 rows/s (Spark's inputRowsPerSecond), not 100 (processedRowsPerSecond)."""
    d = Dashboard(DashboardSettings(job_metrics=str(tmp_path / "none"), messages=str(tmp_path / "none"),
                                    subscriptions=str(tmp_path / "none")))
    d.job_rows = [{"job": "store", "t": 100.0 + 2 * i, "duration_s": 0.1, "input_rows": 10,
                   "input_rows_per_s": 5.0, "processed_rows_per_s": 100.0} for i in range(3)]
    panel = next(p for p in d.panels()["panels"] if p["id"] == "throughput")
    assert [(s["name"], [v for _, v in s["points"]]) for s in panel["series"]] == [("store in", [5.0, 5.0, 5.0])]
