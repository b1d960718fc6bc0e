"""jvm/ `StopQueriesFirst`, the shutdown hook every driver gets from `build_session`: it stops the
session's streaming queries (a running batch cancelled, the query ended stopped, not failed)
before Spark's own hook stops the SparkContext. The whole path (SIGTERM to a real-time filter
job) is tests/integration/test_filter_realtime.py's stop; here, the stop itself on a query
whose batch is running."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration


def test_stop_all_stops_a_query_inside_its_batch_and_it_ends_stopped(spark, tmp_path):
    # A batch that runs for seconds (each row sleeps), so the stop lands inside it.
    slow = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
            .selectExpr("value", "reflect('java.lang.Thread', 'sleep', cast(200 as bigint)) AS slept"))
    query = (slow.writeStream.format("noop").queryName("stop_queries_first_test")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="100 milliseconds")
             .start())
    try:
        deadline = time.monotonic() + 120
        while not query.status["isTriggerActive"] or not query.status["isDataAvailable"]:
            assert time.monotonic() < deadline, query.status
            time.sleep(0.05)
        jvm = spark._jvm
        stopped = jvm.waku.pipeline.StopQueriesFirst.stopAll(spark._jsparkSession)
        assert stopped == 1
        assert not query.isActive
        assert query.exception() is None  # stopped, not "terminated with error"
        assert jvm.waku.pipeline.StopQueriesFirst.stopAll(spark._jsparkSession) == 0  # none left
    finally:
        if query.isActive:
            query.stop()
