"""The filter service's settings: section [filter] plus limits.max_content_topics_per_filter_request
and the topics; ConfigError one-liners for bad values."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from core.config import Config, ConfigError
from core.settings import KafkaSettings
from ingest.filter.state import FilterLimits


@dataclass(frozen=True)
class FilterSettings:
    enabled: bool = True
    legacy_v00: bool = True
    limits: FilterLimits = field(default_factory=FilterLimits)
    subscriptions_topic: str = "waku.subscriptions"
    push_prefix: str = "waku.push."
    push_partitions: int = 2
    subscriptions_partitions: int = 4
    # of the topics it creates (the push topic, the subscriptions topic): [kafka] replication_factor
    # and min_insync_replicas (0: core.kafka.ensure_topics picks by the bootstrap servers)
    replication_factor: int = 0
    min_insync_replicas: int = 0
    unreachable_timeout_s: float = 60.0
    push_timeout_s: float = 5.0
    push_queue_per_peer: int = 1000
    # Pushes on streams of their own (go-waku's client reads one per stream and refuses > 15/s);
    # writes on a kept stream (nwaku, js-waku) are not paced.
    push_rate_per_peer: float = 13.0
    push_burst_per_peer: int = 15
    push_retries: int = 2
    # Reuse one push stream per peer; writes on it not yet confirmed (push_unconfirmed_s after
    # the write, and not before the stream was open push_reuse_after_s + push_unconfirmed_s) are
    # sent again if the peer ends it.
    push_reuse_stream: bool = True
    push_reuse_after_s: float = 1.0
    push_unconfirmed_s: float = 2.0
    stream_idle_timeout_s: float = 30.0
    record_timeout_s: float = 10.0
    dedup_per_peer: int = 4096
    # v00 requests may leave out the pubsub topic: their criteria are on this one.
    default_pubsub_topic: str = "/waku/2/default-waku/proto"
    # The pubsub topics the bridge relays (empty: any); with refuse_unrelayed_topics a SUBSCRIBE
    # to another is refused (400), else taken as nwaku's service takes it.
    relayed_topics: frozenset[str] = frozenset()
    refuse_unrelayed_topics: bool = False
    sweep_interval_s: float = 1.0

    def push_topic(self, bridge_id: str) -> str:
        return f"{self.push_prefix}{bridge_id}"

    @classmethod
    def from_config(cls, config: Config, default_pubsub_topic: str | None = None,
                    relayed_topics: Iterable[str] = ()) -> FilterSettings:
        f = config["filter"]
        for key in ("max_criteria_per_peer", "max_peers", "push_queue_per_peer", "dedup_per_peer"):
            if f[key] < 1:
                raise ConfigError(f"filter.{key}: expected at least 1, got {f[key]}")
        if f["max_requests_per_peer_per_minute"] < 0:
            raise ConfigError("filter.max_requests_per_peer_per_minute: expected 0 (no limit) or more")
        if f["push_burst_per_peer"] < 1 or f["push_retries"] < 0:
            raise ConfigError("filter.push_burst_per_peer: expected at least 1; filter.push_retries: 0 or more")
        for key in ("subscription_ttl_s", "unreachable_timeout_s", "push_timeout_s", "push_rate_per_peer",
                    "stream_idle_timeout_s", "record_timeout_s", "push_reuse_after_s", "push_unconfirmed_s"):
            if f[key] <= 0:
                raise ConfigError(f"filter.{key}: expected a positive number of seconds, got {f[key]}")
        max_topics = config.get("limits.max_content_topics_per_filter_request")
        if max_topics < 1:
            raise ConfigError("limits.max_content_topics_per_filter_request: expected at least 1")
        limits = FilterLimits(
            max_content_topics_per_request=max_topics,
            max_criteria_per_peer=f["max_criteria_per_peer"],
            max_peers=f["max_peers"],
            max_requests_per_peer_per_minute=f["max_requests_per_peer_per_minute"],
            ttl_s=f["subscription_ttl_s"],
        )
        kafka = KafkaSettings.from_config(config)
        return cls(
            enabled=f["enabled"],
            legacy_v00=f["legacy_v00"],
            limits=limits,
            subscriptions_topic=config.get("topics.subscriptions"),
            push_prefix=config.get("topics.push_prefix"),
            push_partitions=config.get("topics.push_partitions"),
            subscriptions_partitions=config.get("topics.subscriptions_partitions"),
            replication_factor=kafka.replication_factor,
            min_insync_replicas=kafka.min_insync_replicas,
            unreachable_timeout_s=f["unreachable_timeout_s"],
            push_timeout_s=f["push_timeout_s"],
            push_queue_per_peer=f["push_queue_per_peer"],
            push_rate_per_peer=f["push_rate_per_peer"],
            push_burst_per_peer=f["push_burst_per_peer"],
            push_retries=f["push_retries"],
            push_reuse_stream=f["push_reuse_stream"],
            push_reuse_after_s=f["push_reuse_after_s"],
            push_unconfirmed_s=f["push_unconfirmed_s"],
            stream_idle_timeout_s=f["stream_idle_timeout_s"],
            record_timeout_s=f["record_timeout_s"],
            dedup_per_peer=f["dedup_per_peer"],
            default_pubsub_topic=default_pubsub_topic or "/waku/2/default-waku/proto",
            relayed_topics=frozenset(relayed_topics),
            refuse_unrelayed_topics=bool(f["refuse_unrelayed_topics"]),
        )
