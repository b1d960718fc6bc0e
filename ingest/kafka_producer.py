"""Bounded hand-off of ingest records from the trio relay to Kafka, with delivery confirmation.

The producer is librdkafka's (confluent-kafka; docs/decisions.md says why not kafka-python's):
``produce`` only queues the record in C, so the trio side calls it directly; a feeder thread
serves librdkafka's delivery reports (``poll``), sends what could not be queued at once (no
producer yet, a full local queue, a producer being replaced) and replaces the producer after a
fatal error. Acknowledgements come back to trio in batches through ``TrioToken.run_sync_soon``:
at once when someone waits for them (``put_acked``'s callers, a wait for room or for idle) or a
delivery failed; otherwise at most every ``ACK_DRAIN_S`` (and at each ``put``), so a relayed
message does not cost the trio thread a loop turn of its own for its acknowledgement.

The bound counts records handed over but not yet acknowledged. When it is reached, ``put``
waits as long as it takes (the relay stops reading, and flow control slows the peers): a
record the bridge accepted is never dropped for a backlog. ``put_acked`` (lightpush, filter
events: the caller answers a client) waits for room up to ``backpressure_timeout_s`` and then
refuses the record (counted as ``kafka_backlog``; it was never handed over).
A record whose delivery fails with a retriable error (broker down past the delivery timeout)
is sent again, it stays counted against the bound; one refused for good is dropped, counted and
logged. Nothing is dropped silently. ``close`` waits for every record to be acknowledged.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# kafka-python is imported whole, here, in the main thread: imported for the first time from two
# threads at once (the producer, the store tail, the pusher) it fails with "cannot import name
# 'MemoryRecords' from partially initialized module 'kafka.record'" and the bridge exits.
import kafka
import kafka.errors  # noqa: F401
import trio

from core.kafka import librdkafka_options

log = logging.getLogger("ingest.kafka")


class _KafkaClientLogLimit(logging.Filter):
    """kafka-python logs a lost broker as a storm (every connection, fetch and metadata refresh,
    at ERROR, with tracebacks: ~330 lines for a 25 s restart). Keep one line per logger and level
    a minute, without the traceback; the producer's own stall warnings say what it means."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self.every_s = every_s
        self.last: dict[tuple[str, int], float] = {}
        self.suppressed: dict[tuple[str, int], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("kafka"):
            return True
        key = (record.name, record.levelno)
        now = time.monotonic()
        if now - self.last.get(key, -self.every_s) < self.every_s:
            self.suppressed[key] = self.suppressed.get(key, 0) + 1
            return False
        self.last[key] = now
        n = self.suppressed.pop(key, 0)
        text = record.getMessage().splitlines()[0]
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__})"
        record.msg = text + (f" [{n} similar lines not shown]" if n else "")
        record.args, record.exc_info, record.exc_text = None, None, None
        return True


def quiet_kafka_client_logs(every_s: float = 60.0) -> None:
    """At most one kafka-python line per logger and level per `every_s` (no tracebacks)."""
    handler_filter = _KafkaClientLogLimit(every_s)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _KafkaClientLogLimit) for f in handler.filters):
            handler.addFilter(handler_filter)

_LOG_EVERY_S = 10.0
IDLE_POLL_S = 0.5  # the feeder's wait for delivery reports when it has nothing to send
# Acknowledgements nobody waits for reach the trio thread at most this late (ACK_DRAIN_S, or the
# feeder's idle wait after the last one) or once ACK_DRAIN_BATCH are waiting: the outstanding
# gauge and the stall warning lag that much; the bound is checked against fresh counts (`put`
# drains first).
ACK_DRAIN_S = 0.25
ACK_DRAIN_BATCH = 1024


class _Waiter:
    """Set when one record is acknowledged (ok) or refused for good. `on_late_ack` is called
    (on the trio thread) when the record is acknowledged after its caller stopped waiting."""
    __slots__ = ("abandoned", "event", "ok", "on_late_ack")

    def __init__(self, on_late_ack: Callable[[], None] | None = None) -> None:
        self.event = trio.Event()
        self.ok = False
        self.abandoned = False
        self.on_late_ack = on_late_ack


@dataclass(slots=True)
class _Record:
    key: bytes
    value: bytes
    arrival: float  # time.perf_counter() when the message arrived
    attempts: int = 0
    waiter: _Waiter | None = None
    gen: int = 0  # which KafkaProducer instance sent it


@dataclass
class ProducerStats:
    """Callbacks for the metrics; each may be called from any thread."""

    produced: Callable[[int], None] = lambda n: None
    dropped: Callable[[str, int], None] = lambda reason, n: None
    ack_latency: Callable[[float], None] = lambda seconds: None
    outstanding: Callable[[int], None] = lambda n: None


@dataclass
class ProducerSettings:
    bootstrap_servers: str
    topic: str
    max_outstanding: int = 10_000
    backpressure_timeout_s: float = 5.0
    linger_ms: int = 5
    batch_bytes: int = 256 * 1024
    delivery_timeout_ms: int = 30_000
    close_timeout_s: float = 30.0
    client_options: Mapping[str, str] = field(default_factory=dict)


def crc32c_implementation() -> str:
    """Which CRC32C kafka-python checksums record batches with (the `crc32c` package, a
    dependency, is C; kafka-python's own fallback is pure Python and several times slower)."""
    from kafka.record import util

    if util.crc32c_c is None:
        log.warning("kafka: the crc32c package is missing; kafka-python falls back to a slow "
                    "pure-Python CRC32C (reinstall the project's dependencies)")
        return "pure python"
    return "crc32c package"


class IngestProducer:
    """Use as ``async with IngestProducer(settings, stats) as producer: await producer.put(...)``."""

    def __init__(self, settings: ProducerSettings, stats: ProducerStats | None = None) -> None:
        self.settings = settings
        self.stats = stats or ProducerStats()
        self._pending: collections.deque[_Record] = collections.deque()  # trio -> feeder
        self._acked: collections.deque[tuple[_Record, BaseException | None]] = collections.deque()
        self._drain_scheduled = False
        self._drain_wanted = False  # trio waits for acknowledgements (room, idle): drain each at once
        self._last_drain = time.monotonic()
        self._wake = threading.Event()
        self._closing = False
        self._room = trio.Event()
        self._idle = trio.Event()
        self._idle.set()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        # librdkafka's idempotent producer refuses every send after a fatal error: the feeder
        # then replaces it and sends its unacknowledged records again.
        self._gen = 0
        self._fatal_gen: int | None = None
        self._last_ack = time.monotonic()
        # Hand-over time of every record handed over and not yet acknowledged or dropped, oldest
        # first (the trio thread writes; its length is the outstanding count).
        self._unacked: collections.OrderedDict[int, float] = collections.OrderedDict()
        self._overflowing = False
        self._warned: dict[str, float] = {}
        self._last_error: BaseException | None = None
        self.failed: BaseException | None = None  # set when the feeder thread died
        self.dropped: collections.Counter[str] = collections.Counter()

    # -- trio side -------------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        """Records handed over and not yet acknowledged (or dropped)."""
        return len(self._unacked)

    async def __aenter__(self) -> IngestProducer:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._feed, name="kafka-feeder", daemon=True)
        self._thread.start()
        log.info("kafka: producing to %s on %s (acks=all, idempotent, at most %d records buffered, librdkafka)",
                 self.settings.topic, self.settings.bootstrap_servers, self.settings.max_outstanding)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with trio.CancelScope(shield=True):
            await self.close()

    async def put(self, key: bytes, value: bytes, arrival: float) -> bool:
        """Hand one record over, waiting for room as long as it takes; False only when the
        producer is closing (counted and logged as `shutdown`)."""
        return await self._put(_Record(key, value, arrival), wait_for_room_s=None)

    async def put_acked(self, key: bytes, value: bytes, arrival: float, timeout_s: float,
                        on_late_ack: Callable[[], None] | None = None) -> bool:
        """Hand one record over and wait until Kafka acknowledges it: True when it did within
        `timeout_s`; False when it was dropped, refused or is still unacknowledged. A record
        still unacknowledged stays buffered and is retried like any other (Kafka may hold it
        already): when it is acknowledged after all, `on_late_ack` is called on the trio thread,
        so that the caller, who answered a refusal, can undo it."""
        waiter = _Waiter(on_late_ack)
        if not await self._put(_Record(key, value, arrival, waiter=waiter),
                               wait_for_room_s=min(timeout_s, self.settings.backpressure_timeout_s)):
            return False
        with trio.move_on_after(timeout_s):
            await waiter.event.wait()
        if not waiter.event.is_set():
            waiter.abandoned = True
        return waiter.ok

    async def _put(self, record: _Record, wait_for_room_s: float | None) -> bool:
        if self._acked:
            self._drain_acks()
        if self._closing:
            self._drop("shutdown", 1, "kafka: producer closing, record dropped")
            return False
        if self.outstanding >= self.settings.max_outstanding:
            if not await self._wait_for_room(wait_for_room_s):
                self._drop("kafka_backlog", 1,
                           "kafka: %d records unacknowledged for %.1f s (bound reached), record refused",
                           self.outstanding, wait_for_room_s)
                return False
            if self._closing:
                self._drop("shutdown", 1, "kafka: producer closing, record dropped")
                return False
        self._unacked[id(record)] = time.monotonic()
        self.stats.outstanding(self.outstanding)
        if self._idle.is_set():
            self._idle = trio.Event()
        producer = self._producer
        if not self._pending and producer is not None and self._fatal_gen != self._gen:
            record.gen = self._gen
            if self._produce(producer, record):  # queued in librdkafka: no thread hand-off
                return True
        # The feeder sends the deque's records in order; wake it only when this record found the
        # deque empty (threading.Event.set takes a lock and notifies).
        wake = not self._pending
        self._pending.append(record)
        if wake:
            self._wake.set()
        return True

    async def _wait_for_room(self, timeout_s: float | None) -> bool:
        """Until the backlog is below the bound (True), or `timeout_s` passed (False; None:
        no limit). Logs every _LOG_EVERY_S while it waits."""
        if timeout_s is not None and self._overflowing:
            # Already waited out the timeout with no progress: refuse at once until there is room.
            return False
        try:
            with trio.move_on_after(float("inf") if timeout_s is None else timeout_s), self._waiting_for_acks():
                while self.outstanding >= self.settings.max_outstanding:
                    self._warn("backpressure", "kafka: %d records unacknowledged (bound reached; oldest "
                               "waiting %.0f s): relay paused until Kafka catches up",
                               self.outstanding, self.oldest_unacked_s())
                    with trio.move_on_after(_LOG_EVERY_S):
                        await self._room.wait()
                return True
        except trio.Cancelled:
            self._drop("shutdown", 1, "kafka: shutdown while waiting for room, record dropped")
            raise
        self._overflowing = True
        return False

    async def wait_idle(self) -> None:
        """Until every record handed over so far is acknowledged or dropped."""
        with self._waiting_for_acks():
            await self._idle.wait()

    @contextlib.contextmanager
    def _waiting_for_acks(self) -> Iterator[None]:
        """While trio waits on acknowledgements: the feeder hands each over at once. Set before
        draining what came already, so none is left waiting for the next timed drain."""
        self._drain_wanted = True
        try:
            self._drain_acks()
            yield
        finally:
            self._drain_wanted = False

    async def close(self) -> None:
        """Wait (up to close_timeout_s) for every record to be acknowledged, then stop."""
        if self._thread is None:
            return
        if self.outstanding:
            log.info("kafka: flushing %d records", self.outstanding)
        with trio.move_on_after(self.settings.close_timeout_s):
            await self.wait_idle()
        self._closing = True
        self._wake.set()
        await trio.to_thread.run_sync(self._thread.join, 30.0)
        self._drain_acks()
        if self.outstanding:
            self._drop("shutdown", self.outstanding,
                       "kafka: %d records not acknowledged within %.0f s of shutdown",
                       self.outstanding, self.settings.close_timeout_s)
            self._unacked.clear()
            self.stats.outstanding(0)
        self._thread = None
        log.info("kafka: producer closed")

    def _drain_acks(self) -> None:
        """On the trio thread: account for acknowledged / failed records."""
        self._drain_scheduled = False
        self._last_drain = time.monotonic()
        done = 0
        retry: list[_Record] = []
        while self._acked:
            record, error = self._acked.popleft()
            if error is None:
                done += 1
                self._unacked.pop(id(record), None)
                w = record.waiter
                if w is not None:
                    w.ok = True
                    w.event.set()
                    if w.abandoned and w.on_late_ack is not None:
                        w.on_late_ack()
            elif getattr(error, "retriable", False):
                retry.append(record)
            else:
                done += 1
                self._unacked.pop(id(record), None)
                self._drop("kafka_rejected", 1, "kafka: record refused for good: %r", error)
                if record.waiter is not None:
                    record.waiter.event.set()
        if retry:
            self._warn("retry", "kafka: delivery of %d records failed (%s), sending them again",
                       len(retry), self._last_error)
            for r in retry:
                r.attempts += 1
                self._pending.append(r)
            self._wake.set()
        if done:
            self._last_ack = time.monotonic()
            self._overflowing = False
            self._room.set()
            self._room = trio.Event()
            if self.outstanding == 0:
                self._idle.set()
        self.stats.outstanding(self.outstanding)

    # -- feeder / I/O threads ---------------------------------------------------------------

    def _produce(self, producer: Any, record: _Record) -> bool:
        """Queue `record` in librdkafka (any thread): True when queued or finished with (refused
        for good); False when it must wait (librdkafka's local queue is full, the producer is
        being replaced)."""
        try:
            producer.produce(self.settings.topic, record.value, record.key,
                             on_delivery=lambda err, _msg, r=record: self._on_done(r, err))
            return True
        except BufferError:
            return False
        except Exception as exc:  # noqa: BLE001 - KafkaException: e.g. record too large (final)
            err = exc.args[0] if exc.args else None
            if err is not None and hasattr(err, "fatal") and (err.fatal() or err.retriable()):
                return False
            self._on_done(record, err if err is not None and hasattr(err, "code") else None, exc)
            return True

    def _on_done(self, record: _Record, err: Any, exc: BaseException | None = None) -> None:
        """A delivery report (librdkafka's poll, on the feeder thread) or a refusal at produce."""
        error: BaseException | None = None
        if err is not None or exc is not None:
            error = _DeliveryFailed(err, exc)
            if err is not None and err.fatal():
                self._fatal_gen = record.gen  # the producer is unusable now: the feeder replaces it
                self._wake.set()
        if error is None:
            self.stats.produced(1)
            self.stats.ack_latency(time.perf_counter() - record.arrival)
        else:
            self._last_error = error
        self._acked.append((record, error))
        if (error is not None or record.waiter is not None or self._drain_wanted
                or len(self._acked) >= ACK_DRAIN_BATCH):
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        """Hand the acknowledgements to the trio thread (any thread; once until it drained)."""
        if not self._drain_scheduled:
            self._drain_scheduled = True
            try:
                assert self._token is not None
                self._token.run_sync_soon(self._drain_acks)
            except trio.RunFinishedError:
                pass

    def _on_client_error(self, err: Any) -> None:
        """librdkafka's error callback (a broker unreachable, all brokers down, a fatal error)."""
        if err.fatal():
            log.error("kafka: fatal producer error: %s; replacing the producer", err)
            self._fatal_gen = self._gen
            self._wake.set()
        else:
            self._warn("connect", "kafka: %s (%s); %d records unacknowledged, librdkafka retries",
                       err.str(), self.settings.bootstrap_servers, self.outstanding)

    def _connect(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        s = self.settings
        conf: dict[str, Any] = {
            "bootstrap.servers": s.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": s.linger_ms,
            "batch.size": s.batch_bytes,
            "delivery.timeout.ms": s.delivery_timeout_ms,
            "request.timeout.ms": min(30_000, max(1_000, s.delivery_timeout_ms - s.linger_ms - 1)),
            "message.max.bytes": 4 * 1024 * 1024,
            # never the bound: max_outstanding is (BufferError only past this)
            "queue.buffering.max.messages": max(100_000, 2 * s.max_outstanding),
            # Kafka down: retry at least every second
            "reconnect.backoff.max.ms": 1000,
            "client.id": "waku-bridge",
            "error_cb": self._on_client_error,
            "logger": logging.getLogger("kafka.librdkafka.producer"),
        }
        conf.update(librdkafka_options(s.client_options))
        backoff = 1.0
        while not self._closing:
            try:
                return Producer(conf)
            except KafkaException as exc:
                self._warn("connect", "kafka: cannot create the producer for %s (%s); %d records buffered, "
                           "retrying", s.bootstrap_servers, exc, len(self._pending))
                self._wake.wait(backoff)
                backoff = min(backoff * 2, 10.0)
        return None

    def _feed(self) -> None:
        try:
            self._feed_loop()
        except BaseException as exc:  # reported to the node, which stops
            log.error("kafka: the producer failed: %s: %s", type(exc).__name__, exc, exc_info=True)
            self.failed = exc

    def _feed_loop(self) -> None:
        producer = self._connect()
        self._producer = producer
        try:
            while producer is not None:
                if self._fatal_gen == self._gen:
                    log.warning("kafka: the producer failed for good; replacing it")
                    self._producer = None
                    _dispose(producer)  # its records come back (retriable) and are sent again
                    self._gen += 1
                    producer = self._connect()
                    self._producer = producer
                    if producer is None:
                        break
                while self._pending:
                    record = self._pending.popleft()
                    record.gen = self._gen
                    if not self._produce(producer, record):
                        self._pending.appendleft(record)
                        self._warn("send", "kafka: librdkafka's queue is full; %d records waiting", len(self._pending))
                        break
                self._wake.clear()
                # delivery reports (and the callbacks above) are served here; a poll returns as
                # soon as it served one, so the idle wait only sets how often an idle feeder wakes
                # (records are produced by the caller: the deque fills only when librdkafka's
                # queue is full, when delivery reports come back at once)
                producer.poll(0.005 if self._pending else IDLE_POLL_S)
                if self._acked and time.monotonic() - self._last_drain >= ACK_DRAIN_S:
                    self._schedule_drain()
                if self._closing:
                    break
                if not self._pending:
                    self._report_stall()
        finally:
            self._producer = None
            if producer is not None:
                producer.flush(5)
                _dispose(producer)

    def oldest_unacked_s(self) -> float:
        """How long the oldest record not yet acknowledged has waited (0: none waits)."""
        try:
            since = next(iter(self._unacked.values()), None)
        except RuntimeError:  # changed while read from the feeder thread: next time
            return 0.0
        return 0.0 if since is None else time.monotonic() - since

    def _report_stall(self) -> None:
        age = self.oldest_unacked_s()
        if self.outstanding and age > _LOG_EVERY_S:
            self._warn("stall", "kafka: the oldest unacknowledged record has waited %.0f s; %d records buffered "
                       "(bound %d)", age, self.outstanding, self.settings.max_outstanding)

    # -- logging ---------------------------------------------------------------------------

    def _drop(self, reason: str, n: int, msg: str, *args: Any) -> None:
        self.stats.dropped(reason, n)
        self.dropped[reason] += n
        self._warn("drop:" + reason, msg + " [%d dropped for %s so far]", *args, self.dropped[reason], reason,
                   level=logging.ERROR)

    def _warn(self, kind: str, msg: str, *args: Any, level: int = logging.WARNING) -> None:
        now = time.monotonic()
        if now - self._warned.get(kind, -_LOG_EVERY_S) >= _LOG_EVERY_S:
            self._warned[kind] = now
            log.log(level, msg, *args)


def _dispose(producer: Any) -> None:
    """Stop a librdkafka producer now: what it still holds comes back as failed delivery
    reports (purged: sent again, or counted at shutdown), then its threads end."""
    try:
        producer.purge()
        producer.poll(0)
        producer.close()
    except Exception as exc:  # noqa: BLE001 - going away either way
        log.debug("kafka: closing the producer: %s", exc)


# librdkafka's local errors after which a record is sent again (it may be in Kafka already: the
# store de-duplicates by message hash).
_RESEND = ("_MSG_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN", "_PURGE_QUEUE", "_PURGE_INFLIGHT",
           "_FATAL", "_DESTROY")


class _DeliveryFailed(Exception):
    """A record librdkafka did not deliver: `retriable` when it is to be sent again."""

    def __init__(self, err: Any, exc: BaseException | None = None) -> None:
        self.name = err.name() if err is not None else type(exc).__name__
        super().__init__(f"{self.name}: {err.str() if err is not None else exc}")
        self.retriable = err is not None and (err.retriable() or err.fatal() or self.name in _RESEND)
