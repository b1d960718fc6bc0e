"""The interop launcher's Spark live job (tools/interop_suite/run.py) keeps the product's batch
cadence for the store and subscriptions queries: a batch at every trigger kept the store query
busy at the suite's trickle (a 1-4 s batch every second), CPU the filter push path lost on 2
cores, where the suite reads a push once, 0.1 s after the publish
(tests/benchmarks/suite_filter_latency.py measures it)."""
from __future__ import annotations

from pathlib import Path

from core.config import load_config
from tools.interop_suite.run import SPARK_JOBS, Services
from tools.local_run import spark_jobs

CADENCE = ("store.min_offsets_per_trigger", "store.max_trigger_delay_s", "store.trigger_seconds",
           "filter.subscriptions_min_events_per_trigger", "filter.subscriptions_max_trigger_delay_s",
           "filter.subscriptions_trigger_seconds", "filter.trigger", "filter.realtime_checkpoint_interval")


def test_live_job_keeps_the_product_cadence():
    sets = Services(Path("/tmp/unused"), 19092).live_sets()
    assert not [s for s in sets if s.split("=", 1)[0] in CADENCE], sets
    product, launched = load_config([], environ={}), load_config(sets, environ={})
    for key in CADENCE:
        assert launched.get(key) == product.get(key), key
    assert launched.get("kafka.bootstrap_servers") == "127.0.0.1:19092"


def test_the_launcher_starts_the_products_jobs():
    """By default the jobs a driver each, as make run and a deployment run them (the filter
    query's real-time tasks on cores of their own); --spark live: the one-driver job."""
    assert sorted(SPARK_JOBS["jobs"]) == sorted(spark_jobs(one_driver=False))
    assert SPARK_JOBS["live"] == spark_jobs(one_driver=True)
