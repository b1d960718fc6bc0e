"""A Spark standalone cluster on this machine, from the pip-installed pyspark: one master and N
workers started with `spark-class` (for tests, and for trying the jobs on a real cluster
manager before a real deployment; docs/cluster.md).

    python -m tools.spark_cluster start [--workers 2 --cores 1 --memory 1g --port 7077]
    python -m tools.spark_cluster status
    ./spark-submit.sh store --master spark://127.0.0.1:7077 --executor-memory 512m
    python -m tools.spark_cluster stop

From Python (the tests):

    with StandaloneCluster(tmp_path / "spark") as cluster:     # free ports, torn down on exit
        ... ./spark-submit.sh store --master cluster.url ...
        cluster.state()                                      # the master's JSON

Every daemon runs in its own process group, so stopping a worker also ends the executors it
launched. The state (ports, process ids, logs, the workers' work dirs with each executor's
stdout and stderr) lives in one directory, `var/spark-cluster` by default.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.config import REPO_ROOT
from tools.processes import free_port, pid_alive

DEFAULT_DIR = REPO_ROOT / "var" / "spark-cluster"
LAUNCHES = 3  # launches of a daemon that exits at start before giving up
# Answers in a row on the master's web UI port that are not its JSON before the port counts as
# taken by another server (a master still starting can give one).
NOT_JSON_ANSWERS = 3
log = logging.getLogger(__name__)
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_class() -> str:
    """`spark-class` of the pip-installed pyspark (or of $SPARK_HOME when set)."""
    if os.environ.get("SPARK_HOME"):
        return str(Path(os.environ["SPARK_HOME"]) / "bin" / "spark-class")
    local = Path(sys.executable).parent / "spark-class"
    if local.exists():
        return str(local)
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed: run the set-up first (make setup)")
    return str(Path(list(spec.submodule_search_locations)[0]) / "bin" / "spark-class")


def _stop_group(pid: int, timeout: float) -> None:
    """SIGTERM the process group led by `pid` (the daemon and the executors it launched), then
    SIGKILL what is left after `timeout`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap it when it is our child
            except ChildProcessError:
                pass
            if not pid_alive(pid):
                break
            time.sleep(0.2)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return  # nothing left in the group


@dataclass
class StandaloneCluster:
    """A master and `workers` workers on `host`; port 0: a free port."""

    root: Path = DEFAULT_DIR
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    host: str = "127.0.0.1"
    port: int = 0
    webui_port: int = 0
    daemon_memory: str = "256m"  # heap of the master and worker daemons (not of executors)
    pids: dict[str, int] = field(default_factory=dict)
    worker_webui_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self._procs: dict[str, subprocess.Popen] = {}  # the daemons this object launched

    def _exited(self, name: str) -> bool:
        """A daemon launched here is our child: polling reaps it (a zombie still has a pid)."""
        proc = self._procs.get(name)
        if proc is not None and proc.pid == self.pids.get(name):
            return proc.poll() is not None
        return not pid_alive(self.pids[name])

    # -- addresses --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def webui(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def work_dir(self, i: int) -> Path:
        """Worker i's work dir: <app id>/<executor id>/{stdout,stderr} of every executor it ran."""
        return self.root / f"worker-{i}" / "work"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # A daemon whose port is taken exits (start() launches it again) instead of binding the
        # next port; no REST submission server (it would bind the fixed port 6066).
        opts = "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false"
        env.update({"SPARK_LOCAL_IP": self.host, "SPARK_DAEMON_MEMORY": self.daemon_memory,
                    "SPARK_DAEMON_JAVA_OPTS": f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} {opts}".strip(),
                    "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
                    "SPARK_LOG_DIR": str(self.root / "logs")})
        return env

    # -- life cycle -------------------------------------------------------------------------

    def _launch(self, name: str, args: list[str]) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        log = (self.root / "logs" / f"{name}.log").open("ab")
        proc = subprocess.Popen([spark_class(), *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=self.env(), cwd=self.root,
                                start_new_session=True)
        log.close()
        self.pids[name] = proc.pid
        self._procs[name] = proc

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        """Start the master, then the workers; return once every worker is registered ALIVE.

        Ports are picked free, then bound by a JVM a moment later: another process can take one
        in between. The daemons run with `spark.port.maxRetries=0`, so such a daemon exits
        instead of moving silently to the next port (where the workers, or this object, would
        never find it), and it is launched again on newly picked ports, up to `LAUNCHES` times."""
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        fixed_port, fixed_ui = self.port, self.webui_port
        try:
            for attempt in range(1, LAUNCHES + 1):
                self.port = fixed_port or free_port(self.host)
                self.webui_port = fixed_ui or free_port(self.host)
                self._launch("master", [MASTER_CLASS, "--host", self.host, "--port", str(self.port),
                                        "--webui-port", str(self.webui_port)])
                if self._wait(lambda s: s.get("status") == "ALIVE", "the master", deadline,
                              relaunch=("master",) if attempt < LAUNCHES else ()):
                    break
            self.worker_webui_ports = [0] * self.workers
            launches = dict.fromkeys(range(self.workers), 0)

            def launch_worker(i: int) -> None:
                self.worker_webui_ports[i] = free_port(self.host)
                launches[i] += 1
                self._launch_worker(i)

            for i in range(self.workers):
                launch_worker(i)
            while not self._wait(lambda s: s.get("aliveworkers", 0) >= self.workers, f"{self.workers} workers",
                                 deadline, relaunch=("worker-",)):
                for name in [n for n in self.pids if n != "master" and self._exited(n)]:
                    i = int(name.split("-")[1])
                    if launches[i] >= LAUNCHES:
                        raise RuntimeError(f"spark {name} exited {launches[i]} times; see {self.root / 'logs'}")
                    log.warning("spark %s exited at start (a port taken?); launching it again", name)
                    launch_worker(i)
        except BaseException:
            self.stop()
            raise
        self.save()
        return self

    def _launch_worker(self, i: int) -> None:
        self.work_dir(i).mkdir(parents=True, exist_ok=True)
        self._launch(f"worker-{i}", [WORKER_CLASS, "--host", self.host, "--cores", str(self.worker_cores),
                                     "--memory", self.worker_memory, "--webui-port", str(self.worker_webui_ports[i]),
                                     "--work-dir", str(self.work_dir(i)), self.url])

    def restart_worker(self, i: int, timeout: float = 120.0) -> subprocess.Popen:
        """Launch worker i again (after it died or was killed: its process group, the executors
        it ran with it), on its web UI port, and wait until the master lists it ALIVE; returns
        its process. The master hands it executors of applications short of their cores."""
        name = f"worker-{i}"
        if name in self.pids and not self._exited(name):
            _stop_group(self.pids[name], 15.0)
        ui = f"http://{self.host}:{self.worker_webui_ports[i]}"
        try:  # the master lists the dead worker until its heartbeats time out: a new id is awaited
            earlier = {w.get("id") for w in self.state().get("workers", []) if w.get("webuiaddress") == ui}
        except (OSError, ValueError):
            earlier = set()
        self._launch_worker(i)
        self._wait(lambda s: any(w.get("webuiaddress") == ui and w.get("state") == "ALIVE"
                                 and w.get("id") not in earlier for w in s.get("workers", [])),
                   f"{name} registered again", time.monotonic() + timeout)
        self.save()
        return self._procs[name]

    def _wait(self, ok, what: str, deadline: float, relaunch: tuple[str, ...] = ()) -> bool:
        """Poll the master's JSON until `ok(state)`: True. A daemon that exited raises, unless
        its name starts with one of `relaunch`: then False (a master is stopped first, for the
        caller to launch again). Another server answering on the master's web UI port is treated
        as the master's port taken: False when the master may be launched again, else raises."""
        def may_relaunch(name: str) -> bool:
            return name.startswith(relaunch)  # () matches no name

        last: object = None
        not_json = 0  # answers in a row that were not the master's JSON
        while time.monotonic() < deadline:
            dead = [n for n in self.pids if self._exited(n)]
            if dead:
                fatal = [n for n in dead if not may_relaunch(n)]
                if fatal:
                    ports = f" (its ports {self.port}, {self.webui_port} taken?)" if "master" in fatal else ""
                    raise RuntimeError(f"spark {', '.join(fatal)} exited{ports}; see {self.root / 'logs'}")
                if "master" in dead:
                    self._drop_master(f"exited at start (port {self.port} or {self.webui_port} taken?)")
                return False
            try:
                state = self.state(timeout=2.0)
                not_json = 0
                if ok(state):
                    return True
                last = {k: state.get(k) for k in ("status", "aliveworkers")}
            except OSError as exc:
                last = exc
            except ValueError:
                # Not JSON: another server (another application's Spark UI) took the web UI port
                # picked for the master before the master bound it. A master still starting can
                # give one such answer too (seen once in CI): only NOT_JSON_ANSWERS in a row count.
                not_json += 1
                last = f"{not_json} answer(s) in a row that were not JSON"
                if not_json >= NOT_JSON_ANSWERS:
                    if not may_relaunch("master"):
                        raise RuntimeError(f"{self.webui} answers, but not as a spark master (port "
                                           f"{self.webui_port} taken?); see {self.root / 'logs'}") from None
                    self._drop_master(f"web UI port {self.webui_port} answers for another server")
                    return False
            time.sleep(0.5)
        raise TimeoutError(f"waiting for {what} of {self.url}: {last}; see {self.root / 'logs'}")

    def _drop_master(self, reason: str) -> None:
        """Stop the master for the caller to launch it again on new ports."""
        _stop_group(self.pids.pop("master"), 5.0)
        log.warning("spark master %s; launching it again", reason)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the workers (and their executors), then the master."""
        for name in sorted(self.pids, key=lambda n: n == "master"):
            _stop_group(self.pids[name], timeout)
        self.pids = {}
        state = self.root / "cluster.json"
        if state.exists():
            state.unlink()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what it reports --------------------------------------------------------------------

    def state(self, timeout: float = 5.0) -> dict:
        """The master's JSON (http://<host>:<webui>/json): status, workers, active and
        completed applications."""
        with urllib.request.urlopen(f"{self.webui}/json", timeout=timeout) as r:
            return json.loads(r.read())

    def worker_state(self, i: int, timeout: float = 5.0) -> dict:
        """Worker i's JSON: its executors and finished executors (with their application ids)."""
        with urllib.request.urlopen(f"http://{self.host}:{self.worker_webui_ports[i]}/json", timeout=timeout) as r:
            return json.loads(r.read())

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The executor dirs of an application in the workers' work dirs (one per executor JVM
        that a worker launched for it)."""
        return sorted(p for i in range(self.workers) for p in (self.work_dir(i) / app_id).glob("*") if p.is_dir())

    # -- the state file of the command line -------------------------------------------------

    def save(self) -> None:
        data = asdict(self)
        data["root"] = str(self.root)
        (self.root / "cluster.json").write_text(json.dumps(data, indent=2))

    @classmethod
    def load(cls, root: Path = DEFAULT_DIR) -> StandaloneCluster:
        path = Path(root) / "cluster.json"
        if not path.exists():
            raise FileNotFoundError(f"no cluster started from {root} (no {path.name})")
        return cls(**json.loads(path.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state, logs and work dirs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker (for its executors)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7077, help="master port (0: any free port)")
    parser.add_argument("--webui-port", type=int, default=8080, help="master web UI port (0: any free port)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.command == "start":
        if (args.dir / "cluster.json").exists():
            print(f"error: a cluster is already started from {args.dir} (stop it first)", file=sys.stderr)
            return 2
        cluster = StandaloneCluster(args.dir, args.workers, args.cores, args.memory, args.host, args.port,
                                    args.webui_port)
        try:
            cluster.start(args.timeout)
        except (RuntimeError, TimeoutError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"master {cluster.url}  web UI {cluster.webui}  workers {cluster.workers} x "
              f"{cluster.worker_cores} core(s) / {cluster.worker_memory}  state {args.dir}")
        print(f"submit: ./spark-submit.sh <job> --master {cluster.url} --executor-memory 512m")
        return 0
    try:
        cluster = StandaloneCluster.load(args.dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "stop":
        cluster.stop()
        print(f"stopped {cluster.url}")
        return 0
    try:
        state = cluster.state()
    except OSError as exc:
        print(f"{cluster.url}: not answering ({exc})")
        return 1
    print(f"{cluster.url} {state.get('status')}: {state.get('aliveworkers')} workers, "
          f"{state.get('coresused')}/{state.get('cores')} cores used")
    for app in state.get("activeapps", []):
        print(f"  running   {app['id']}  {app['name']}  {app.get('cores')} cores")
    for app in state.get("completedapps", []):
        print(f"  completed {app['id']}  {app['name']}  {app.get('state')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
