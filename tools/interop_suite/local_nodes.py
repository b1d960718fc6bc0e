"""pytest plugin: the interop suite's nodes as local processes instead of docker containers.

Loaded into the suite's own pytest (`-p local_nodes`, this directory on PYTHONPATH; run.py does
it). It replaces the suite's DockerManager (src/node/docker_mananger.py) in src/node/waku_node.py
by LocalProcessManager, so WakuNode.start/stop/kill/restart/pause/unpause drive processes:

- an image whose name holds "nwaku" (the suite's test for an nwaku node) is this repository's
  node: `<WAKU_SUITE_PYTHON> -m ingest.cli run <the suite's nwaku flags> --set ...`, with cwd
  WAKU_SUITE_MAIN (the newest main at every start), our own settings after `--set`: the shared
  Kafka broker, the warehouse and checkpoints, an identity file of its own;
- an image whose name holds "go-waku" is go-waku v0.10.0's node (`cmd/waku`, WAKU_SUITE_GOWAKU)
  with the suite's go-waku flags.

Flags are passed as the suite's DockerManager passes them (`--key=value`, a list repeated, a
None value bare). Container IPs become 127.0.0.1 (generate_random_ext_ip), every listener binds
127.0.0.1 only (listen, REST, metrics, websocket addresses), and each node gets 5 free ports of
its own (generate_ports: REST, TCP, websocket, discv5 UDP, metrics). pause/unpause are
SIGSTOP/SIGCONT to the process group, restart is stop + start with the same command line (same
node key, same ports), stop is SIGTERM then SIGKILL after 10 s. A node that exited by itself
raises docker's NotFound("No such container") on stop, which the suite reports as a crash.

Environment (run.py sets it): WAKU_SUITE_KAFKA (bootstrap servers, required for our node),
WAKU_SUITE_RUN_DIR (node state and logs), WAKU_SUITE_WAREHOUSE / WAKU_SUITE_CHECKPOINTS (the
shared Delta warehouse the Spark jobs write), WAKU_SUITE_ISOLATION ("shared": every node on the
shared topics, warehouse and Spark jobs; "test": each test its own Kafka topics and an empty
warehouse, store answered by the bridge's Kafka tail alone and no filter matching, since the
Spark jobs read the shared topics), WAKU_SUITE_SETS (more `--set` items for our node, separated
by spaces), WAKU_SUITE_OUR_LOG_LEVEL (replaces the suite's --log-level for our node; empty: the
suite's), WAKU_SUITE_RELAY_SHIM=1 (our node started without the suite's --relay=false, which it
refuses: it always relays), WAKU_SUITE_HEALTH_SHIM=1 (_health_shim),
WAKU_SUITE_GOWAKU_DEFAULT_SHARD (default 1: a go-waku node relaying without a
--pubsub-topic gets /waku/2/rs/<cluster>/0, as the suite's nwaku gets --shard=0; go-waku v0.10.0
cannot build its metadata without one).

This module imports nothing of this repository (tools/ start the node as a process) and only
the standard library and pytest: it runs in the suite's virtualenv.
"""
from __future__ import annotations

import importlib
import itertools
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import uuid
from pathlib import Path
from typing import Any

import pytest

MAIN = Path(os.environ.get("WAKU_SUITE_MAIN", "/work/main"))
OUR_PYTHON = os.environ.get("WAKU_SUITE_PYTHON", str(MAIN / ".venv" / "bin" / "python"))
GOWAKU_BIN = os.environ.get("WAKU_SUITE_GOWAKU", str(MAIN / ".cache" / "interop" / "gowaku-node"))
RUN_DIR = Path(os.environ.get("WAKU_SUITE_RUN_DIR", "/work/interop-run")).resolve()
LOOPBACK = "127.0.0.1"
STOP_TIMEOUT_S = 10.0

_ports_lock = threading.Lock()
_used_ports: set[int] = set()
# Each pytest process (an xdist worker: gw0, gw1, ...) hands out ports from a range of its own.
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw").removeprefix("gw") or 0)
_port_cursor = itertools.count(21000 + (_worker * 7 + os.getpid() % 7) * 700)
_containers: list[LocalContainer] = []
_current_test: dict[str, Any] = {"tag": "session", "seq": 0}
_errors: dict[str, type[Exception]] = {}


def record(what: str, detail: str = "") -> None:
    """One line per adaptation made for a test (the shims below), in <run dir>/adaptations.jsonl:
    which tests pass only because of one is counted from it."""
    import json

    with open(RUN_DIR / "adaptations.jsonl", "a") as out:
        out.write(json.dumps({"test": _current_test["tag"], "what": what, "detail": detail}) + "\n")


# -- docker, not needed -----------------------------------------------------------------------


def _stub_docker() -> None:
    """The suite's docker_mananger.py imports docker (and docker.types, docker.errors) at module
    level; without the package installed, stand-ins that are never called for a container."""
    try:
        importlib.import_module("docker")
        errors = importlib.import_module("docker.errors")
        _errors["NotFound"], _errors["APIError"] = errors.NotFound, errors.APIError
        return
    except ImportError:
        pass
    docker = types.ModuleType("docker")
    dtypes = types.ModuleType("docker.types")
    derrors = types.ModuleType("docker.errors")

    class NotFound(Exception):
        pass

    class APIError(Exception):
        pass

    def no_docker(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("docker is replaced by local processes (tools/interop_suite/local_nodes.py)")

    derrors.NotFound = NotFound  # type: ignore[attr-defined]
    derrors.APIError = APIError  # type: ignore[attr-defined]
    dtypes.IPAMConfig = no_docker  # type: ignore[attr-defined]
    dtypes.IPAMPool = no_docker  # type: ignore[attr-defined]
    docker.types = dtypes  # type: ignore[attr-defined]
    docker.errors = derrors  # type: ignore[attr-defined]
    docker.from_env = no_docker  # type: ignore[attr-defined]
    sys.modules.update({"docker": docker, "docker.types": dtypes, "docker.errors": derrors})
    _errors["NotFound"], _errors["APIError"] = NotFound, APIError


# -- ports ------------------------------------------------------------------------------------


def _bindable(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        for host in (LOOPBACK, "0.0.0.0"):
            with socket.socket(socket.AF_INET, kind) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` ports free for TCP and UDP, never handed out before in this run (a stopped node's
    ports may still be in TIME_WAIT, and a restarted node keeps its own)."""
    out: list[int] = []
    with _ports_lock:
        while len(out) < count:
            port = next(_port_cursor)
            if port > 60000:
                raise RuntimeError("no free ports left below 60000")
            if port in _used_ports or not _bindable(port):
                continue
            _used_ports.add(port)
            out.append(port)
    return out


# -- processes --------------------------------------------------------------------------------


class LocalContainer:
    """A node process with the part of docker's Container the suite uses."""

    def __init__(self, name: str, argv: list[str], cwd: Path, log_path: str, env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.log_path = log_path
        self.env = env
        self.id = uuid.uuid4().hex
        self.short_id = self.id[:12]
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.stopped_by_us = False

    def start(self) -> None:
        os.makedirs(os.path.dirname(self.log_path) or ".", exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"# {time.strftime('%H:%M:%S')} start: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        self.paused = False
        self.stopped_by_us = False

    @property
    def status(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            return "exited"
        return "paused" if self.paused else "running"

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is not None and not self.stopped_by_us:
            code = self.proc.returncode
            raise _errors["NotFound"](f"No such container: {self.short_id} ({self.name} exited by itself, "
                                      f"code {code}; log {self.log_path})")
        self.stopped_by_us = True
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(10)
        self._signal(signal.SIGKILL)  # anything left in its group

    def kill(self) -> None:
        if self.proc is None:
            return
        self.stopped_by_us = True
        self._signal(signal.SIGKILL)
        self.proc.wait(10)
        self.paused = False

    def remove(self) -> None:
        """Nothing to remove: the log stays in the suite's log directory."""

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)
        self.paused = True

    def unpause(self) -> None:
        self._signal(signal.SIGCONT)
        self.paused = False


def _docker_cli_args(args: dict[str, Any]) -> list[str]:
    """The suite's DockerManager.start_container turns the flag dict into words this way."""
    out: list[str] = []
    for key, value in args.items():
        if isinstance(value, list):
            out.extend(f"--{key}={item}" for item in value)
        elif value is None:
            out.append(f"{key}")
        else:
            out.append(f"--{key}={value}")
    return out


def _loopback(value: Any) -> Any:
    """Any IPv4 address of the suite's docker network in a value becomes 127.0.0.1."""
    if isinstance(value, list):
        return [_loopback(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"\b172\.18\.\d{1,3}\.\d{1,3}\b", LOOPBACK, value).replace("0.0.0.0", LOOPBACK)
    return value


def _node_dir(name: str) -> Path:
    path = RUN_DIR / "nodes" / f"{_current_test['seq']:05d}-{name}"
    path.mkdir(parents=True, exist_ok=True)
    return path


_created_topics: set[str] = set()


def _ensure_topics(names: list[str]) -> None:
    """Create a test's own topics (the node creates only its push topic), with the repository's
    core.kafka.ensure_topics in its own interpreter: one partition each, the broker's clock."""
    missing = [n for n in names if n not in _created_topics]
    if not missing:
        return
    code = ("import sys; from core.kafka import ensure_topics; "
            "ensure_topics(sys.argv[1], {name: 1 for name in sys.argv[2:]})")
    subprocess.run([OUR_PYTHON, "-c", code, os.environ["WAKU_SUITE_KAFKA"], *missing], cwd=MAIN, check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    _created_topics.update(missing)


def our_command(args: dict[str, Any], node_dir: Path) -> list[str]:
    """Our node: the suite's nwaku flags (addresses on loopback) and our settings after --set."""
    flags = {k: _loopback(v) for k, v in args.items()}
    if os.environ.get("WAKU_SUITE_RELAY_SHIM", "0") == "1" and str(flags.get("relay", "")).lower() == "false":
        # This node refuses --relay=false (it always relays); the shim starts it relaying.
        del flags["relay"]
        record("relay=false dropped")
    level = os.environ.get("WAKU_SUITE_OUR_LOG_LEVEL", "")
    if level and "log-level" in flags:
        flags["log-level"] = level
    sets = [
        f"kafka.bootstrap_servers={os.environ['WAKU_SUITE_KAFKA']}",
        f"bridge.key_file={node_dir / 'key'}",
    ]
    partitions = os.environ.get("WAKU_SUITE_PARTITIONS", "")
    if partitions:
        sets += [f"topics.messages_partitions={partitions}", f"topics.subscriptions_partitions={partitions}",
                 "topics.push_partitions=1"]
    if os.environ.get("WAKU_SUITE_ISOLATION", "shared") == "test":
        tag = f"suite.{os.getpid()}.{_current_test['seq']:05d}"
        test_dir = RUN_DIR / "tests" / tag
        _ensure_topics([f"{tag}.messages", f"{tag}.subscriptions"])
        sets += [f"topics.messages={tag}.messages", f"topics.subscriptions={tag}.subscriptions",
                 f"topics.push_prefix={tag}.push.", f"warehouse.root={test_dir / 'warehouse'}",
                 f"warehouse.checkpoints={test_dir / 'checkpoints'}",
                 "store_service.tail_lookback_s=86400"]
    else:
        if os.environ.get("WAKU_SUITE_WAREHOUSE"):
            sets.append(f"warehouse.root={os.environ['WAKU_SUITE_WAREHOUSE']}")
        if os.environ.get("WAKU_SUITE_CHECKPOINTS"):
            sets.append(f"warehouse.checkpoints={os.environ['WAKU_SUITE_CHECKPOINTS']}")
    sets += os.environ.get("WAKU_SUITE_SETS", "").split()
    return [OUR_PYTHON, "-m", "ingest.cli", "run", *_docker_cli_args(flags),
            *(word for item in sets for word in ("--set", item))]


def gowaku_command(args: dict[str, Any], node_dir: Path) -> list[str]:
    """go-waku v0.10.0's node with the suite's go-waku flags, on loopback. `--nat=extip:IP`
    (not implemented in go-waku) becomes --ext-ip; the websocket listener binds loopback too."""
    flags = {k: _loopback(v) for k, v in args.items()}
    nat = str(flags.pop("nat", ""))
    if nat.startswith("extip:"):
        flags.setdefault("ext-ip", nat[len("extip:"):])
    flags.setdefault("websocket-address", LOOPBACK)
    flags.setdefault("key-file", str(node_dir / "nodekey"))
    flags.setdefault("log-encoding", "nocolor")
    # Every node here is 127.0.0.1 (in docker each has an IP of its own), and each of ours dials
    # from two hosts (the node's and its REST filter client's): go-waku's 5 connections an IP
    # (DefaultMaxConnectionsPerIP) then refuses the fourth node's dial in its security handshake.
    flags.setdefault("ip-colocation-limit", 0)
    if (os.environ.get("WAKU_SUITE_GOWAKU_DEFAULT_SHARD", "1") == "1" and "pubsub-topic" not in flags
            and "topic" not in flags and "content-topic" not in flags and "cluster-id" in flags):
        flags["pubsub-topic"] = f"/waku/2/rs/{flags['cluster-id']}/0"
    return [GOWAKU_BIN, *_docker_cli_args(flags)]


def _install() -> None:
    """Replace the suite's DockerManager in waku_node by LocalProcessManager."""
    _stub_docker()
    sys.path.insert(0, os.getcwd())  # the suite's root, where `src` is
    manager_module = importlib.import_module("src.node.docker_mananger")
    waku_node = importlib.import_module("src.node.waku_node")
    base = manager_module.DockerManager

    class LocalProcessManager(base):  # type: ignore[misc, valid-type]
        """DockerManager's interface over local processes (search_log_for_keywords inherited)."""

        def __init__(self, image: str) -> None:
            self._image = image
            self._container: LocalContainer | None = None

        def create_network(self, network_name: str | None = None) -> None:
            return None

        def generate_ports(self, base_port: int | None = None, count: int = 5) -> list[str]:
            return [str(p) for p in free_ports(count)]

        @staticmethod
        def generate_random_ext_ip() -> str:
            return LOOPBACK

        def start_container(self, image_name: str, ports: list[str], args: dict[str, Any], log_path: str,
                            container_ip: str, volumes: list[str], remove_container: bool = True) -> LocalContainer:
            if self._container is not None and self._container.status != "exited":
                self._container.kill()  # WakuNode.start retried: its earlier process goes
            name = os.path.basename(log_path).split("__")[0] or "node"
            node_dir = _node_dir(name)
            if "go-waku" in image_name:
                argv = gowaku_command(args, node_dir)
                cwd = node_dir
            elif "nwaku" in image_name:
                argv = our_command(args, node_dir)
                cwd = MAIN
            else:
                raise NotImplementedError(f"no local process for image {image_name!r}")
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            for key in [k for k in env if k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "WAKUNODE2_"))]:
                env.pop(key)
            container = LocalContainer(name, argv, cwd, log_path, env)
            container.start()
            _containers.append(container)
            self._container = container
            return container

        def is_container_running(self, container: LocalContainer) -> bool:
            return container.status == "running"

    setattr(waku_node, "DockerManager", LocalProcessManager)  # noqa: B010 (a module of the suite)
    if os.environ.get("WAKU_SUITE_HEALTH_SHIM", "0") == "1":
        _health_shim(waku_node)


def _health_shim(waku_node: Any) -> None:
    """WAKU_SUITE_HEALTH_SHIM=1: WakuNode.ensure_ready as the suite's, but an nwaku node is ready
    when GET /health answers nodeHealth "Ready" or "READY" (nwaku >= 0.36's spelling, ours), and
    its protocolsHealth entries are not required to be {"Rln Relay": "Ready"} (the only entry of
    the nwaku this suite commit was written against). Without it every test that starts our node
    errors in setup. Counted runs say which mode they used."""
    import json

    tenacity = importlib.import_module("tenacity")  # the suite's dependency
    retry, stop_after_delay, wait_fixed = tenacity.retry, tenacity.stop_after_delay, tenacity.wait_fixed

    def ensure_ready(self: Any, timeout_duration: float = 10) -> None:
        @retry(stop=stop_after_delay(timeout_duration), wait=wait_fixed(0.1), reraise=True)
        def check_healthy() -> None:
            self.health_response = self.health()
            if self.health_response == b"Node is healthy":
                return
            body = json.loads(self.health_response)
            if body.get("nodeHealth") not in ("Ready", "READY"):
                raise AssertionError("Waiting for the node health status: Ready")
            strict = body.get("nodeHealth") == "Ready" and all(
                p.get("Rln Relay") == "Ready" for p in body.get("protocolsHealth") or [])
            if not strict:
                record("health READY accepted", f"nodeHealth {body.get('nodeHealth')!r}")

        @retry(stop=stop_after_delay(timeout_duration), wait=wait_fixed(0.1), reraise=True)
        def check_ready() -> None:
            self.info_response = self.info()

        if self.is_nwaku():
            check_healthy()
        check_ready()

    waku_node.WakuNode.ensure_ready = ensure_ready


# -- pytest hooks -----------------------------------------------------------------------------

_stub_docker()  # before the suite's conftest imports docker (src/postgres_setup.py)



def pytest_configure(config: pytest.Config) -> None:
    _install()
    (RUN_DIR / "nodes").mkdir(parents=True, exist_ok=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _current_test["seq"] += 1
    _current_test["tag"] = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    yield
    # After the suite's own teardown (close_open_nodes): nothing of this test keeps running.
    for container in _containers:
        if container.status != "exited":
            container.stopped_by_us = True
            container.stop(5)
    _containers.clear()


def pytest_unconfigure(config: pytest.Config) -> None:
    for container in _containers:
        if container.status != "exited":
            container.kill()
