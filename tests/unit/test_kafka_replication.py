"""The replication of the topics the project creates ([kafka] replication_factor and
min_insync_replicas) and a Kafka cluster's node configuration, without starting a JVM."""
from __future__ import annotations

import pytest

from core.config import ConfigError, load_config
from core.settings import KafkaSettings
from ingest.filter.settings import FilterSettings
from tools.kafka_cluster import KafkaCluster


def settings(*overrides: str) -> KafkaSettings:
    return KafkaSettings.from_config(load_config(list(overrides), environ={}))


def test_automatic_replication_follows_the_bootstrap_servers():
    one = settings()  # the embedded broker
    assert (one.replication_factor, one.min_insync_replicas) == (1, 1)
    three = settings("kafka.bootstrap_servers=k1:9092,k2:9092,k3:9092")
    assert (three.replication_factor, three.min_insync_replicas) == (3, 2)


def test_explicit_replication_and_its_checks():
    s = settings("kafka.bootstrap_servers=k1:9092,k2:9092", "kafka.replication_factor=2")
    assert (s.replication_factor, s.min_insync_replicas) == (2, 1)
    s = settings("kafka.bootstrap_servers=lb:9092", "kafka.replication_factor=3", "kafka.min_insync_replicas=2")
    assert (s.replication_factor, s.min_insync_replicas) == (3, 2)
    with pytest.raises(ConfigError, match="exceeds"):
        settings("kafka.replication_factor=1", "kafka.min_insync_replicas=2")
    with pytest.raises(ConfigError, match="automatic"):
        settings("kafka.replication_factor=-1")


def test_the_bridge_filter_creates_its_topics_with_the_setting():
    f = FilterSettings.from_config(load_config(["kafka.bootstrap_servers=a:1,b:2,c:3"], environ={}))
    assert (f.replication_factor, f.min_insync_replicas) == (3, 2)


def test_cluster_nodes_share_a_quorum_and_replicated_defaults(tmp_path):
    cluster = KafkaCluster(tmp_path, brokers=3, base_port=40100)
    assert cluster.bootstrap_servers == "127.0.0.1:40100,127.0.0.1:40102,127.0.0.1:40104"
    props = [n.server_properties() for n in cluster.nodes]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    voters = "1@127.0.0.1:40101,2@127.0.0.1:40103,3@127.0.0.1:40105"
    assert {p["controller.quorum.voters"] for p in props} == {voters}
    for p in props:
        assert p["process.roles"] == "broker,controller"
        assert (p["default.replication.factor"], p["min.insync.replicas"]) == ("3", "2")
        assert p["offsets.topic.replication.factor"] == p["transaction.state.log.replication.factor"] == "3"
    assert [n.data_dir for n in cluster.nodes] == [tmp_path / f"broker-{i}" for i in range(3)]
