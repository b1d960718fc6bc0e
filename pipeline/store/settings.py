"""Typed settings of the store job and of maintenance, built once at the job's entry point
(jobs/store.py, jobs/maintain.py) from sections [store], [limits], [topics], [kafka] and
[warehouse]."""
from __future__ import annotations

from dataclasses import dataclass, field

from core.config import Config, ConfigError
from core.settings import KafkaSettings, WarehouseSettings
from pipeline.spark.metrics import JobMetricsSettings
from pipeline.store.validation import Limits


@dataclass(frozen=True)
class StoreJobSettings:
    kafka: KafkaSettings
    warehouse: WarehouseSettings
    topic: str = "waku.messages"
    limits: Limits = field(default_factory=Limits)
    trigger_seconds: float = 1.0
    max_offsets_per_trigger: int = 0  # 0: no bound
    starting_offsets: str = "earliest"
    # Copies of one message whose receive times are at most this far apart are stored once.
    dedup_window_s: float = 120.0
    rows_per_file: int = 250_000
    metrics: JobMetricsSettings | None = None  # [job_metrics]
    # Hashes kept in memory for the check of recent copies (pipeline/store/recent.py); 0: off.
    recent_hashes_max: int = 10_000_000
    # Versions between the Delta log checkpoints the job writes beside its batches (delta-rs).
    log_checkpoint_interval: int = 100
    # Batch cadence that follows the load: a trigger finding fewer new records waits for more,
    # at most max_trigger_delay_s after the last batch (0: a batch at every trigger with records).
    min_offsets_per_trigger: int = 2000
    max_trigger_delay_s: float = 30.0
    # A batch storing at most this many rows on a local warehouse is appended by delta-rs
    # (pipeline/store/messages_append.py); 0: always Spark's Delta.
    delta_rs_append_max_rows: int = 20_000

    @property
    def recent_keep_s(self) -> float:
        """How far behind the newest receive the recent hashes reach: the window, and the
        minutes a batch's check widens it by, with one to spare."""
        return self.dedup_window_s + 3 * 60.0

    @classmethod
    def from_config(cls, config: Config) -> StoreJobSettings:
        s = config["store"]
        if s["starting_offsets"] not in ("earliest", "latest"):
            raise ConfigError(f"store.starting_offsets: expected earliest or latest, got {s['starting_offsets']!r}")
        for key in ("trigger_seconds", "rows_per_file", "log_checkpoint_interval", "max_trigger_delay_s"):
            if s[key] <= 0:
                raise ConfigError(f"store.{key}: expected a positive value, got {s[key]}")
        for key in ("min_offsets_per_trigger", "delta_rs_append_max_rows"):
            if s[key] < 0:
                raise ConfigError(f"store.{key}: expected 0 or more, got {s[key]}")
        return cls(KafkaSettings.from_config(config), WarehouseSettings.from_config(config),
                   config.get("topics.messages"), Limits.from_config(config), s["trigger_seconds"],
                   s["max_offsets_per_trigger"], s["starting_offsets"], s["dedup_window_s"], s["rows_per_file"],
                   JobMetricsSettings.from_config(config, "store"), max(0, s["recent_hashes_max"]),
                   s["log_checkpoint_interval"], int(s["min_offsets_per_trigger"]), float(s["max_trigger_delay_s"]),
                   int(s["delta_rs_append_max_rows"]))


@dataclass(frozen=True)
class MaintainSettings:
    warehouse: WarehouseSettings
    limits: Limits = field(default_factory=Limits)
    retention_days: float = 2.0
    retention_max_messages: int = 0  # 0: no bound
    vacuum_retain_hours: float = 24.0
    compact_days: int = 2
    optimize_target_file_bytes: int = 134_217_728
    metrics: JobMetricsSettings | None = None  # [job_metrics]

    @classmethod
    def from_config(cls, config: Config) -> MaintainSettings:
        s = config["store"]
        return cls(WarehouseSettings.from_config(config), Limits.from_config(config), s["retention_days"],
                   s["retention_max_messages"], s["vacuum_retain_hours"], s["compact_days"],
                   s["optimize_target_file_bytes"], JobMetricsSettings.from_config(config, "maintain"))
