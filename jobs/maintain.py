"""Maintain job (batch): retention, compaction in received_time order, vacuum, audit; safe while `store` runs."""
from __future__ import annotations

import argparse
import logging
import sys

from core.config import add_config_arguments
from pipeline.spark.entrypoint import setup_job, start_metrics
from pipeline.spark.session import build_session
from pipeline.store.maintenance import MaintenanceRun, maintain
from pipeline.store.settings import MaintainSettings
from pipeline.store.tables import ensure_store_tables

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
    metrics = start_metrics(spark, settings.metrics)
    run = MaintenanceRun()
    try:
        maintain(spark, settings, run, skip=args.skip)
    finally:
        if metrics is not None:  # the run's row in job_metrics, even when a step failed
            metrics.record(run.metrics_row())
            metrics.stop()
    print(run.report)
    if run.audit is not None:
        print(f"audit: {run.audit}")
        if not run.audit["success"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
