"""Typed settings shared by the bridge, the Spark jobs and the tools, built once from the
merged configuration (core/config.py) at a process's entry point and passed down as values:
below the entry, code takes these dataclasses, never the whole Config or a string key.

Each side adds its own (ingest/settings.py, pipeline/store/settings.py,
pipeline/filter/settings.py) from these pieces.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from core.config import Config


@dataclass(frozen=True)
class KafkaSettings:
    """Where Kafka is and how to talk to it."""
    bootstrap_servers: str
    client_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config) -> KafkaSettings:
        return cls(config.bootstrap_servers(), config.kafka_client_options())


@dataclass(frozen=True)
class TopicSettings:
    """The pipeline's Kafka topics and the partitions of those the project creates."""
    messages: str = "waku.messages"
    subscriptions: str = "waku.subscriptions"
    push_prefix: str = "waku.push."
    messages_partitions: int = 4
    subscriptions_partitions: int = 4
    push_partitions: int = 2

    def push_topic(self, bridge_id: str) -> str:
        return f"{self.push_prefix}{bridge_id}"

    @classmethod
    def from_config(cls, config: Config) -> TopicSettings:
        t = config["topics"]
        return cls(t["messages"], t["subscriptions"], t["push_prefix"], t["messages_partitions"],
                   t["subscriptions_partitions"], t["push_partitions"])


def local_path(location: str) -> str | None:
    """The local file-system path of a warehouse location (a table, a checkpoint): a plain path
    or a `file:` URI; None for an object store (`s3a://...`)."""
    if location.startswith("file:"):
        return "/" + location[len("file:"):].lstrip("/")
    return None if "://" in location else location


@dataclass(frozen=True)
class WarehouseSettings:
    """Roots of the Delta tables and of the streaming checkpoints (paths or object-store URIs)."""
    root: str
    checkpoints: str

    def table_path(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{table}"

    def checkpoint_path(self, job: str) -> str:
        return f"{self.checkpoints.rstrip('/')}/{job}"

    @classmethod
    def from_config(cls, config: Config) -> WarehouseSettings:
        return cls(config.path("warehouse.root"), config.path("warehouse.checkpoints"))
