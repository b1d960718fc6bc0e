"""Maintain job (batch): retention, compaction in received_time order, vacuum, audit; safe while `store` runs."""
from __future__ import annotations

import argparse
import logging
import sys

from pipeline.config import add_config_arguments
from pipeline.entrypoint import setup_job
from pipeline.maintenance import MaintenanceReport, apply_retention, compact, vacuum
from pipeline.session import build_session
from pipeline.store_tables import ensure_store_tables
from pipeline.validation import Limits, audit

log = logging.getLogger("waku.jobs.maintain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="maintain", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--skip", action="append", default=[], choices=["retention", "compact", "vacuum", "audit"],
                        help="leave out a step (repeatable)")
    args = parser.parse_args(argv)
    config = setup_job(args)
    spark = build_session(config, "maintain")
    ensure_store_tables(spark, config)
    report = MaintenanceReport()
    if "retention" not in args.skip:
        apply_retention(spark, config, report=report)
    if "compact" not in args.skip:
        compact(spark, config, report=report)
    if "vacuum" not in args.skip:
        vacuum(spark, config, report=report)
    log.info("maintenance done: %s", report)
    print(report)
    if "audit" not in args.skip:
        # The stored table against the validation rules (great-expectations on Spark).
        messages = spark.read.format("delta").load(config.table_path("messages"))
        outcome = audit(messages, Limits.from_config(config))
        log.log(logging.INFO if outcome["success"] else logging.ERROR, "audit of messages: %s", outcome)
        print(f"audit: {outcome}")
        if not outcome["success"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
