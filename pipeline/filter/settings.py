"""Typed settings of the subscriptions and filter jobs, built once at the job's entry point
(jobs/subscriptions.py, jobs/filter.py) from sections [filter], [topics], [kafka] and
[warehouse]."""
from __future__ import annotations

from dataclasses import dataclass

from core.config import Config, ConfigError
from core.settings import KafkaSettings, WarehouseSettings
from pipeline.spark.metrics import JobMetricsSettings

TRIGGERS = ("microbatch", "realtime")


@dataclass(frozen=True)
class SubscriptionsJobSettings:
    kafka: KafkaSettings
    warehouse: WarehouseSettings
    topic: str = "waku.subscriptions"
    ttl_s: float = 300.0
    trigger_seconds: float = 5.0
    expire_interval_s: float = 30.0
    metrics: JobMetricsSettings | None = None  # [job_metrics]
    # Batch cadence that follows the load: a trigger finding fewer new events waits for more, at
    # most max_trigger_delay_s after the last batch (0: a batch at every trigger with events).
    min_events_per_trigger: int = 1000
    max_trigger_delay_s: float = 120.0
    warm_up: bool = True  # run the batch path once on a throw-away table at start
    # A batch is collected to the driver (subscriptions.apply_batch): at most this many events.
    max_events_per_trigger: int = 20_000

    @classmethod
    def from_config(cls, config: Config) -> SubscriptionsJobSettings:
        f = config["filter"]
        if f["subscriptions_min_events_per_trigger"] < 0 or f["subscriptions_max_trigger_delay_s"] <= 0:
            raise ConfigError("filter.subscriptions_min_events_per_trigger: expected 0 or more; "
                              "filter.subscriptions_max_trigger_delay_s: expected a positive value")
        if f["subscriptions_max_events_per_trigger"] < max(1, f["subscriptions_min_events_per_trigger"]):
            raise ConfigError("filter.subscriptions_max_events_per_trigger: expected at least 1 and at least "
                              "filter.subscriptions_min_events_per_trigger")
        return cls(KafkaSettings.from_config(config), WarehouseSettings.from_config(config),
                   config.get("topics.subscriptions"), float(f["subscription_ttl_s"]),
                   f["subscriptions_trigger_seconds"], float(f["expire_interval_s"]),
                   JobMetricsSettings.from_config(config, "subscriptions"),
                   int(f["subscriptions_min_events_per_trigger"]),
                   float(f["subscriptions_max_trigger_delay_s"]), bool(f["subscriptions_warm_up"]),
                   int(f["subscriptions_max_events_per_trigger"]))


@dataclass(frozen=True)
class FilterJobSettings:
    kafka: KafkaSettings
    warehouse: WarehouseSettings
    messages_topic: str = "waku.messages"
    push_prefix: str = "waku.push."
    ttl_s: float = 300.0
    trigger: str = "microbatch"  # or "realtime"
    trigger_seconds: float = 0.5
    realtime_checkpoint_interval: str = "5 minutes"
    starting_offsets: str = "latest"
    max_offsets_per_trigger: int = 0  # 0: no bound
    metrics: JobMetricsSettings | None = None  # [job_metrics]
    subscriptions_topic: str = "waku.subscriptions"
    index_poll_ms: int = 500
    messages_partitions: int = 4
    # Real-time mode: epochs of a throw-away query run before the real one (0: none), so the real
    # query's first epoch boundary runs warm code (pipeline/filter/matching.warm_up_epochs).
    realtime_warm_up_epochs: int = 2

    @classmethod
    def from_config(cls, config: Config) -> FilterJobSettings:
        f = config["filter"]
        if f["trigger"] not in TRIGGERS:
            raise ConfigError(f"filter.trigger: expected microbatch or realtime, got {f['trigger']!r}")
        if int(f["index_poll_ms"]) < 1:
            raise ConfigError("filter.index_poll_ms: expected at least 1")
        return cls(KafkaSettings.from_config(config), WarehouseSettings.from_config(config),
                   config.get("topics.messages"), config.get("topics.push_prefix"), float(f["subscription_ttl_s"]),
                   f["trigger"], f["trigger_seconds"], f["realtime_checkpoint_interval"], f["starting_offsets"],
                   f["max_offsets_per_trigger"], JobMetricsSettings.from_config(config, "filter"),
                   config.get("topics.subscriptions"), int(f["index_poll_ms"]),
                   int(config.get("topics.messages_partitions")), int(f["realtime_warm_up_epochs"]))
