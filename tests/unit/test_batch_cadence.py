"""The store and subscriptions jobs' batch cadence that follows the load (issue 41): settings,
the Kafka source options they become, and the expiry grace that goes with them."""
from __future__ import annotations

from typing import Any

import pytest

from core.config import ConfigError, load_config
from pipeline.filter.settings import SubscriptionsJobSettings
from pipeline.spark.kafka_io import read_topic_stream
from pipeline.store.settings import StoreJobSettings


class _Reader:
    """Stands in for spark.readStream: records the options of one Kafka source."""

    def __init__(self) -> None:
        self.opts: dict[str, str] = {}

    @property
    def readStream(self) -> _Reader:  # SparkSession's name
        return self

    def format(self, _name: str) -> _Reader:
        return self

    def options(self, **kw: str) -> _Reader:
        self.opts.update(kw)
        return self

    def option(self, key: str, value: str) -> _Reader:
        self.opts[key] = value
        return self

    def load(self) -> dict[str, str]:
        return self.opts


def _options(**kw: Any) -> dict[str, str]:
    s = StoreJobSettings.from_config(load_config(environ={}))
    return read_topic_stream(_Reader(), s.kafka, s.topic, **kw)  # type: ignore[arg-type, return-value]


def test_store_cadence_on_by_default_and_set_by_configuration():
    s = StoreJobSettings.from_config(load_config(environ={}))
    assert (s.min_offsets_per_trigger, s.max_trigger_delay_s) == (2000, 30.0)  # docs/decisions.md
    off = StoreJobSettings.from_config(load_config(["store.min_offsets_per_trigger=0"], environ={}))
    assert off.min_offsets_per_trigger == 0


@pytest.mark.parametrize("item", ["store.min_offsets_per_trigger=-1", "store.max_trigger_delay_s=0"])
def test_store_cadence_refuses_nonsense(item):
    with pytest.raises(ConfigError):
        StoreJobSettings.from_config(load_config([item], environ={}))


def test_source_options():
    opts = _options(min_offsets_per_trigger=2000, max_trigger_delay_s=10.0)
    assert opts["minOffsetsPerTrigger"] == "2000" and opts["maxTriggerDelay"] == "10000ms"
    plain = _options(min_offsets_per_trigger=None, max_trigger_delay_s=10.0)
    assert "minOffsetsPerTrigger" not in plain and "maxTriggerDelay" not in plain


def test_subscriptions_cadence_and_expiry_grace():
    s = SubscriptionsJobSettings.from_config(load_config(environ={}))
    assert (s.min_events_per_trigger, s.max_trigger_delay_s) == (1000, 120.0)  # on by default
    s = SubscriptionsJobSettings.from_config(load_config(["filter.subscriptions_min_events_per_trigger=0"],
                                                         environ={}))
    assert (s.min_events_per_trigger, s.max_trigger_delay_s) == (0, 120.0)
    # One filter matcher (the resident index): the old stream-static join's setting is refused.
    with pytest.raises(ConfigError, match="filter.criteria"):
        load_config(["filter.criteria=delta"], environ={})
    with pytest.raises(ConfigError):
        SubscriptionsJobSettings.from_config(load_config(["filter.subscriptions_min_events_per_trigger=-5"],
                                                         environ={}))
    assert s.max_events_per_trigger == 20_000  # a batch is collected to the driver: bounded
    for bad in (["filter.subscriptions_max_events_per_trigger=0"],
                ["filter.subscriptions_max_events_per_trigger=500",
                 "filter.subscriptions_min_events_per_trigger=1000"]):
        with pytest.raises(ConfigError, match="max_events_per_trigger"):
            SubscriptionsJobSettings.from_config(load_config(bad, environ={}))


def test_expiry_waits_for_events_on_their_way():
    from pipeline.filter.subscriptions import SubscriptionsJob

    job = SubscriptionsJob.__new__(SubscriptionsJob)  # no Spark: only the grace is computed
    job.settings = SubscriptionsJobSettings.from_config(
        load_config(["filter.subscriptions_min_events_per_trigger=1000"], environ={}))
    assert job.expiry_grace_s == 120.0 + 5.0
    job.settings = SubscriptionsJobSettings.from_config(
        load_config(["filter.subscriptions_min_events_per_trigger=0"], environ={}))
    assert job.expiry_grace_s == 5.0
