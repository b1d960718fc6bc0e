"""SparkSession factory: Delta extensions, the jars resolved at set-up, any master.

The same settings reach `spark-submit` through spark-submit.sh (core/spark_conf.py holds them),
so a job behaves the same whether it is started from Python (tests, notebooks) or submitted to
a cluster.
"""
from __future__ import annotations

import gc
import os
import sys
from typing import TYPE_CHECKING

from core.spark_conf import SUBMITTED_ENV, SparkSettings, master_defaults, spark_defaults

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
    stop_queries_first_on_shutdown(session)
    return session


# How long a driver's shutdown waits for its streaming queries to stop (their running batches
# cancelled) before the SparkContext stops anyway.
QUERY_STOP_TIMEOUT_S = 20


def stop_queries_first_on_shutdown(spark, timeout_s: int = QUERY_STOP_TIMEOUT_S) -> None:
    """When the driver's JVM shuts down (a job's SIGTERM), its streaming queries are stopped
    before Spark's own hook stops the SparkContext (jvm/ `StopQueriesFirst`): a query with a
    running Spark job then ends stopped, not "terminated with error" with a stack trace. Once
    per session."""
    jvm = spark._jvm
    assert jvm is not None  # a live session has its gateway
    jvm.waku.pipeline.StopQueriesFirst.install(spark._jsparkSession, timeout_s)


def register_java_function(spark, name: str, class_name: str, return_type) -> str:
    """Registers the Java UDF `class_name` (jvm/, on spark.jars) as SQL function `name` in
    `spark`, once per session (a streaming batch's cloned session sees its parent's); returns
    `name`."""
    if not spark.catalog.functionExists(name):
        spark.udf.registerJavaFunction(name, class_name, return_type)
    return name


def release_java_objects() -> None:
    """Frees, now, the Java side of the Python objects a micro-batch left behind (call it after
    the batch's function has returned, so its DataFrames are garbage).

    py4j keeps every Java object a method was called on in a reference cycle with its bound
    methods (`JavaObject._methods` holds `JavaMember`s whose `container` is the object), so
    the JVM's object lives until Python's cyclic collector finds the cycle. A batch's objects
    outlive its own young collections (it allocates hundreds of thousands of Python objects),
    and the oldest generation is collected rarely: the store job's JVM held the plans of ~25
    batches, 15M small objects (every offset literal of every batch's filter), which G1's
    concurrent marking traversed again and again (a fifth of the job's CPU at 30,000 msg/s;
    docs/decisions.md, session 22)."""
    gc.collect()


def freeze_start_up_objects() -> None:
    """Exempts the objects alive now (modules, classes, the session's proxies) from every later
    collection, so `release_java_objects` after each batch scans only what came since."""
    gc.collect()
    gc.freeze()


def delete_path(spark: SparkSession, path: str) -> bool:
    """Delete `path` recursively on its Hadoop file system (local, s3a://, ...); False when it
    was not there."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session has its gateway
    target = jvm.org.apache.hadoop.fs.Path(path)
    return bool(target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(target, True))
