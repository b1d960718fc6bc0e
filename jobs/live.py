"""Live jobs in one driver: the store, subscriptions and filter queries in one Spark application.

The same three streaming queries as jobs/store.py, jobs/subscriptions.py and jobs/filter.py, with
the same settings, checkpoints and metrics endpoints, started in one driver (one JVM) instead of
three: a third of the fixed cost of a driver (its JIT, heartbeats, trigger loops, metrics) when
the stack is idle or at a trickle (docs/decisions.md, "One driver for the live queries"). Each
query runs in a fair-scheduler pool of its own, so a store batch does not queue behind the
filter's long-running real-time tasks or a subscriptions MERGE. What it gives up: one query's
failure stops the application (all three are restarted together, each from its checkpoint), and
the queries cannot be sized or restarted one by one. `python -m tools.local_run` submits it with
`--set spark.one_driver=true`.
"""
from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass

from core.config import Config, add_config_arguments
from pipeline.filter.criteria import IndexCollector
from pipeline.filter.matching import start_filter_query
from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
from pipeline.filter.subscriptions import SubscriptionsJob
from pipeline.spark.entrypoint import setup_job, start_metrics
from pipeline.spark.session import build_session, freeze_start_up_objects
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings

log = logging.getLogger("waku.jobs.live")


@dataclass(frozen=True)
class LiveSettings:
    store: StoreJobSettings
    subscriptions: SubscriptionsJobSettings
    filter: FilterJobSettings

    @classmethod
    def from_config(cls, config: Config) -> LiveSettings:
        return cls(StoreJobSettings.from_config(config), SubscriptionsJobSettings.from_config(config),
                   FilterJobSettings.from_config(config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="live", description=__doc__.splitlines()[0])
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    settings, spark_settings = setup_job(args, LiveSettings.from_config)
    spark = build_session(spark_settings, "live", {"spark.scheduler.mode": "FAIR"})
    sc = spark.sparkContext
    metrics = {name: start_metrics(spark, s.metrics) for name, s in
               (("store", settings.store), ("subscriptions", settings.subscriptions), ("filter", settings.filter))}
    freeze_start_up_objects()
    subscriptions = None
    try:
        # A query's jobs go to the pool set on the thread that starts it.
        sc.setLocalProperty("spark.scheduler.pool", "subscriptions")
        subscriptions = SubscriptionsJob(spark, settings.subscriptions, metrics=metrics["subscriptions"])
        queries = [subscriptions.start()]
        log.info("subscriptions query started: %s -> %s", settings.subscriptions.topic, subscriptions.path)
        sc.setLocalProperty("spark.scheduler.pool", "store")
        queries.append(start_store_query(spark, settings.store, metrics=metrics["store"]))
        log.info("store query started: %s -> %s", settings.store.topic,
                 settings.store.warehouse.table_path("messages"))
        sc.setLocalProperty("spark.scheduler.pool", "filter")
        if metrics["filter"] is not None:
            metrics["filter"].registry.register(IndexCollector(spark))
        queries.append(start_filter_query(spark, settings.filter, metrics=metrics["filter"]))
        sc.setLocalProperty("spark.scheduler.pool", None)
        # The first of the three to end (failed or stopped) ends the application: its supervisor
        # restarts all three, each from its checkpoint. Queries that ended before (the filter
        # job's real-time warm-up) are forgotten first; one of the three that ended meanwhile is
        # seen by its isActive.
        spark.streams.resetTerminated()
        if all(q.isActive for q in queries):
            spark.streams.awaitAnyTermination()
    finally:
        for query in spark.streams.active:
            query.stop()
        if subscriptions is not None:
            subscriptions.stop()
        for m in metrics.values():
            if m is not None:
                m.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
