"""Typed settings shared by the bridge, the Spark jobs and the tools, built once from the
merged configuration (core/config.py) at a process's entry point and passed down as values:
below the entry, code takes these dataclasses, never the whole Config or a string key.

Each side adds its own (ingest/settings.py, pipeline/store/settings.py,
pipeline/filter/settings.py) from these pieces.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.config import Config, ConfigError


@dataclass(frozen=True)
class KafkaSettings:
    """Where Kafka is and how to talk to it; the replication of the topics the project creates
    (`topic_replication`: 1 and 1 against one bootstrap server, else 3 and 2, unless set)."""
    bootstrap_servers: str
    client_options: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = 1
    min_insync_replicas: int = 1

    @classmethod
    def from_config(cls, config: Config) -> KafkaSettings:
        servers = config.bootstrap_servers()
        k = config["kafka"]
        replication = topic_replication(servers, int(k["replication_factor"]), int(k["min_insync_replicas"]))
        return cls(servers, config.kafka_client_options(), *replication)


def topic_replication(servers: str, rf: int, isr: int) -> tuple[int, int]:
    """The replication factor and min.insync.replicas of the topics the project creates from
    [kafka] replication_factor and min_insync_replicas; 0 (the default) picks them from the
    bootstrap servers: 1 and 1 for one (the embedded broker), 3 and 2 for several (a cluster:
    with the writers' acks=all, an acknowledged record is on two brokers and one broker may be
    lost)."""
    several = len([s for s in servers.split(",") if s.strip()]) > 1
    if rf < 0 or isr < 0:
        raise ConfigError("kafka.replication_factor, kafka.min_insync_replicas: expected 0 (automatic) or more")
    rf = rf or (3 if several else 1)
    isr = isr or (2 if rf >= 3 else 1)
    if isr > rf:
        raise ConfigError(f"kafka.min_insync_replicas: {isr} exceeds kafka.replication_factor {rf} "
                          "(no write with acks=all could succeed)")
    return rf, isr


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


def delta_rs_location(location: str) -> str:
    """A warehouse location as delta-rs opens it: the local path of a plain path or `file:` URI,
    else the object-store URI itself (`s3a://bucket/key`: delta-rs takes the `s3a` scheme and the
    store's `AWS_*` settings from the environment, ObjectStoreSettings.environment)."""
    return local_path(location) or location


def is_s3(location: str) -> bool:
    """Whether a warehouse location is on an S3 object store (`s3a://`, `s3://`, `s3n://`)."""
    return location.split("://", 1)[0] in ("s3a", "s3", "s3n") and "://" in location


@dataclass(frozen=True)
class ObjectStoreSettings:
    """How to reach the S3 object store of an `s3a://` warehouse ([warehouse] s3_*): one set of
    settings that feeds Spark's S3A file system (`spark_options`, merged under
    `spark.options`), delta-rs (`storage_options`) and Arrow (the store service's Parquet reads).
    Empty credentials: each client's default AWS chain (environment, profile, instance role)."""
    endpoint: str = ""  # e.g. http://127.0.0.1:8333; empty: AWS
    region: str = "us-east-1"
    path_style: bool = False
    access_key: str = ""
    secret_key: str = ""

    @property
    def allow_http(self) -> bool:
        return self.endpoint.startswith("http://")

    def spark_options(self) -> dict[str, str]:
        """Spark's `spark.hadoop.fs.s3a.*` settings (hadoop-aws) and Delta's log store for
        s3a:// (waku.pipeline.S3ConditionalLogStore: commits by conditional PUT, safe for the
        several drivers that write one table; docs/decisions.md)."""
        p = "spark.hadoop.fs.s3a."
        out = {p + "endpoint.region": self.region, p + "path.style.access": str(self.path_style).lower(),
               p + "create.conditional.enabled": "true",
               "spark.delta.logStore.s3a.impl": "waku.pipeline.S3ConditionalLogStore"}
        if self.endpoint:
            out[p + "endpoint"] = self.endpoint
            out[p + "connection.ssl.enabled"] = str(not self.allow_http).lower()
        if self.access_key:
            out[p + "access.key"] = self.access_key
            out[p + "secret.key"] = self.secret_key
            out[p + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return out

    def storage_options(self) -> dict[str, str]:
        """delta-rs's storage options (its object store's `AWS_*` keys). delta-rs commits with
        S3's conditional PUT (If-None-Match) by itself: safe for several writers (docs/decisions.md)."""
        out = {"AWS_REGION": self.region, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not self.path_style).lower()}
        if self.endpoint:
            out["AWS_ENDPOINT_URL"] = self.endpoint
            out["AWS_ALLOW_HTTP"] = str(self.allow_http).lower()
        if self.access_key:
            out["AWS_ACCESS_KEY_ID"] = self.access_key
            out["AWS_SECRET_ACCESS_KEY"] = self.secret_key
        return out

    def environment(self) -> dict[str, str]:
        """The `AWS_*` environment variables of this store: what delta-rs (and Arrow) read when
        given no storage options, as a job driver's log checkpoints and job_metrics appends are
        (pipeline/spark/entrypoint.setup_job sets them for an s3a:// warehouse)."""
        return {k: v for k, v in self.storage_options().items() if k.startswith("AWS_")}

    def arrow_filesystem(self, **options: Any) -> Any:
        """Arrow's S3 file system for this store (pyarrow.fs.S3FileSystem; paths `bucket/key`);
        `options`: more of its arguments."""
        from pyarrow import fs

        scheme, _, endpoint = self.endpoint.partition("://") if self.endpoint else ("https", "", "")
        return fs.S3FileSystem(access_key=self.access_key or None, secret_key=self.secret_key or None,
                               region=self.region, endpoint_override=endpoint or None, scheme=scheme,
                               force_virtual_addressing=not self.path_style, **options)

    @classmethod
    def from_config(cls, config: Config) -> ObjectStoreSettings:
        w = config["warehouse"]
        return cls(w["s3_endpoint"], w["s3_region"], w["s3_path_style"], w["s3_access_key"], w["s3_secret_key"])


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
