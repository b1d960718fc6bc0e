"""Shared fixtures: one embedded Kafka broker and one SparkSession for the whole test run."""
from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from core.config import Config, load_config
from tools.processes import free_port

# Every test stack that waits for a Delta table sets these (spread into its overrides): a store and
# a subscriptions batch at every trigger, not the shipped cadence that waits up to 30 s / 120 s for
# more records (the fault run and test_batch_cadence cover that), and no subscriptions warm-up at
# start (a throw-away MERGE that only costs the suite time; test_subscriptions_expiry.py runs it).
BATCH_AT_EVERY_TRIGGER = (
    "store.min_offsets_per_trigger=0",
    "filter.subscriptions_min_events_per_trigger=0",
    "filter.subscriptions_warm_up=false",
)


@pytest.fixture(scope="session")
def test_root(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("waku")


@pytest.fixture(scope="session")
def kafka_ports() -> tuple[int, int]:
    return free_port(), free_port()


@pytest.fixture(scope="session")
def config(test_root, kafka_ports) -> Config:
    """The test configuration: broker on free ports, warehouse and checkpoints in a tmp dir.
    WAKU_TEST_BOOTSTRAP_SERVERS=host:port runs the tests against an existing cluster instead."""
    external = os.environ.get("WAKU_TEST_BOOTSTRAP_SERVERS", "")
    port, controller = kafka_ports
    return load_config([
        f"kafka.bootstrap_servers={external}",
        f"embedded_kafka.port={port}",
        f"embedded_kafka.controller_port={controller}",
        f"embedded_kafka.data_dir={test_root / 'kafka'}",
        f"warehouse.root={test_root / 'warehouse'}",
        f"warehouse.checkpoints={test_root / 'checkpoints'}",
        "spark.master=local[2]",
        "spark.shuffle_partitions=2",
        *BATCH_AT_EVERY_TRIGGER,
    ])


@pytest.fixture(scope="session")
def kafka(config: Config) -> Iterator[str]:
    """Bootstrap servers of a running broker (embedded unless configured otherwise)."""
    if not config.uses_embedded_kafka():
        yield config.bootstrap_servers()
        return
    from tools.embedded_kafka import EmbeddedKafka

    broker = EmbeddedKafka.from_config(config)
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def spark(config: Config):
    from core.spark_conf import SparkSettings
    from pipeline.spark.session import build_session, freeze_start_up_objects

    session = build_session(SparkSettings.from_config(config), "tests")
    freeze_start_up_objects()  # as the store job does: its per-batch collection scans only what came since
    yield session
    session.stop()
