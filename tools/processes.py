"""Start the bridge and the demo publisher as child processes (for `tools/local_run.py`, the
benchmarks and the tests).

    bridge = start_bridge(["kafka.bootstrap_servers=127.0.0.1:9092", "bridge.tcp_port=0"])
    print(bridge.addrs[0])           # /ip4/.../tcp/.../p2p/<peer id>, read from its stdout
    demo = start_publisher(bridge.tcp_addr, rate=5, count=0)
    ...
    demo.terminate(); bridge.stop()  # SIGTERM: the bridge flushes Kafka, then exits 0
"""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parent.parent


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (also one of another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Ports handed out below Linux's ephemeral range (ip_local_port_range, 32768-60999 by default):
# the kernel also gives ephemeral ports to outgoing connections as their source port, so one
# picked there could be taken by a client's connection before its server binds it (a cluster
# node's bind failed so: "Address already in use", 2026-11-30).
PORT_RANGE = (20000, 32767)
_given: set[int] = set()
_pick = random.SystemRandom()  # not the seeded global generator of a test or benchmark


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now, below the ephemeral range and not handed out before by this
    process (the OS's pick if none is found)."""
    for _ in range(200):
        port = _pick.randint(*PORT_RANGE)
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _given.add(port)
        return port
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _stat_cpu_s(stat: str) -> float:
    """User + system CPU seconds from a /proc/<pid>/stat line."""
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far (benchmarks)."""
    return _stat_cpu_s(Path(f"/proc/{pid}/stat").read_text())


def _group_members(pgid: int) -> Iterator[tuple[str, str]]:
    """(pid, /proc/<pid>/stat text) of every live process in process group `pgid` (none where
    /proc is missing)."""
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[2]) == pgid:   # field 5 of stat: pgrp
            yield d, stat


def group_pids(pgid: int) -> list[int]:
    """The pids of every live process in process group `pgid`."""
    return [int(d) for d, _ in _group_members(pgid)]


def group_cpu_by_pid(pgid: int) -> dict[int, float]:
    """{pid: CPU seconds (user + system) so far} of every live process in process group `pgid`."""
    return {int(d): _stat_cpu_s(stat) for d, stat in _group_members(pgid)}


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of every live process in process group `pgid` (benchmarks:
    where the cores went). 0 where /proc is missing."""
    return sum(_stat_cpu_s(stat) for _, stat in _group_members(pgid))


# JVM threads by what they do, from their names (/proc/<pid>/task/<tid>/comm): the JIT's
# compilers ("C2 CompilerThre", "C1 CompilerThre"), the garbage collector's threads, Spark's
# task threads; the rest (the driver's scheduling, Delta's commits, the stream thread) is "other".
JVM_THREAD_KINDS = (("jit", ("CompilerThre", "Sweeper thread")),
                    ("gc", ("GC Thread", "G1 ", "VM Thread")),
                    ("tasks", ("Executor task",)))


def jvm_threads_cpu_s(pgid: int) -> dict[str, float]:
    """CPU seconds so far of every Java process in process group `pgid`, by thread kind
    (JVM_THREAD_KINDS): how much of a Spark job's CPU its JIT takes (benchmarks). "other" is
    the rest of the processes' CPU, threads that ended included (Spark's idle task threads end
    after a minute, and their CPU then moves from "tasks" to "other"), so the kinds add up to the
    processes' CPU; the JIT's and the GC's threads live as long as the JVM."""
    out = {kind: 0.0 for kind, _ in JVM_THREAD_KINDS} | {"other": 0.0}
    for d, stat in _group_members(pgid):
        try:
            if Path(f"/proc/{d}/comm").read_text().strip() != "java":
                continue
            tasks = os.listdir(f"/proc/{d}/task")
        except OSError:
            continue
        out["other"] += _stat_cpu_s(stat)  # the whole process; its named threads are taken out below
        for t in tasks:
            try:
                name = Path(f"/proc/{d}/task/{t}/comm").read_text().strip()
                cpu = _stat_cpu_s(Path(f"/proc/{d}/task/{t}/stat").read_text())
            except OSError:
                continue
            kind = next((k for k, marks in JVM_THREAD_KINDS if any(m in name for m in marks)), None)
            if kind is not None:
                out[kind] += cpu
                out["other"] -= cpu
    return out


def stop_processes(procs: Iterable[subprocess.Popen], grace_s: float, *, group: bool = False) -> None:
    """SIGTERM to each running process (with `group`, to the process group it leads: a job and
    the JVMs it started), then up to `grace_s` in all for them (with `group`, every member of
    their groups) to exit; SIGKILL what is left."""
    procs = list(procs)

    def signal_(proc: subprocess.Popen, sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_left(proc: subprocess.Popen) -> bool:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    for proc in procs:
        if proc.poll() is None:
            signal_(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_(proc, signal.SIGKILL)
            proc.wait()
        while group and group_left(proc):
            if time.monotonic() >= deadline:
                signal_(proc, signal.SIGKILL)
                break
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen, grace_s: float, *, group: bool = False) -> int:
    """`stop_processes` of one process; returns its exit code."""
    stop_processes([proc], grace_s, group=group)
    return proc.returncode


def bridge_command(overrides: Sequence[str] = (), config_file: str | None = None,
                   nwaku_args: Sequence[str] = ()) -> list[str]:
    """argv of `waku-bridge run` with nwaku's options (`--cluster-id=2`, ...) and `--set`
    overrides (same interpreter, works without install)."""
    cmd = [sys.executable, "-m", "ingest.cli", "run", *nwaku_args]
    if config_file:
        cmd += ["--config", config_file]
    for item in overrides:
        cmd += ["--set", item]
    return cmd


def publisher_command(peer: str, *, rate: float = 5.0, count: int = 0, payload_size: int = 0,
                      pubsub_topic: str | None = None, content_topic: str | None = None) -> list[str]:
    """argv of `waku-bridge publish` (count 0: until SIGTERM)."""
    cmd = [sys.executable, "-m", "ingest.cli", "publish", "--peer", peer, "--rate", str(rate),
           "--count", str(count)]
    if payload_size:
        cmd += ["--payload-size", str(payload_size)]
    if pubsub_topic:
        cmd += ["--pubsub-topic", pubsub_topic]
    if content_topic:
        cmd += ["--content-topic", content_topic]
    return cmd


@dataclass
class BridgeProcess:
    proc: subprocess.Popen[str]
    addrs: list[str]
    lines: list[str] = field(default_factory=list)  # everything it printed on stdout

    @property
    def peer_id(self) -> str:
        return self.addrs[0].rsplit("/p2p/", 1)[1]

    @property
    def tcp_addr(self) -> str:
        return next(a for a in self.addrs if "/ws/" not in a and "/wss/" not in a)

    def wait_rest_url(self, timeout: float = 30.0) -> str | None:
        """The REST API's base URL from the bridge's `rest api on <url>` line (it comes after the
        listen addresses); None when the API is off or the line does not come within `timeout`."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            url = next((x.removeprefix("rest api on ") for x in self.lines if x.startswith("rest api on ")), None)
            if url is not None:
                return url
            time.sleep(0.05)
        return None

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, wait for the flush and exit; SIGKILL after `timeout`. Returns the exit code."""
        return stop_process(self.proc, timeout)


def start_bridge(
    overrides: Sequence[str] = (),
    *,
    config_file: str | None = None,
    log: IO[str] | int | None = None,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    nwaku_args: Sequence[str] = (),
) -> BridgeProcess:
    """Start `waku-bridge run` and wait for its `listening on` lines. Its stderr (logs) goes to
    `log` (a file, subprocess.DEVNULL, or None: inherited). Raises RuntimeError if it exits
    or prints nothing in `timeout` seconds."""
    proc = subprocess.Popen(
        bridge_command(overrides, config_file, nwaku_args), stdout=subprocess.PIPE, stderr=log, text=True,
        cwd=REPO_ROOT, env={**os.environ, **(env or {})}, start_new_session=True,
    )
    bridge = BridgeProcess(proc, [])

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            bridge.lines.append(line)
            if line.startswith("listening on "):
                bridge.addrs.append(line[len("listening on "):])

    threading.Thread(target=pump, daemon=True).start()
    # `timeout` counts from the process's last CPU progress: on a busy machine a bridge still
    # importing its libraries is slow, not stuck (at most 10 timeouts in all).
    began = last_progress = time.monotonic()
    cpu = -1.0
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"waku-bridge exited with {proc.returncode} before listening")
        if bridge.addrs:
            time.sleep(0.2)  # every listener prints its line at once
            return bridge
        now = time.monotonic()
        try:
            used = proc_cpu_s(proc.pid)
        except (OSError, ValueError, IndexError):
            used = cpu
        if used != cpu:
            cpu, last_progress = used, now
        if now - last_progress > timeout or now - began > 10 * timeout:
            break
        time.sleep(0.05)
    bridge.stop(5)
    raise RuntimeError(f"waku-bridge printed no listen address after {time.monotonic() - began:.0f} s "
                       f"({time.monotonic() - last_progress:.0f} s without CPU progress)")


def start_publisher(peer: str, *, rate: float = 5.0, count: int = 0, payload_size: int = 0,
                    log: IO[str] | int | None = None, **kwargs: str) -> subprocess.Popen[str]:
    """Start `waku-bridge publish` towards `peer`; its stdout has JSON progress lines."""
    return subprocess.Popen(
        publisher_command(peer, rate=rate, count=count, payload_size=payload_size, **kwargs),
        stdout=subprocess.PIPE, stderr=log, text=True, cwd=REPO_ROOT, start_new_session=True,
    )
