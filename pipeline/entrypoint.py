"""What every job and command does first: logging, then the merged configuration."""
from __future__ import annotations

import argparse
import logging
import sys

from pipeline.config import Config, ConfigError, config_from_args

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_job(args: argparse.Namespace) -> Config:
    """Configure logging and load the configuration; a bad value exits 2 with one line."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        return config_from_args(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
