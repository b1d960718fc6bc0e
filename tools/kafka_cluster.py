"""A Kafka cluster of KRaft nodes as real processes on this machine (tests, `local_run --topology
cluster`, fault runs): each node is an `EmbeddedKafka` JVM (broker and controller in one process,
every node a voter of a static quorum), all formatted with one cluster id, with replicated
defaults (replication factor 3, `min.insync.replicas` 2 on the internal and created topics)::

    with KafkaCluster(Path("/tmp/kc"), brokers=3) as cluster:
        cluster.create_topics({"waku.messages": 4})    # replication 3, min.insync.replicas 2
        ...                                            # use cluster.bootstrap_servers
        cluster.kill(1)                                # kill -9 one node
        cluster.restart(1)
        cluster.wait_in_sync(["waku.messages"])        # every replica caught up again

Node i (0-based) has node id i+1 and its state under `<data_dir>/broker-<i>`; the cluster id is
kept in `<data_dir>/cluster.id`, so a cluster stopped and started again on the same data dir keeps
its topics. Ports: `base_port` gives node i the broker port base_port+2i and the controller port
base_port+2i+1; without it free ports are picked at construction (kept across restarts).
Command line: ``python -m tools.kafka_cluster start --data-dir DIR [--brokers 3] [--base-port P]``.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType

from tools.embedded_kafka import EmbeddedKafka, EmbeddedKafkaError, _new_cluster_id, _signal_group
from tools.processes import free_port

log = logging.getLogger("tools.kafka_cluster")

CLUSTER_ID_FILE = "cluster.id"
# Small JVMs: three of them share a 2-core machine with Spark and the bridges. Serial GC and C1
# only: fewer threads, a quicker start; a test or local cluster is not throughput bound.
DEFAULT_HEAP = "256m"
DEFAULT_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class KafkaCluster:
    """`brokers` KRaft nodes (broker+controller each) as child JVMs; a context manager."""

    def __init__(
        self,
        data_dir: str | Path,
        brokers: int = 3,
        host: str = "127.0.0.1",
        *,
        base_port: int | None = None,
        heap: str = DEFAULT_HEAP,
        jvm_options: Sequence[str] = DEFAULT_JVM_OPTIONS,
        jar_dir: str | Path | None = None,
        startup_timeout_s: float = 60.0,
        extra_config: Mapping[str, object] | None = None,
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.replication_factor = min(3, brokers)
        self.min_insync_replicas = 2 if brokers >= 3 else 1
        if base_port is not None:
            ports = [(base_port + 2 * i, base_port + 2 * i + 1) for i in range(brokers)]
        else:
            ports = [(free_port(host), free_port(host)) for _ in range(brokers)]
        voters = ",".join(f"{i + 1}@{host}:{c}" for i, (_, c) in enumerate(ports))
        config: dict[str, object] = {
            "default.replication.factor": self.replication_factor,
            "min.insync.replicas": self.min_insync_replicas,
            "offsets.topic.replication.factor": self.replication_factor,
            "transaction.state.log.replication.factor": self.replication_factor,
            "transaction.state.log.min.isr": self.min_insync_replicas,
            "share.coordinator.state.topic.replication.factor": self.replication_factor,
            "share.coordinator.state.topic.min.isr": self.min_insync_replicas,
        }
        config.update(extra_config or {})
        self.nodes = [
            EmbeddedKafka(
                self.data_dir / f"broker-{i}", host=host, port=port, controller_port=controller,
                jar_dir=jar_dir, heap=heap, startup_timeout_s=startup_timeout_s,
                extra_config=config, jvm_options=jvm_options,
                # two of each, as before (the embedded broker's one of each was measured without replication)
                network_threads=2, io_threads=2,
                node_id=i + 1, quorum_voters=voters, cluster_id=None,
            )
            for i, (port, controller) in enumerate(ports)
        ]

    # -- properties -------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Every node's broker address, comma separated."""
        return ",".join(n.bootstrap_servers for n in self.nodes)

    def alive(self) -> list[int]:
        """The indexes of the nodes running now."""
        return [i for i, n in enumerate(self.nodes) if n.is_running()]

    def _cluster_id(self) -> str:
        path = self.data_dir / CLUSTER_ID_FILE
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cid = _new_cluster_id()
        path.write_text(cid + "\n")
        return cid

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Start every node, then wait until each answers (a node answers only once a quorum of
        voters runs). Raises EmbeddedKafkaError (after stopping what started) on failure."""
        began = time.monotonic()
        cid = self._cluster_id()
        try:
            for node in self.nodes:
                node.cluster_id = cid
                node.start(wait=False)
            for node in self.nodes:
                node.wait_ready()
        except BaseException:
            self.stop()
            raise
        log.info("Kafka cluster of %d nodes ready on %s in %.1f s", len(self.nodes), self.bootstrap_servers,
                 time.monotonic() - began)
        return self

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 30 s). Idempotent. All are signalled at
        once: stopped one by one, the last node has lost its quorum and its controlled shutdown
        waits out the 30 s."""
        for node in self.nodes:
            if node.pid is not None and node.is_running():
                _signal_group(node.pid, signal.SIGTERM)
        for node in reversed(self.nodes):
            node.stop()

    def kill(self, i: int) -> None:
        """kill -9 node i (its broker and controller): no clean shutdown, no leadership handed over."""
        log.info("killing Kafka node %d (pid %s)", i, self.nodes[i].pid)
        self.nodes[i].kill()

    def restart(self, i: int) -> float:
        """Start node i again (after `kill` or `stop`) and wait until it answers; returns the seconds
        it took. Its replicas then catch up from the others (`wait_in_sync`)."""
        began = time.monotonic()
        node = self.nodes[i]
        node.cluster_id = self._cluster_id()
        node.stop()
        node.start()
        return time.monotonic() - began

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- topics -----------------------------------------------------------------------------

    def create_topics(self, topics: Mapping[str, int], timeout_s: float = 60.0) -> None:
        """Create the missing topics (name -> partitions) with the cluster's replication factor
        and min.insync.replicas, and wait until every partition has a leader."""
        from core.kafka import TopicError, ensure_topics

        try:
            ensure_topics(self.bootstrap_servers, topics, replication=self.replication_factor,
                          topic_configs={"min.insync.replicas": str(self.min_insync_replicas)},
                          timeout_s=timeout_s, client_id="kafka-cluster-admin")
        except TopicError as exc:
            raise EmbeddedKafkaError(str(exc)) from None

    def replicas(self, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, list[int], list[int]]]:
        """(topic, partition) -> (leader, replicas, in-sync replicas), as the cluster tells now
        (librdkafka's metadata request: it goes to a node that answers)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "client.id": "kafka-cluster-admin",
                             "log_level": 0})
        out: dict[tuple[str, int], tuple[int, list[int], list[int]]] = {}
        for name in topics:
            meta = admin.list_topics(topic=name, timeout=10).topics[name]
            for pid, p in meta.partitions.items():
                out[(name, pid)] = (p.leader, list(p.replicas), list(p.isrs))
        return out

    def wait_in_sync(self, topics: Iterable[str], timeout_s: float = 120.0) -> float:
        """Wait until every partition of `topics` has a leader and all its replicas in sync (after
        a node came back); returns the seconds waited. Raises EmbeddedKafkaError on timeout."""
        names = list(topics)
        began = time.monotonic()
        lagging: list[str] = []
        while time.monotonic() - began < timeout_s:
            try:
                state = self.replicas(names)
            except Exception as exc:  # noqa: BLE001 - the cluster is settling: ask again
                log.debug("describe_topics: %s", exc)
                state = {}
            lagging = [f"{t}-{p}" for (t, p), (leader, reps, isr) in state.items()
                       if leader < 0 or set(isr) != set(reps)]
            if state and not lagging:
                return time.monotonic() - began
            time.sleep(0.5)
        raise EmbeddedKafkaError(f"partitions not in sync after {timeout_s:.0f} s: {', '.join(lagging) or names}")


# -- command line -----------------------------------------------------------------------------


class _Terminate(Exception):
    pass


def main(argv: Sequence[str] | None = None) -> int:
    """`start`: run a cluster in the foreground until Ctrl-C/SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m tools.kafka_cluster",
                                     description="Run a Kafka cluster of KRaft nodes on this machine.")
    parser.add_argument("command", choices=("start",))
    parser.add_argument("--data-dir", required=True, help="the cluster's state (a dir per node)")
    parser.add_argument("--brokers", type=int, default=3, help="nodes (default 3)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=None,
                        help="node i listens on BASE+2i (broker) and BASE+2i+1 (controller); default: free ports")
    parser.add_argument("--heap", default=DEFAULT_HEAP, help=f"each node's JVM heap (default {DEFAULT_HEAP})")
    parser.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS",
                        help="create this topic after start (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Terminate()

    signal.signal(signal.SIGTERM, on_term)
    cluster = KafkaCluster(args.data_dir, args.brokers, args.host, base_port=args.base_port, heap=args.heap)
    try:
        cluster.start()
        if args.topic:
            cluster.create_topics({n: int(p) for n, _, p in (t.rpartition(":") for t in args.topic)})
        print(f"Kafka cluster running on {cluster.bootstrap_servers}; Ctrl-C to stop", flush=True)
        while True:
            time.sleep(1.0)
            gone = [i for i in range(len(cluster.nodes)) if i not in cluster.alive()]
            if len(gone) == len(cluster.nodes):
                print("error: every node exited", file=sys.stderr)
                return 1
    except (KeyboardInterrupt, _Terminate):
        return 0
    except EmbeddedKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
