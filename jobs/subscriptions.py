"""Subscriptions job: waku.subscriptions (Kafka) -> Delta `subscriptions` (MERGE, per-peer order, TTL expiry)."""
from __future__ import annotations

import argparse
import logging
import sys

from pipeline.config import add_config_arguments
from pipeline.entrypoint import setup_job
from pipeline.session import build_session
from pipeline.subscriptions import SubscriptionsJob

log = logging.getLogger("waku.jobs.subscriptions")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="subscriptions", description=__doc__)
    add_config_arguments(parser)
    args = parser.parse_args(argv)
    config = setup_job(args)
    spark = build_session(config, "subscriptions")
    job = SubscriptionsJob(spark, config)
    query = job.start()
    log.info("subscriptions query started: %s -> %s", config.get("topics.subscriptions"), job.path)
    try:
        query.awaitTermination()
    finally:
        job.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
