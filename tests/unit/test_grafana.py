"""The Grafana dashboard (conf/grafana/waku.json) queries only metrics the project exports: the
names are collected from the real registries of the bridge, its services and the job exporter."""
from __future__ import annotations

import json
import re

from core.config import REPO_ROOT

DASHBOARD = REPO_ROOT / "conf" / "grafana" / "waku.json"

# PromQL functions, aggregations and keywords (the words of an expression that are no metric).
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group",
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "histogram_quantile", "time",
    "clamp_min", "clamp_max", "clamp", "abs", "ceil", "floor", "round", "sqrt", "exp", "ln", "log2", "log10",
    "avg_over_time", "max_over_time", "min_over_time", "sum_over_time", "count_over_time", "last_over_time",
    "absent", "absent_over_time", "changes", "resets", "timestamp", "vector", "scalar", "sort", "sort_desc",
    "label_replace", "label_join", "e", "inf", "nan",
}


def exported_names() -> set[str]:
    from ingest.filter.service import FilterMetrics
    from ingest.lightpush.service import LightpushMetrics
    from ingest.metadata.service import MetadataMetrics
    from ingest.metrics import BridgeMetrics
    from ingest.store.server import StoreMetrics
    from pipeline.spark.metrics import JobExporter

    suffixes = {"counter": ("_total", "_created"), "gauge": ("",),
                "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created"), "info": ("_info",), "untyped": ("",)}
    names: set[str] = set()
    for registry in (BridgeMetrics().registry, StoreMetrics().registry, FilterMetrics().registry,
                     LightpushMetrics().registry, MetadataMetrics().registry, JobExporter().registry):
        for family in registry.collect():
            names |= {family.name + s for s in suffixes[family.type]}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)            # strings
    text = re.sub(r"\{[^}]*\}", "", text)                       # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                      # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {w for w in words if w.lower() not in PROMQL_WORDS and not w.startswith("$")}


def queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_parser_finds_the_metrics():
    assert metric_names('sum by (job, le) (rate(waku_job_x_bucket{job="a b"}[5m])) / clamp_min(waku_y, 1e-9)') \
        == {"waku_job_x_bucket", "waku_y"}
    assert metric_names("time() - max by (job) (waku_job_last_progress_timestamp_seconds)") \
        == {"waku_job_last_progress_timestamp_seconds"}


def test_every_query_names_only_exported_metrics():
    exported = exported_names()
    assert "waku_bridge_received_total" in exported and "waku_job_kafka_lag" in exported
    found = queries()
    assert len(found) >= 15
    unknown = [(title, name) for title, expr in found for name in metric_names(expr) if name not in exported]
    assert unknown == []
    for title, expr in found:
        assert metric_names(expr), f"{title}: {expr} names no metric"


def test_panels_cover_the_bridge_and_every_streaming_job():
    used = {name for _, expr in queries() for name in metric_names(expr)}
    assert any(n.startswith("waku_bridge_") for n in used)
    assert any(n.startswith("waku_filter_") for n in used)
    assert {"waku_job_input_rows_total", "waku_job_kafka_lag", "waku_job_batch_duration_seconds_count",
            "waku_job_quarantined_rows_total", "waku_job_stored_rows_total"} <= used
