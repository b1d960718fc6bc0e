"""Filter job: waku.messages ⋈ Delta `subscriptions` on (pubsub_topic, content_topic) -> push records on
waku.push.<bridge_id>."""
from __future__ import annotations

import argparse
import logging
import sys

from core.config import add_config_arguments
from pipeline.filter.criteria import IndexCollector
from pipeline.filter.matching import start_filter_query
from pipeline.filter.settings import FilterJobSettings
from pipeline.spark.entrypoint import setup_job, start_metrics
from pipeline.spark.session import build_session

log = logging.getLogger("waku.jobs.filter")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="filter", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--realtime", action="store_true",
                        help="Spark's real-time mode (same as --set filter.trigger=realtime)")
    args = parser.parse_args(argv)
    if args.realtime:
        args.overrides.append("filter.trigger=realtime")
    settings, spark_settings = setup_job(args, FilterJobSettings.from_config)
    spark = build_session(spark_settings, "filter")
    metrics = start_metrics(spark, settings.metrics)
    if metrics is not None:
        metrics.registry.register(IndexCollector(spark))
    try:
        query = start_filter_query(spark, settings, metrics=metrics)
        query.awaitTermination()
    finally:
        if metrics is not None:
            metrics.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
