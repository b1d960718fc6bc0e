"""ingest/kafka_follow.Follower: a loop that Kafka answers with a transient error (a partition's
leader moving or not elected yet, a timeout) is started again without counting as a failure of
the thread (the bridge's /health stays READY); any other Kafka answer, or any other exception, is
counted. No broker: librdkafka's consumer is created against an address nobody listens on, and
the loops raise what a broker would have answered."""
from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from ingest import kafka_follow
from ingest.kafka_follow import Follower, transient


class Scripted(Follower):
    """A follower whose loop raises each of `raises` in turn, then returns."""

    def __init__(self, raises: list[BaseException]) -> None:
        super().__init__("test follower", "test-follower", logging.getLogger("test.kafka_follow"))
        self.raises = list(raises)
        self.rounds = 0
        self.done = threading.Event()

    def consumer_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": "127.0.0.1:9", "group.id": "test-kafka-follow", "log_level": 0}

    def _loop(self) -> None:
        self._take_consumer().close()
        self.rounds += 1
        if self.raises:
            raise self.raises.pop(0)
        self.done.set()


def run(raises: list[BaseException], monkeypatch: pytest.MonkeyPatch) -> Scripted:
    monkeypatch.setattr(kafka_follow, "RESTART_AFTER_S", 0.01)
    f = Scripted(raises)
    f.start()
    try:
        assert f.done.wait(30.0), f.failed
    finally:
        f.stop()
        f.join(10.0)
    return f


def test_transient_kafka_answers_are_retried_without_counting_a_failure(monkeypatch, caplog):
    codes = [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT,
             KafkaError._TRANSPORT]
    with caplog.at_level(logging.WARNING, "test.kafka_follow"):
        f = run([KafkaException(KafkaError(c)) for c in codes], monkeypatch)
    assert f.rounds == len(codes) + 1
    assert (f.failures, f.failed) == (0, None)
    # one line per error as it changes, no traceback
    lines = [r for r in caplog.records if r.name == "test.kafka_follow"]
    assert len(lines) == len(codes) and not any(r.exc_info for r in lines)
    assert "Not leader for partition" in lines[0].getMessage()


def test_other_kafka_answers_and_exceptions_count_as_failures(monkeypatch):
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    f = run([refused, RuntimeError("a bug")], monkeypatch)
    assert f.rounds == 3
    assert f.failures == 2 and isinstance(f.failed, RuntimeError)


def test_transient_is_what_goes_away_by_itself():
    assert transient(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    assert transient(KafkaError(KafkaError.REQUEST_TIMED_OUT))
    assert transient(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert transient(KafkaError(KafkaError.UNKNOWN, retriable=True))
    assert not transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not transient(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
