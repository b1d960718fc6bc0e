"""filter_match's stop_outcome (what test_filter_realtime asserts of a SIGTERM'd filter job):
an ERROR after the queries stopped fails it, except the SparkContext's own race with its
local executor (a task refused by a thread pool shutting down)."""
from __future__ import annotations

from tests.benchmarks.filter_match import stop_outcome

STOP = "INFO StopQueriesFirst: 1 streaming queries stopped before the SparkContext\n"
RACE = ("2026-12-02T02:43:52.579Z dispatcher-event-loop-0 ERROR Executor launch task task 0.0 in stage 24.0 "
        "(TID 44) failed, reason: Task org.apache.spark.executor.Executor$TaskRunner@7f179995 rejected from "
        "java.util.concurrent.ThreadPoolExecutor@1[Shutting down, pool size = 1]\n")
OTHER = "2026-12-02T02:43:52.579Z stream execution thread ERROR MicroBatchExecution: Query failed\n"


def test_stop_outcomes():
    assert stop_outcome(STOP) == "stopped"
    assert stop_outcome(STOP + RACE) == "stopped"
    assert stop_outcome(STOP + OTHER).startswith("stopped, then: ")
    assert stop_outcome(STOP + RACE + OTHER).startswith("stopped, then: ") and "Query failed" in stop_outcome(
        STOP + RACE + OTHER)
    assert stop_outcome("query terminated with error\n" + STOP) == "terminated with error"
    assert stop_outcome(RACE) == "no stop logged"
