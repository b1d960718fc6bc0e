"""SparkSession factory: Delta extensions, the jars resolved at set-up, any master.

The same settings reach `spark-submit` through spark-submit.sh (core/spark_conf.py holds them),
so a job behaves the same whether it is started from Python (tests, notebooks) or submitted to
a cluster.
"""
from __future__ import annotations

import os
import sys

from core.spark_conf import SUBMITTED_ENV, SparkSettings, master_defaults, spark_defaults


def build_session(settings: SparkSettings, app: str, extra: dict[str, str] | None = None):
    """A SparkSession on the settings' master with Delta, Kafka and the protobuf decoder jars."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(f"{settings.app_name_prefix}-{app}")
    conf: dict[str, str] = {}
    if not os.environ.get(SUBMITTED_ENV):
        # Started from Python (tests, notebooks): apply what spark-submit.sh would have passed.
        builder = builder.master(settings.master)
        conf.update(spark_defaults())
        conf["spark.jars"] = ",".join(settings.jars())
        conf["spark.sql.shuffle.partitions"] = str(settings.shuffle_partitions)
        conf.update(master_defaults(settings.master))
        conf.update(settings.options)
    conf.update(extra or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
