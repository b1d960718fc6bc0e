"""Background threads that are never left dead (the bridge's services, the jobs' drivers).

A `SupervisedThread` runs its body in a daemon thread until `stop()`. When the body raises, the
failure is counted (`failures`, `failed`, `failed_at`), logged (with its traceback the first
time, one line after) and the body is started again after `restart_after_s`: a thread that dies
would otherwise leave the bridge answering while doing nothing (a store that never sees a new
table version, a job whose metrics stop). In the bridge, `Bridge.threads()` reads them for its
health (`Bridge.health_problems`, the REST API's /health) and the metrics
`waku_bridge_thread_failures{thread}` / `waku_bridge_thread_alive{thread}`.

Threads whose death cannot be recovered in place (the Kafka producers' feeders: records in
flight would be lost) are not supervised here: the bridge stops with an error instead
(`ingest/node.py`).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# A thread whose last failure is this recent is reported as a problem (it may still be failing).
RECENT_FAILURE_S = 60.0


class SupervisedThread:
    """`body(stop)` in a daemon thread named `name`, started again after a failure until `stop()`.

    The body returns when `stop` is set (it should wait on it rather than sleep); returning
    otherwise ends the thread as done, not as failed."""

    def __init__(self, name: str, body: Callable[[threading.Event], None], *,
                 restart_after_s: float = 2.0) -> None:
        self.name = name
        self.body = body
        self.restart_after_s = restart_after_s
        self.failures = 0
        self.failed: BaseException | None = None
        self.failed_at: float | None = None  # time.monotonic() of the last failure
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def problem(self) -> str | None:
        """One line when this thread is not doing its work (dead, or failed in the last minute)."""
        if self.started and not self.alive and not self.stopping.is_set():
            return f"thread {self.name} is not running: {self._describe()}"
        if self.failed_at is not None and time.monotonic() - self.failed_at < RECENT_FAILURE_S:
            return f"thread {self.name} failed {self.failures} times, last: {self._describe()} (restarted)"
        return None

    def _describe(self) -> str:
        exc = self.failed
        return "ended" if exc is None else f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        restart = False
        while not self.stopping.is_set():
            try:
                # The wait before a restart is inside the try: what kills the thread during it is
                # counted and started again like a failure of the body.
                if restart and self.stopping.wait(self.restart_after_s):
                    return
                restart = True
                self.body(self.stopping)
                return
            except BaseException as exc:  # counted, logged, started again (SystemExit too)
                self.failures += 1
                self.failed = exc
                self.failed_at = time.monotonic()
                log.error("thread %s failed (%d so far), restarting in %.0f s: %s: %s", self.name, self.failures,
                          self.restart_after_s, type(exc).__name__, exc, exc_info=self.failures == 1)
