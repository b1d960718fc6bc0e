"""A thread that follows Kafka topics with librdkafka: what the store tail (`ingest.store.tail`)
and the filter pusher (`ingest.filter.pusher`) share.

`Follower` owns the consumer and the thread. Its consumer is opened in `start()`, so a client
option librdkafka refuses is a `ConfigError` there, not a dead thread. Its loop (`_loop`, the
subclass's) is started again 2 s after a failure: Kafka's answers (`KafkaException`) are logged
in one line, anything else with its traceback the first time. A transient answer (a partition's
leader moving or not elected yet, a timeout, a broker out of reach: `transient`) is retried the
same way but is not a failure of the thread: the bridge's health does not turn NOT_READY for a
minute because a topic it just created had no leader yet. `_kafka_error` logs an error in one line
each time it changes, never a traceback; librdkafka calls it for its client-wide errors (broker
down, all brokers down, authentication), which it retries by itself."""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from core.config import ConfigError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError

RESTART_AFTER_S = 2.0


def transient(err: KafkaError) -> bool:
    """A Kafka answer that goes away by itself: retriable by librdkafka's account, or a leader
    moving or not elected yet, a request timed out, a broker out of reach."""
    from confluent_kafka import KafkaError

    return err.retriable() or err.code() in (
        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


class Follower:
    """Subclasses give `consumer_config()` (librdkafka's properties) and `_loop()` (which takes
    the consumer with `_take_consumer()` and closes it when it ends). `what` names the follower
    in its log lines ("store tail", "pusher")."""

    def __init__(self, what: str, thread_name: str, log: logging.Logger) -> None:
        self.what = what
        self.log = log
        self.ready = threading.Event()
        self.failed: BaseException | None = None  # the last failure of the thread's loop
        self.failures = 0  # how many times the loop failed and was started again
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._consumer: Consumer | None = None
        self._last_error = ""

    @property
    def alive(self) -> bool:
        """The thread runs (read by the bridge's health and `waku_bridge_thread_alive`)."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start following; a Kafka client option librdkafka refuses raises ConfigError here."""
        self._consumer = self._open()
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end (it sees the request within its poll's wait)."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` for the thread; close the consumer if the thread never took it."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive() and self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def consumer_config(self) -> dict[str, Any]:
        raise NotImplementedError

    def _loop(self) -> None:
        raise NotImplementedError

    def _open(self, config: dict[str, Any] | None = None) -> Consumer:
        """A consumer with `config` (default: consumer_config())."""
        from confluent_kafka import Consumer, KafkaException

        try:
            return Consumer(config or self.consumer_config())
        except KafkaException as exc:  # a property librdkafka refuses: the settings are wrong
            raise ConfigError(f"kafka.client_options: {exc.args[0].str()}") from None

    def _take_consumer(self) -> Consumer:
        """The consumer opened by `start()` for the first loop, a new one for a restarted loop."""
        consumer, self._consumer = self._consumer or self._open(), None
        return consumer

    def _kafka_error(self, err: KafkaError) -> None:
        text = err.str()
        if text != self._last_error:
            self._last_error = text
            self.log.warning("%s: Kafka: %s (retried)", self.what, text)

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        restart = False
        while not self._stop.is_set():
            try:
                # The wait before a restart is inside the try: what kills the thread during it is
                # counted and started again like a failure of the loop itself.
                if restart and self._stop.wait(RESTART_AFTER_S):
                    return
                restart = True
                self._loop()
                return
            except KafkaException as exc:  # Kafka's answer: one line, no traceback
                err = exc.args[0]
                self._kafka_error(err)
                if not transient(err):
                    self.failures += 1
                    self.failed = exc
            except BaseException as exc:  # counted, logged, started again (SystemExit too: never left dead)
                self.failures += 1
                self.failed = exc
                self.log.error("%s consumer failed (%d so far), restarting in %.0f s: %s: %s", self.what,
                               self.failures, RESTART_AFTER_S, type(exc).__name__, exc,
                               exc_info=self.failures == 1)
