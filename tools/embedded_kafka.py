"""An embedded single-node Kafka (KRaft: broker and controller in one JVM) for development and tests.

The broker runs from the jars resolved at set-up into `.cache/jars/kafka`, as a child process in
its own process group, with all its state (storage, config, logs, pid file) under one data dir::

    with EmbeddedKafka(port=9092) as kafka:
        kafka.create_topics({"waku.messages": 4})
        ...  # use kafka.bootstrap_servers

Storage is formatted only once, so topics and records survive a restart on the same data dir.
Command line: ``python -m tools.embedded_kafka start|stop|status``.
"""
from __future__ import annotations

import argparse
import atexit
import base64
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from tools.processes import pid_alive, proc_cpu_s

if TYPE_CHECKING:
    from core.config import Config

log = logging.getLogger("tools.embedded_kafka")  # the same name under python -m

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO_ROOT / "var" / "kafka"
DEFAULT_JAR_DIR = REPO_ROOT / ".cache" / "jars" / "kafka"
NODE_ID = 1
# One network thread, one request handler and the serial GC (Kafka's defaults: 3, 8 and G1): idle
# handlers each wake every 300 ms, and G1's threads cost ~5x the serial GC's CPU here; one handler
# keeps up at 33,000 msg/s (docs/decisions.md, The embedded broker).
DEFAULT_NETWORK_THREADS = 1
DEFAULT_IO_THREADS = 1
DEFAULT_JVM_OPTIONS = ("-XX:+UseSerialGC",)
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 20

# Files under the data dir.
SERVER_PROPERTIES = "server.properties"
LOG4J2_PROPERTIES = "log4j2.properties"
SERVER_LOG = "server.log"  # the broker's own log (log4j2)
CONSOLE_LOG = "kafka.out"  # the JVM's stdout/stderr
PID_FILE = "kafka.pid"
LOG_DIR = "logs"  # log.dirs: the topic data and the KRaft metadata log


class EmbeddedKafkaError(Exception):
    """A failure to start, use or stop the embedded broker; the message is meant for the user."""


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` non-empty lines of a text file (none if it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def port_in_use(host: str, port: int) -> bool:
    """True if `host:port` cannot be bound (something listens on it or holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the JVM: ignore TIME_WAIT leftovers of a broker that just stopped.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise EmbeddedKafkaError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    return False


# However long a broker keeps making progress, it must answer within this many startup timeouts.
MAX_STARTUP_FACTOR = 10


class _StartProgress:
    """Whether a starting broker advanced since the last look: its process's CPU time (Linux
    /proc) or the size of its logs grew."""

    def __init__(self, pid: int, logs: Sequence[Path]) -> None:
        self.pid = pid
        self.logs = tuple(logs)
        self.last = self._reading()

    def _reading(self) -> tuple[float, ...]:
        sizes = tuple(p.stat().st_size if p.exists() else -1 for p in self.logs)
        try:
            cpu = proc_cpu_s(self.pid)
        except (OSError, IndexError, ValueError):
            cpu = -1.0
        return (cpu, *sizes)

    def advanced(self) -> bool:
        now = self._reading()
        moved = now != self.last
        self.last = now
        return moved


def _can_connect(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def _find_java() -> str:
    """The java executable: $JAVA_HOME/bin/java if set, else `java` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if not found:
        raise EmbeddedKafkaError(
            "Java not found: install a Java 17+ runtime (the set-up does this) or set JAVA_HOME"
        )
    return found


def _is_kafka_process(pid: int) -> bool:
    """True if `pid` is alive and (where /proc tells) runs kafka.Kafka, so a recycled pid is not hit."""
    if not pid_alive(pid):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return b"kafka.Kafka" in cmdline.read_bytes()
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no /proc (macOS): trust the pid file
    except OSError:
        return True


def _read_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _log4j2_config(log_file: Path) -> str:
    """log4j2 properties: everything to a size-rolled file, nothing to the console."""
    return "\n".join(
        [
            "# Written by tools/embedded_kafka.py at every start.",
            "status = warn",
            "name = EmbeddedKafka",
            "appender.file.type = RollingFile",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log_file}",
            f"appender.file.filePattern = {log_file}.%i",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "appender.file.policies.type = Policies",
            "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
            "appender.file.policies.size.size = 50MB",
            "appender.file.strategy.type = DefaultRolloverStrategy",
            "appender.file.strategy.max = 3",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            # Chatty at INFO and of little use for a single development node.
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "logger.authorizer.name = kafka.authorizer.logger",
            "logger.authorizer.level = WARN",
            "",
        ]
    )


class EmbeddedKafka:
    """A single-node KRaft Kafka (broker+controller) run as a child JVM; a context manager."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        controller_port: int = 9093,
        jar_dir: str | os.PathLike[str] | None = None,
        heap: str = "-Xmx512m",
        startup_timeout_s: float = 60.0,
        num_partitions: int = 1,
        network_threads: int = DEFAULT_NETWORK_THREADS,
        io_threads: int = DEFAULT_IO_THREADS,
        extra_config: Mapping[str, Any] | None = None,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        node_id: int = NODE_ID,
        quorum_voters: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve() if data_dir else DEFAULT_DATA_DIR
        self.host = host
        self.port = int(port)
        self.controller_port = int(controller_port)
        self.jar_dir = Path(jar_dir).resolve() if jar_dir else DEFAULT_JAR_DIR
        self.heap = heap if heap.startswith("-") else f"-Xmx{heap}"
        self.startup_timeout_s = float(startup_timeout_s)
        self.num_partitions = int(num_partitions)
        self.network_threads = int(network_threads)
        self.io_threads = int(io_threads)
        self.extra_config = dict(extra_config or {})
        self.jvm_options = list(jvm_options)  # e.g. -XX:TieredStopAtLevel=1 for a faster start
        # One node of a cluster (tools/kafka_cluster.py): its id, every voter ("id@host:port,..."),
        # and the cluster id all its nodes' storage is formatted with. Default: a single voter.
        self.node_id = int(node_id)
        self.quorum_voters = quorum_voters or f"{self.node_id}@{host}:{self.controller_port}"
        self.cluster_id = cluster_id
        self._began = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._atexit_registered = False
        self.startup_seconds: float | None = None

    @classmethod
    def from_config(cls, config: Config) -> EmbeddedKafka:
        """Build from the project config (`core.config.Config`, section `embedded_kafka`)."""
        ek = config["embedded_kafka"]
        return cls(
            config.path("embedded_kafka.data_dir"),
            host=ek["host"],
            port=ek["port"],
            controller_port=ek["controller_port"],
            jar_dir=config.path("embedded_kafka.jar_dir"),
            heap=str(ek["heap"]),
            startup_timeout_s=ek["startup_timeout_s"],
            network_threads=ek["network_threads"],
            io_threads=ek["io_threads"],
            jvm_options=str(ek["jvm_options"]).split(),
        )

    # -- paths and properties -------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / LOG_DIR

    @property
    def server_log(self) -> Path:
        return self.data_dir / SERVER_LOG

    @property
    def console_log(self) -> Path:
        return self.data_dir / CONSOLE_LOG

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def server_properties(self) -> dict[str, str]:
        """The broker configuration written to server.properties."""
        props: dict[str, Any] = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            # A static quorum (a single voter unless a cluster's): nothing about the listeners is
            # baked into the formatted storage, so the ports may change between restarts.
            "controller.quorum.voters": self.quorum_voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": self.num_partitions,
            "num.network.threads": self.network_threads,
            "num.io.threads": self.io_threads,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": "false",
            "log.retention.hours": 168,
            "log.retention.bytes": 1024**3,  # per partition
            "log.segment.bytes": 128 * 1024**2,
            "log.retention.check.interval.ms": 300000,
            "log.cleaner.dedupe.buffer.size": 16 * 1024**2,
            "num.recovery.threads.per.data.dir": 1,
            # The controller appends a no-op record to the metadata log after this long without a
            # change (default 500 ms: an append, a flush and every broker's fetch of it, twice a
            # second, ~0.015 core of an idle single node); a liveness signal only.
            "metadata.max.idle.interval.ms": 5000,
        }
        props.update(self.extra_config)
        return {k: str(v) for k, v in props.items()}

    def _write_config(self) -> tuple[Path, Path]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        server = self.data_dir / SERVER_PROPERTIES
        lines = ["# Written by tools/embedded_kafka.py at every start; edits are overwritten."]
        lines += [f"{k}={v}" for k, v in self.server_properties().items()]
        server.write_text("\n".join(lines) + "\n", encoding="utf-8")
        log4j = self.data_dir / LOG4J2_PROPERTIES
        log4j.write_text(_log4j2_config(self.server_log), encoding="utf-8")
        return server, log4j

    # -- checks ---------------------------------------------------------------------------

    def _check_jars(self) -> None:
        if not self.jar_dir.is_dir() or not any(self.jar_dir.glob("kafka_2.13-*.jar")):
            raise EmbeddedKafkaError(
                f"Kafka broker jars not found in {self.jar_dir}: run the set-up first (make setup)"
            )
        slf4j = [p.name for p in self.jar_dir.glob("slf4j-api-*.jar")]
        if any(n.startswith("slf4j-api-1.") for n in slf4j) and any(
            self.jar_dir.glob("log4j-slf4j2-impl-*.jar")
        ):
            log.warning(
                "%s has %s with log4j-slf4j2-impl (needs slf4j-api 2.x): the broker will log nothing "
                "to %s; add org.slf4j:slf4j-api 2.x to the broker's jar list",
                self.jar_dir, ", ".join(sorted(slf4j)), self.server_log,
            )

    def _check_ports(self) -> None:
        for port, key in ((self.port, "port"), (self.controller_port, "controller_port")):
            if port_in_use(self.host, port):
                raise EmbeddedKafkaError(
                    f"port {port} on {self.host} is already in use: stop what holds it or set "
                    f"embedded_kafka.{key}"
                )
        if self.port == self.controller_port:
            raise EmbeddedKafkaError(f"the broker and controller ports must differ (both {self.port})")

    def _check_not_running_elsewhere(self) -> None:
        pid = _read_pid(self.data_dir)
        if pid is not None and pid != os.getpid() and _is_kafka_process(pid):
            raise EmbeddedKafkaError(
                f"a Kafka broker (pid {pid}) already runs on {self.data_dir}: stop it first "
                f"(python -m tools.embedded_kafka stop --data-dir {self.data_dir})"
            )

    # -- lifecycle ------------------------------------------------------------------------

    def _java_cmd(self, java: str, log4j: Path) -> list[str]:
        return [
            java,
            self.heap,
            *self.jvm_options,
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            str(self.jar_dir / "*"),
        ]

    def _format_storage(self, java: str, server: Path, log4j: Path) -> None:
        """Format the KRaft storage once; a formatted dir (meta.properties) is left as it is."""
        if (self.log_dir / "meta.properties").exists():
            log.debug("storage in %s already formatted", self.log_dir)
            return
        cluster_id = self.cluster_id or _new_cluster_id()
        cmd = self._java_cmd(java, log4j) + [
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(server),
        ]
        log.info("formatting Kafka storage in %s (cluster id %s)", self.log_dir, cluster_id)
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        if res.returncode != 0:
            out = [  # drop stack frames and logging noise: keep the message lines
                line.strip() for line in res.stdout.decode("utf-8", "replace").splitlines()
                if line.strip() and not line.startswith(("SLF4J:", "\t", " "))
            ]
            raise EmbeddedKafkaError(
                f"formatting Kafka storage in {self.log_dir} failed (exit {res.returncode}): "
                + (out[-1] if out else "no output")
            )

    def start(self, wait: bool = True) -> EmbeddedKafka:
        """Start the broker and wait until it answers; raises EmbeddedKafkaError on failure.
        `wait=False`: return once the JVM runs (the nodes of a cluster answer only once a quorum
        of them runs); then call `wait_ready`."""
        if self.is_running():
            return self
        self._began = time.monotonic()
        java = _find_java()
        self._check_jars()
        self._check_ports()
        self._check_not_running_elsewhere()
        server, log4j = self._write_config()
        self._format_storage(java, server, log4j)
        cmd = self._java_cmd(java, log4j) + ["kafka.Kafka", str(server)]
        log.info("starting Kafka on %s (data %s)", self.bootstrap_servers, self.data_dir)
        with self.console_log.open("ab") as out:
            out.write(f"--- start {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                start_new_session=True,  # its own process group: no Ctrl-C from our terminal
            )
        self.pid_file.write_text(f"{self._proc.pid}\n")
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self) -> EmbeddedKafka:
        """Wait until the started broker answers (stopping it on failure)."""
        began = self._began
        try:
            self._wait_ready(began)
        except BaseException:
            self.stop()
            raise
        assert self._proc is not None
        self.startup_seconds = time.monotonic() - began
        log.info(
            "Kafka ready on %s in %.1f s (pid %d)",
            self.bootstrap_servers, self.startup_seconds, self._proc.pid,
        )
        return self

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no clean shutdown) and wait until it is gone."""
        proc = self._proc
        if proc is None:
            return
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        self._proc = None
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    def _failure_details(self) -> str:
        parts = []
        for path in (self.server_log, self.console_log):
            lines = [ln for ln in _tail(path) if not ln.startswith(("SLF4J:", "--- start"))]
            if lines:
                parts.append(f"last lines of {path}:\n" + "\n".join(lines))
        return ("\n" + "\n".join(parts)) if parts else f" (nothing in {self.console_log})"

    def _wait_ready(self, began: float) -> None:
        """Poll until a KafkaAdminClient can list topics; fail fast if the JVM exits."""
        from kafka import KafkaAdminClient  # imported late: the CLI error paths do not need it

        assert self._proc is not None
        # The deadline counts from the broker's last sign of progress (its CPU time or its logs
        # advancing), not from its start: on a busy machine a JVM that is still starting is
        # slow, not stuck. A broker silent and idle for startup_timeout_s has failed.
        progress = _StartProgress(self._proc.pid, (self.server_log, self.console_log))
        last_progress = began
        last_error = "no answer"
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EmbeddedKafkaError(
                    f"Kafka exited with code {code} while starting; see {self.server_log}"
                    + self._failure_details()
                )
            now = time.monotonic()
            if progress.advanced():
                last_progress = now
            if (now - last_progress > self.startup_timeout_s
                    or now - began > MAX_STARTUP_FACTOR * self.startup_timeout_s):
                raise EmbeddedKafkaError(
                    f"Kafka did not answer on {self.bootstrap_servers} after {now - began:.0f} s, "
                    f"{now - last_progress:.0f} s of them without progress ({last_error}); see {self.server_log}"
                    + self._failure_details()
                )
            if _can_connect(self.host, self.port):
                admin = None
                try:
                    admin = KafkaAdminClient(
                        bootstrap_servers=self.bootstrap_servers,
                        client_id="embedded-kafka-probe",
                        request_timeout_ms=5000,
                    )
                    admin.list_topics()
                    return
                except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
                    last_error = f"{type(exc).__name__}: {exc}"
                    log.debug("broker not ready yet: %s", last_error)
                finally:
                    if admin is not None:
                        admin.close()
            time.sleep(0.25)

    def stop(self) -> None:
        """SIGTERM the broker, wait up to 30 s for a clean shutdown, then SIGKILL. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            log.info("stopping Kafka (pid %d)", proc.pid)
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("Kafka (pid %d) did not stop in %.0f s: killing it", proc.pid, STOP_TIMEOUT_S)
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        if _read_pid(self.data_dir) == proc.pid:
            self.pid_file.unlink(missing_ok=True)
        self._proc = None
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- topics ---------------------------------------------------------------------------

    def create_topics(self, topics: Mapping[str, int], timeout_s: float = 30.0) -> None:
        """Create topics (name -> partitions, replication 1); existing topics are left as they are."""
        from core.kafka import TopicError, ensure_topics

        try:
            ensure_topics(self.bootstrap_servers, topics, replication=1, timeout_s=timeout_s,
                          client_id="embedded-kafka-admin")
        except TopicError as exc:
            raise EmbeddedKafkaError(str(exc)) from None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the broker's process group (it leads its own), or just the pid if it does not."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def stop_from_pid_file(data_dir: str | os.PathLike[str] | None = None) -> int | None:
    """Stop a broker started by another process on `data_dir`; returns its pid or None if none ran."""
    ddir = Path(data_dir).resolve() if data_dir else DEFAULT_DATA_DIR
    pid = _read_pid(ddir)
    if pid is None or not _is_kafka_process(pid):
        (ddir / PID_FILE).unlink(missing_ok=True)
        return None
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(pid):
        log.warning("Kafka (pid %d) did not stop in %.0f s: killing it", pid, STOP_TIMEOUT_S)
        _signal_group(pid, signal.SIGKILL)
    (ddir / PID_FILE).unlink(missing_ok=True)
    return pid


# -- command line ---------------------------------------------------------------------------


class _Terminate(Exception):
    """Raised from the SIGTERM handler to leave the foreground loop."""


def _parse_topic(item: str) -> tuple[str, int]:
    name, sep, count = item.rpartition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:PARTITIONS, got {item!r}")
    try:
        partitions = int(count)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME:PARTITIONS, got {item!r}") from None
    if partitions < 1:
        raise argparse.ArgumentTypeError(f"partitions must be at least 1 in {item!r}")
    return name, partitions


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.embedded_kafka",
        description="Run the embedded single-node Kafka (KRaft) broker.",
    )
    parser.add_argument("command", choices=("start", "stop", "status"))
    parser.add_argument("--port", type=int, default=9092, help="broker port (default 9092)")
    parser.add_argument("--controller-port", type=int, default=9093, help="controller port (default 9093)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--data-dir", default=None, help=f"data dir (default {DEFAULT_DATA_DIR})")
    parser.add_argument("--jar-dir", default=None, help=f"broker jars (default {DEFAULT_JAR_DIR})")
    parser.add_argument(
        "--topic", action="append", default=[], type=_parse_topic, metavar="NAME:PARTITIONS",
        help="create this topic after start (repeatable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser


def _run_foreground(kafka: EmbeddedKafka, topics: Sequence[tuple[str, int]]) -> int:
    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Terminate()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        kafka.start()
        if topics:
            kafka.create_topics(dict(topics))
        print(f"Kafka running on {kafka.bootstrap_servers} (pid {kafka.pid}); Ctrl-C to stop", flush=True)
        assert kafka._proc is not None
        while True:
            code = kafka._proc.poll()
            if code in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
                log.info("Kafka was stopped from outside (exit code %d)", code)
                return 0
            if code is not None:
                raise EmbeddedKafkaError(
                    f"Kafka exited by itself with code {code}; see {kafka.server_log}"
                )
            time.sleep(0.5)
    except (KeyboardInterrupt, _Terminate):
        log.info("shutting down")
        return 0
    finally:
        kafka.stop()
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """`start` (foreground until Ctrl-C/SIGTERM), `stop` (via the pid file) or `status`."""
    args = _build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)
    try:
        if args.command == "start":
            kafka = EmbeddedKafka(
                args.data_dir, host=args.host, port=args.port,
                controller_port=args.controller_port, jar_dir=args.jar_dir,
            )
            return _run_foreground(kafka, args.topic)
        data_dir = Path(args.data_dir).resolve() if args.data_dir else DEFAULT_DATA_DIR
        if args.command == "stop":
            pid = stop_from_pid_file(data_dir)
            print(f"stopped Kafka (pid {pid})" if pid else f"no Kafka running on {data_dir}")
            return 0
        pid = _read_pid(data_dir)
        if pid is not None and _is_kafka_process(pid):
            print(f"running (pid {pid}, data {data_dir})")
            return 0
        print(f"not running (data {data_dir})")
        return 1
    except EmbeddedKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
