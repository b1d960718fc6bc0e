"""SparkSession factory: Delta extensions, the jars resolved at set-up, any master.

The same settings reach `spark-submit` through spark-submit.sh, so a job behaves the same
whether it is started from Python (tests, notebooks) or submitted to a cluster.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

from pipeline.config import REPO_ROOT, Config, ConfigError

SPARK_DEFAULTS = REPO_ROOT / "conf" / "spark-defaults.conf"
# Set by spark-submit.sh: master, jars and defaults already came in on the command line.
SUBMITTED_ENV = "WAKU_SPARK_SUBMITTED"


def spark_defaults() -> dict[str, str]:
    """Key/values of conf/spark-defaults.conf (Spark's whitespace-separated properties format)."""
    out: dict[str, str] = {}
    for line in SPARK_DEFAULTS.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


def master_defaults(master: str) -> dict[str, str]:
    """Settings that depend on the master. In local mode, Delta's snapshot state reconstruction
    runs on a few cores: its default of 50 partitions makes every commit several times slower."""
    if master.startswith("local"):
        return {"spark.databricks.delta.snapshotPartitions": "2"}
    return {}


def spark_jars(config: Config) -> list[str]:
    jar_dir = Path(config.path("spark.jar_dir"))
    jars = sorted(glob.glob(str(jar_dir / "*.jar")))
    if not any(Path(j).name.startswith("delta-spark") for j in jars):
        raise ConfigError(f"no Spark jars in {jar_dir}: run the set-up first (make setup)")
    return jars


def build_session(config: Config, app: str, extra: dict[str, str] | None = None):
    """A SparkSession on config's master with Delta, Kafka and the protobuf decoder jars."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    builder = SparkSession.builder.appName(f"{config.get('spark.app_name_prefix')}-{app}")
    settings: dict[str, str] = {}
    if not os.environ.get(SUBMITTED_ENV):
        # Started from Python (tests, notebooks): apply what spark-submit.sh would have passed.
        builder = builder.master(config.get("spark.master"))
        settings.update(spark_defaults())
        settings["spark.jars"] = ",".join(spark_jars(config))
        settings["spark.sql.shuffle.partitions"] = str(config.get("spark.shuffle_partitions"))
        settings.update(master_defaults(config.get("spark.master")))
        settings.update(config.spark_options())
    settings.update(extra or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
