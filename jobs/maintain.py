"""Maintain job (batch): retention, compaction in received_time order, vacuum, audit; safe while `store` runs."""
from __future__ import annotations

import argparse
import logging
import sys

from core.config import add_config_arguments
from pipeline.spark.entrypoint import setup_job
from pipeline.spark.session import build_session
from pipeline.store.maintenance import MaintenanceReport, apply_retention, compact, vacuum
from pipeline.store.settings import MaintainSettings
from pipeline.store.tables import ensure_store_tables
from pipeline.store.validation import audit

log = logging.getLogger("waku.jobs.maintain")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="maintain", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--skip", action="append", default=[], choices=["retention", "compact", "vacuum", "audit"],
                        help="leave out a step (repeatable)")
    args = parser.parse_args(argv)
    settings, spark_settings = setup_job(args, MaintainSettings.from_config)
    spark = build_session(spark_settings, "maintain")
    ensure_store_tables(spark, settings.warehouse)
    report = MaintenanceReport()
    if "retention" not in args.skip:
        apply_retention(spark, settings, report=report)
    if "compact" not in args.skip:
        compact(spark, settings, report=report)
    if "vacuum" not in args.skip:
        vacuum(spark, settings, report=report)
    log.info("maintenance done: %s", report)
    print(report)
    if "audit" not in args.skip:
        # The stored table against the validation rules (great-expectations on Spark).
        messages = spark.read.format("delta").load(settings.warehouse.table_path("messages"))
        outcome = audit(messages, settings.limits)
        log.log(logging.INFO if outcome["success"] else logging.ERROR, "audit of messages: %s", outcome)
        print(f"audit: {outcome}")
        if not outcome["success"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
