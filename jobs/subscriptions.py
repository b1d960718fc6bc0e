"""Subscriptions job: waku.subscriptions (Kafka) -> Delta `subscriptions` (MERGE, per-peer order, TTL expiry)."""
from __future__ import annotations

import argparse
import logging
import sys

from core.config import add_config_arguments
from pipeline.filter.settings import SubscriptionsJobSettings
from pipeline.filter.subscriptions import SubscriptionsJob
from pipeline.spark.entrypoint import setup_job, start_metrics
from pipeline.spark.session import build_session

log = logging.getLogger("waku.jobs.subscriptions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="subscriptions", description=__doc__)
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    settings, spark_settings = setup_job(args, SubscriptionsJobSettings.from_config)
    spark = build_session(spark_settings, "subscriptions")
    metrics = start_metrics(spark, settings.metrics)
    job = SubscriptionsJob(spark, settings, metrics=metrics)
    query = job.start()
    log.info("subscriptions query started: %s -> %s", settings.topic, job.path)
    try:
        query.awaitTermination()
    finally:
        job.stop()
        if metrics is not None:
            metrics.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
