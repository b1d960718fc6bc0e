"""Store job: waku.messages (Kafka) -> validated, de-duplicated Delta `messages`; refused records -> `quarantine`."""
from __future__ import annotations

import argparse
import logging
import sys

from pipeline.config import add_config_arguments
from pipeline.entrypoint import setup_job
from pipeline.session import build_session
from pipeline.store_job import start_store_query

log = logging.getLogger("waku.jobs.store")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="store", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--available-now", action="store_true",
                        help="process everything in Kafka now, then stop (catch-up)")
    args = parser.parse_args(argv)
    config = setup_job(args)
    spark = build_session(config, "store")
    query = start_store_query(spark, config, available_now=args.available_now)
    log.info("store query started: %s -> %s", config.get("topics.messages"), config.table_path("messages"))
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
