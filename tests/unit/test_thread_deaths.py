"""Background threads killed under the bridge's services are counted, reported and started
again (issue 40): `core/threads.SupervisedThread` and the store reader's follow thread, killed
by an exception raised inside the running thread (CPython's PyThreadState_SetAsyncExc, as a
fault would end it), not by a flag the code checks."""
from __future__ import annotations

import ctypes
import functools
import random
import threading

import pyarrow as pa

from core.threads import SupervisedThread
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, ReaderSettings, StoreReader, write_messages
from tests.unit.test_store_query import random_rows
from tests.waiting import wait_until

until = functools.partial(wait_until, step=0.01)  # a thread's restart is quick: poll often


def kill(thread_name: str, exc: type[BaseException] = SystemExit) -> None:
    """Raise `exc` inside the running thread named `thread_name`."""
    target = [t for t in threading.enumerate() if t.name == thread_name]
    assert len(target) == 1, [t.name for t in threading.enumerate()]
    ident = target[0].ident
    assert ident is not None
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc))
    assert done == 1


def test_a_killed_supervised_thread_is_counted_reported_and_started_again():
    rounds: list[int] = []

    def body(stop: threading.Event) -> None:
        rounds.append(len(rounds))
        while not stop.wait(0.01):
            pass

    t = SupervisedThread("test-supervised", body, restart_after_s=0.05)
    assert t.problem() is None
    t.start()
    until(lambda: len(rounds) == 1)
    kill("test-supervised")
    until(lambda: len(rounds) == 2)
    assert t.failures == 1 and isinstance(t.failed, SystemExit) and t.alive
    problem = t.problem()
    assert problem is not None and "test-supervised" in problem and "restarted" in problem
    t.stop()
    t.join(5)
    assert not t.alive and t.problem() is not None  # recent failure still reported, never "not running"
    assert "not running" not in (t.problem() or "")


def test_a_killed_store_reader_follower_keeps_following_new_versions(tmp_path):
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rnd = random.Random(seed)
    rows = random_rows(rnd, 60)  # (its rows have unique indexes: maybe fewer)
    rows.sort(key=lambda r: (r["received_time"], r["digest"]))
    path = str(tmp_path / "messages")
    write_messages(path, pa.Table.from_pylist(rows[:30], schema=MESSAGES_ARROW_SCHEMA))
    reader = StoreReader(ReaderSettings(path, refresh_interval_s=0.05))
    reader.follow()
    try:
        until(reader.hashes_ready.is_set)
        first = reader.snapshot.version if reader.snapshot else None
        follower = reader.follower
        assert follower is not None
        kill("store-reader-follow")
        until(lambda: follower.failures == 1)
        write_messages(path, pa.Table.from_pylist(rows[30:], schema=MESSAGES_ARROW_SCHEMA))
        until(lambda: reader.snapshot is not None and reader.snapshot.version != first)
        assert follower.alive and follower.failures == 1
        assert sum(f.stats.rows for f in reader.snapshot.files) == len(rows)
    finally:
        reader.close()


def test_a_jobs_metrics_thread_killed_is_started_again_and_exported(tmp_path):
    """The job driver's metrics threads (listener events, Delta appends) run supervised: killed,
    they start again, counted in waku_job_thread_failures{job,thread}."""
    from pipeline.spark.metrics import JobMetrics, JobMetricsSettings

    metrics = JobMetrics(None, JobMetricsSettings("store", str(tmp_path / "job_metrics")))  # type: ignore[arg-type]
    rounds: list[int] = []

    def loop() -> None:
        rounds.append(1)
        while not metrics._stop.wait(0.01):
            pass

    thread = metrics._supervised("job-metrics-test", loop)
    thread.restart_after_s = 0.05
    try:
        until(lambda: len(rounds) == 1)
        kill("job-metrics-test")
        until(lambda: len(rounds) == 2)
        value = metrics.registry.get_sample_value("waku_job_thread_failures",
                                                  {"job": "store", "thread": "job-metrics-test"})
        assert value == 1
    finally:
        metrics._stop.set()
        thread.stop()
        thread.join(5)


def test_a_failed_log_checkpoint_thread_is_started_again_by_the_next_commit(tmp_path, monkeypatch):
    from pipeline.spark.log_checkpoints import LogCheckpointer

    checkpointer = LogCheckpointer([str(tmp_path / "t")], interval=10)
    calls: list[int] = []

    def check_all() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise SystemExit("killed by the test")

    monkeypatch.setattr(checkpointer, "check_all", check_all)
    checkpointer.poke()
    until(lambda: checkpointer.failures == 1 and checkpointer._thread is None)
    checkpointer.poke()
    checkpointer.wait()
    assert len(calls) == 2 and checkpointer.failures == 1
