"""Tests wait on progress, not on fixed delays (the suite must pass on a busy machine)."""
from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import trio


async def until(check: Callable[[], Any], what: str, timeout: float = 60.0, step: float = 0.01) -> Any:
    """`check()` (a function or a coroutine function) polled every `step` s until it returns
    something true, which is returned; AssertionError(`what`) after `timeout` s."""
    deadline = trio.current_time() + timeout
    while True:
        got = check()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got
        if trio.current_time() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        await trio.sleep(step)


async def progress(get: Callable[[], float], target: float, what: str, stall_s: float = 60.0) -> None:
    """Until get() >= target; fails only when it stops moving for stall_s (a busy machine is slow)."""
    last, since = get(), trio.current_time()
    while get() < target:
        await trio.sleep(0.05)
        if get() != last:
            last, since = get(), trio.current_time()
        elif trio.current_time() - since > stall_s:
            raise AssertionError(f"{what}: stuck at {get()} of {target}")


def wait_until(predicate, timeout: float = 60.0, what: str = "condition", progress=None,
               cap: float = 900.0, step: float = 0.2) -> None:
    """(Blocking: for a test outside trio.) Until `predicate()`, polled every `step` s; fails after
    `timeout` s, or, with `progress` (a callable), after `timeout` s in which its value did not
    change, at most `cap` s in all (a busy machine)."""
    now = time.monotonic()
    deadline, hard, seen = now + timeout, now + cap, None
    while not predicate():
        if progress is not None:
            value = progress()
            if value != seen:
                seen, deadline = value, time.monotonic() + timeout
        if time.monotonic() > min(deadline, hard):
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)
