"""What every job does first: logging, then its typed settings built once from the merged
configuration (a bad value exits 2 with one line), then its metrics (`start_metrics`). Below
this, nothing looks settings up."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from core.config import Config, ConfigError, config_from_args
from core.settings import ObjectStoreSettings, WarehouseSettings, is_s3
from core.spark_conf import SparkSettings

if TYPE_CHECKING:
    from pipeline.spark.metrics import JobMetrics, JobMetricsSettings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
S = TypeVar("S")


def setup_job(args: argparse.Namespace, build: Callable[[Config], S]) -> tuple[S, SparkSettings]:
    """Configure logging; return (the job's settings, the Spark settings)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        config = config_from_args(args)
        warehouse = WarehouseSettings.from_config(config)
        if is_s3(warehouse.root) or is_s3(warehouse.checkpoints):
            # delta-rs on this driver (log checkpoints, job_metrics) reaches the store from these.
            os.environ.update(ObjectStoreSettings.from_config(config).environment())
        return build(config), SparkSettings.from_config(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def start_metrics(spark, settings: JobMetricsSettings | None) -> JobMetrics | None:
    """The job's metrics on this driver (listener, Prometheus exporter, Delta writer); None when
    the settings carry none. Stop it with `.stop()` when the job ends (it flushes)."""
    from pipeline.spark.metrics import JobMetrics

    if settings is None:
        return None
    try:
        return JobMetrics(spark, settings).start()
    except OSError as exc:  # the Prometheus port is taken: one line, as for a bad setting
        print(f"error: cannot serve job metrics on {settings.host}:{settings.port}: {exc.strerror} "
              f"(job_metrics.{settings.job}_port: 0 for any free port, -1 for none)", file=sys.stderr)
        raise SystemExit(2) from None
