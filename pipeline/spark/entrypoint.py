"""What every job does first: logging, then its typed settings built once from the merged
configuration (a bad value exits 2 with one line). Below this, nothing looks settings up."""
from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from core.config import Config, ConfigError, config_from_args
from core.spark_conf import SparkSettings

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
S = TypeVar("S")


def setup_job(args: argparse.Namespace, build: Callable[[Config], S]) -> tuple[S, SparkSettings]:
    """Configure logging; return (the job's settings, the Spark settings)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        config = config_from_args(args)
        return build(config), SparkSettings.from_config(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
