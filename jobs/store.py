"""Store job: waku.messages (Kafka) -> validated, de-duplicated Delta `messages`; refused records -> `quarantine`."""
from __future__ import annotations

import argparse
import logging
import sys

from core.config import add_config_arguments
from pipeline.spark.entrypoint import setup_job, start_metrics
from pipeline.spark.session import build_session, freeze_start_up_objects
from pipeline.store.job import start_store_query
from pipeline.store.settings import StoreJobSettings

log = logging.getLogger("waku.jobs.store")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="store", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--available-now", action="store_true",
                        help="process everything in Kafka now, then stop (catch-up)")
    args = parser.parse_args(argv)
    settings, spark_settings = setup_job(args, StoreJobSettings.from_config)
    spark = build_session(spark_settings, "store")
    metrics = start_metrics(spark, settings.metrics)
    freeze_start_up_objects()
    try:
        query = start_store_query(spark, settings, available_now=args.available_now, metrics=metrics)
        log.info("store query started: %s -> %s", settings.topic, settings.warehouse.table_path("messages"))
        query.awaitTermination()
    finally:
        if metrics is not None:
            metrics.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
