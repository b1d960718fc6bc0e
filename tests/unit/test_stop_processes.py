"""tools/processes.stop_processes: SIGTERM first, SIGKILL only for what outlives the grace time,
a whole process group with `group`."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from tools.processes import pid_alive, stop_process, stop_processes

IGNORES_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(60)")


def _ready(argv: list[str], **kw) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kw)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_process_that_stops_on_sigterm_exits_with_it_and_one_that_ignores_it_is_killed_after_the_grace():
    polite = _ready([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"])
    stubborn = _ready([sys.executable, "-c", IGNORES_TERM])
    began = time.monotonic()

    stop_processes([polite, stubborn], 1.0)

    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL
    assert 0.9 <= time.monotonic() - began < 10


def test_group_kills_what_the_leader_started_after_the_grace_and_leaves_a_finished_process_alone():
    # The leader starts a child in its group that ignores SIGTERM, prints its pid, and waits.
    proc = subprocess.Popen([sys.executable, "-c",
                             "import subprocess, sys, time\n"
                             f"c = subprocess.Popen([sys.executable, '-c', {IGNORES_TERM!r}],"
                             " stdout=subprocess.PIPE, text=True)\n"
                             "c.stdout.readline(); print(c.pid, flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()

    stop_processes([proc, done], 1.0, group=True)

    assert proc.returncode == -signal.SIGTERM and done.returncode == 0
    deadline = time.monotonic() + 10
    while pid_alive(child) and time.monotonic() < deadline:  # killed with the group; reaped by init
        time.sleep(0.05)
    assert not pid_alive(child)  # SIGKILLed with the group once the grace was over
    assert stop_process(proc, 1.0) == -signal.SIGTERM  # already stopped: nothing sent, same code
