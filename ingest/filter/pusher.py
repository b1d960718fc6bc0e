"""The pusher: consumes the bridge's push topic (waku.push.<bridge_id>, written by the Spark
filter job) and sends each match to its peer over the existing connection.

A Kafka consumer thread (kafka-python; no group: it starts at the end of the topic, pushes are
live only) hands batches of values to trio through ``TrioToken.run_sync_soon``. On the trio
side each record is checked against the bridge's view (a peer that unsubscribed since the job
matched gets nothing), de-duplicated by message hash per peer, and queued to that peer's worker,
which opens one filter-push stream per message (as nwaku and go-waku do):
MessagePush{waku_message, pubsub_topic} for v2, FilterRPC{requestId, push} for v00.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import trio

from core.kafka import client_options as kafka_client_options

log = logging.getLogger("ingest.filter.pusher")


class PushConsumer:
    """Thread consuming every partition of `topic` from its end; `deliver(values)` runs on the
    trio thread for each non-empty poll."""

    def __init__(self, bootstrap_servers: str, topic: str, client_options: Mapping[str, str],
                 deliver: Callable[[list[bytes]], None], token: trio.lowlevel.TrioToken) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.client_options = client_options
        self.deliver = deliver
        self.token = token
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="push-consumer", daemon=True)
        self.consumed = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - logged; the service keeps answering requests
            log.error("push consumer failed: %s: %s", type(exc).__name__, exc, exc_info=True)
            self.failed = exc

    def _loop(self) -> None:
        from kafka import KafkaConsumer, TopicPartition

        options: dict[str, Any] = dict(
            bootstrap_servers=self.bootstrap_servers.split(","), group_id=None, enable_auto_commit=False,
            fetch_max_wait_ms=50, reconnect_backoff_max_ms=1000, client_id="waku-bridge-pusher",
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        options.update(kafka_client_options(self.client_options))
        consumer = None
        while consumer is None:
            try:
                consumer = KafkaConsumer(**options)
            except Exception as exc:  # noqa: BLE001 - Kafka down: retry until stopped
                log.warning("pusher: cannot reach Kafka (%s), retrying", exc)
                if self._stop.wait(2.0):
                    return
        try:
            parts = None
            while not parts and not self._stop.is_set():
                parts = consumer.partitions_for_topic(self.topic)
                if not parts:
                    time.sleep(0.5)
            if self._stop.is_set():
                return
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            consumer.seek_to_end(*tps)
            for tp in tps:
                consumer.position(tp)  # fix the start now, before subscriptions are accepted
            self.ready.set()
            log.info("pusher: consuming %s (%d partitions)", self.topic, len(tps))
            while not self._stop.is_set():
                batch = consumer.poll(timeout_ms=200)
                values = [r.value for recs in batch.values() for r in recs]
                if values:
                    self.consumed += len(values)
                    try:
                        self.token.run_sync_soon(self.deliver, values)
                    except trio.RunFinishedError:
                        return
        finally:
            consumer.close()


class Dedup:
    """Per peer, the last `size` message hashes pushed."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._seen: dict[str, collections.OrderedDict[bytes, None]] = {}

    def first(self, peer: str, message_hash: bytes) -> bool:
        seen = self._seen.setdefault(peer, collections.OrderedDict())
        if message_hash in seen:
            return False
        seen[message_hash] = None
        if len(seen) > self.size:
            seen.popitem(last=False)
        return True

    def forget(self, peer: str) -> None:
        self._seen.pop(peer, None)
