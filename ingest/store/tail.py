"""The store service's fresh tail: messages in Kafka `waku.messages` that the store job has not
yet committed to Delta, kept in memory so that store queries (beta2 and v3) answer them at once.

- `TailFollower` (a librdkafka consumer, `confluent-kafka`, read by a daemon thread; librdkafka
  fetches on threads of its own without the GIL, so the tail keeps up while the reader's thread
  holds the GIL after a commit: docs/decisions.md, session 15) reads every partition of the
  topic from where the store job's last committed batch ended (its checkpoint's offset log), or
  `tail_lookback_s` back in time when the checkpoint cannot be read. Each record goes through
  the store job's rules, declared once in `core/validation.py` (same names, limits, order),
  ephemeral messages are left out, and a message hash already in the Delta table is dropped
  (the reader's hash index).
- `Tail` holds the rest, one entry per message hash (the earliest receive time, as the job
  keeps per batch), indexed by (received_time, digest, hash) overall, per content topic and per
  pubsub topic, at most `tail_max_messages` (the oldest by receive time go first).
- The online reader (`ingest/store/reader.py`) merges the tail's nearest matches into each
  page in exact store order (receivedTime, digest, message hash), and when a new table version
  appears it hides in the tail every message hash of the version's new data files *and* swaps
  the snapshot in, in one brief hold of the tail's lock (`Tail.publish`): a query sees each
  message exactly once, in the tail or in Delta, never both and never neither. The hidden
  messages are then forgotten a chunk at a time. A message keeps its place when it moves from
  the tail to Delta (same receive time, digest and hash), so cursors stay valid.

Known limit: copies of one message (one hash, so one Kafka partition) with different receive
times that fall into two store-job batches, the later copy received earlier (two bridges with
skewed clocks), are stored by the job at the first copy's time while the tail showed the
earliest; a reader paging across the commit may then meet that message at two positions.
"""
from __future__ import annotations

import bisect
import collections
import contextlib
import glob
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.config import Config, ConfigError
from core.kafka import follower_config
from core.settings import ObjectStoreSettings, is_s3, local_path
from core.store_page import StoredMessage, StoreQuery, in_window
from core.validation import Limits, decode_ingest, rejection_reason
from ingest.kafka_follow import Follower

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

log = logging.getLogger("ingest.store.tail")
# librdkafka's own log lines (named "kafka...": the bridge's Kafka log limit applies to them).
_LIBRDKAFKA_LOG = logging.getLogger("kafka.librdkafka.store-tail")

Key = tuple[float, bytes, bytes]  # (received_time, digest, message_hash)
TAKE_MAX = 5000  # records the consumer thread takes in at once
IDLE_POLL_S = 0.5  # a poll's longest wait for a first record: how often an idle loop wakes
TAKE_INTERVAL_S = 0.005  # ... and at most this often, counted from the last take's start (see consumer_config)
# A following session's longest fetch hold (the broker answers at the first record): while queries
# come, 2 empty fetches a second; a catch-up behind a held fetch waits at most this (see consumer_config).
FOLLOW_FETCH_WAIT_MS = 500
_CHUNK = 500  # messages taken in per hold of the tail's lock
# Messages forgotten, Kafka arrivals swept and stale keys trimmed per hold of the tail's lock
# after a commit (~1-2 ms of work): inserts and queries wait for one such hold at most, whatever
# the commit's size (a commit of 40,000 messages held it 90 ms in one go; docs/decisions.md).
_RELEASE_CHUNK = 2000
# A message as the tail holds it: StoredMessage's fields in order, in a plain tuple. A tuple of
# bytes, str and numbers is left out of the cyclic GC's walks once it has survived one, where a
# StoredMessage stays in them: 200,000 of those made each full collection ~75 ms longer, a pause
# of every thread of the bridge (docs/decisions.md, session 15). Read back with `StoredMessage(*row)`.
Row = tuple
# A Kafka record as the consumer thread takes it: (value, partition, offset, Kafka timestamp in
# seconds or None).
Record = tuple[bytes | None, int, int, float | None]
_RECEIVED, _DIGEST, _PUBSUB, _CONTENT = 0, 1, 2, 3


def _row(m: StoredMessage) -> Row:
    return (m.received_time, m.digest, m.pubsub_topic, m.content_topic, m.payload, m.version, m.timestamp, m.meta,
            m.rate_limit_proof, m.message_hash)


@dataclass(frozen=True)
class TailSettings:
    bootstrap_servers: str
    client_options: Mapping[str, str] = field(default_factory=dict)
    topic: str = "waku.messages"
    limits: Limits = Limits()
    max_messages: int = 200_000
    # The store job's checkpoint (its offset log says where committed data ends); "" or not a
    # local directory: start tail_lookback_s back in time instead.
    checkpoint_path: str = ""
    lookback_s: float = 600.0
    # Until the tail holds what was in Kafka at start (after a restart), a query waits up to
    # this long, then is answered "unavailable": answering from Delta alone would take back
    # messages the service answered before it restarted.
    ready_wait_s: float = 5.0
    # How to read an s3a:// checkpoint ([warehouse] s3_*).
    object_store: ObjectStoreSettings = ObjectStoreSettings()
    # With no query for this long the tail reads Kafka once every idle_fetch_s instead of record
    # by record (0: always record by record); the next query has it catch up first (TailFollower).
    idle_after_s: float = 60.0
    idle_fetch_s: float = 1.0

    @classmethod
    def from_config(cls, config: Config) -> TailSettings:
        s = config["store_service"]
        if s["tail_max_messages"] < 1:
            raise ConfigError(f"store_service.tail_max_messages: expected at least 1, got {s['tail_max_messages']}")
        for key in ("tail_lookback_s", "tail_ready_wait_s", "tail_idle_after_s"):
            if s[key] < 0:
                raise ConfigError(f"store_service.{key}: expected 0 or more, got {s[key]}")
        if not 0.01 <= s["tail_idle_fetch_s"] <= 300:
            raise ConfigError(f"store_service.tail_idle_fetch_s: expected 0.01 to 300, got {s['tail_idle_fetch_s']}")
        return cls(config.bootstrap_servers(), config.kafka_client_options(), config.get("topics.messages"),
                   Limits.from_config(config), s["tail_max_messages"], config.checkpoint_path("store"),
                   s["tail_lookback_s"], s["tail_ready_wait_s"], ObjectStoreSettings.from_config(config),
                   s["tail_idle_after_s"], s["tail_idle_fetch_s"])


NO_KAFKA_TIMESTAMP = 0  # confluent_kafka.TIMESTAMP_NOT_AVAILABLE (a test checks they agree)


def kafka_seconds(timestamp: tuple[int, int]) -> float | None:
    """librdkafka's (type, milliseconds) record timestamp in Unix seconds; None when the record
    has none. The same value as the store job's `unix_micros(kafka_timestamp) / 1e6`."""
    kind, ms = timestamp
    return None if kind == NO_KAFKA_TIMESTAMP or ms < 0 else ms / 1000


def stored_form(value: bytes | None, limits: Limits, now: float | None) -> tuple[StoredMessage | None, str | None]:
    """(the message as the store job would store it, None), or (None, why not): a rule's name
    or "ephemeral". `now`: the record's Kafka timestamp in seconds (core/validation.py)."""
    f = decode_ingest(value)
    reason = rejection_reason(f, limits, now)
    if reason is not None:
        return None, reason
    if f.ephemeral:
        return None, "ephemeral"
    # The rules passed: a received time, a pubsub topic and a content topic are present.
    assert f.received_time is not None and f.pubsub_topic is not None and f.content_topic is not None
    return StoredMessage(float(f.received_time), f.digest, f.pubsub_topic, f.content_topic, f.payload or b"",
                         f.version, f.timestamp, f.meta, f.rate_limit_proof, f.message_hash), None


class Tail:
    """Messages not yet in Delta, one per hash. Thread-safe through `lock`, which the reader also
    holds while it swaps in a new snapshot and hides what that snapshot made durable (`publish`)."""

    def __init__(self, max_messages: int = 200_000,
                 committed: Callable[[], dict[int, int] | None] | None = None) -> None:
        self.max_messages = max_messages
        # Where the store job's committed batches end ({partition: offset}, None: unknown); the
        # reader asks before each table refresh and sweeps what lies below (`sweep_locked`).
        self.committed = committed or (lambda: None)
        self.lock = threading.Lock()
        self._entries: dict[bytes, Row] = {}
        self._keys: dict[bytes, Key] = {}  # the live key of each entry (the one object in the lists)
        # Kafka coordinates of the copy kept, and per partition (offset, hash) in arrival order.
        self._coords: dict[bytes, tuple[int, int]] = {}
        self._arrivals: dict[int, collections.deque[tuple[int, bytes]]] = {}
        self._all: list[Key] = []
        self._stale = 0  # keys in _all whose entry is gone or was replaced
        self._by_content: dict[str, list[Key]] = {}
        self._by_pubsub: dict[str, list[Key]] = {}
        self._untrimmed_content: set[str] = set()
        self._untrimmed_pubsub: set[str] = set()
        # Hashes a Delta commit made durable, not yet forgotten (`publish`): reads skip them,
        # inserts refuse them.
        self._hidden: set[bytes] | frozenset[bytes] = frozenset()
        # Bumped with every drop (a new snapshot): an insert checked against the table before a
        # newer snapshot was swapped in must be checked again (TailFollower).
        self.generation = 0
        self.added = 0
        self.dropped = 0  # made durable
        self.evicted = 0  # over max_messages before a commit
        self.swept = 0  # below the store job's committed offsets yet not in Delta: the job refused them
        self._evict_logged = -math.inf

    def __len__(self) -> int:
        return len(self._entries)

    # --- changes (call with `lock` held) ---------------------------------------------------

    def add_locked(self, messages: Iterable[StoredMessage],
                   coords: Mapping[bytes, tuple[int, int]] | None = None) -> int:
        """Take messages in (one per hash: the earliest receive); `coords`: hash -> the Kafka
        (partition, offset) of that copy."""
        added = 0
        # New keys per sorted list, merged in once per call: copies arrive out of receive-time
        # order (partitions, bridges), and one insert at a time into a list of 200,000 moves its
        # tail once per key.
        new_all: list[Key] = []
        new_content: dict[str, list[Key]] = {}
        new_pubsub: dict[str, list[Key]] = {}
        hidden = self._hidden
        for m in messages:
            h = m.message_hash
            assert h is not None  # every stored form has one
            if h in hidden:
                continue  # durable
            old = self._entries.get(h)
            if old is not None:
                if (old[_RECEIVED], old[_DIGEST]) <= (m.received_time, m.digest):
                    continue
                self._remove_keys({h: old})
            self._entries[h] = _row(m)
            key = (m.received_time, m.digest, h)
            self._keys[h] = key
            where = coords.get(h) if coords else None
            if where is not None:
                self._coords[h] = where
                self._arrivals.setdefault(where[0], collections.deque()).append((where[1], h))
            new_all.append(key)
            new_content.setdefault(m.content_topic, []).append(key)
            new_pubsub.setdefault(m.pubsub_topic, []).append(key)
            added += 1
        _merge(self._all, new_all)
        for index, new in ((self._by_content, new_content), (self._by_pubsub, new_pubsub)):
            for name, keys in new.items():
                _merge(index.setdefault(name, []), keys)
        self.added += added
        self._tidy_arrivals()
        over = len(self._entries) - self.max_messages
        if over > 0:
            oldest: dict[bytes, Row] = {}
            for k in self._all:
                if len(oldest) >= over:
                    break
                if self._live(k) and k[2] not in hidden:
                    oldest[k[2]] = self._entries[k[2]]
            self._remove_keys(oldest)
            self.evicted += over
            now = time.monotonic()
            if now - self._evict_logged > 10.0:  # the store job is down or far behind: say so, not per batch
                self._evict_logged = now
                log.warning("store tail over %d messages: evicting the oldest not yet in Delta (%d so far); "
                            "they are answered again once the store job commits them", self.max_messages,
                            self.evicted)
        return added

    def _tidy_arrivals(self) -> None:
        """Arrival entries of messages gone (durable, evicted, replaced) leave from the front;
        should they pile up behind one long-lived message, the lists are rebuilt."""
        total = 0
        for partition, arrivals in self._arrivals.items():
            while arrivals and self._coords.get(arrivals[0][1]) != (partition, arrivals[0][0]):
                arrivals.popleft()
            total += len(arrivals)
        if total > 2 * max(len(self._coords), 1000):
            rebuilt: dict[int, collections.deque[tuple[int, bytes]]] = {}
            for h, (p, o) in sorted(self._coords.items(), key=lambda kv: kv[1]):
                rebuilt.setdefault(p, collections.deque()).append((o, h))
            self._arrivals = rebuilt

    def publish(self, durable: set[bytes] | frozenset[bytes], swap: Callable[[], None] = lambda: None,
                committed: Mapping[int, int] | None = None) -> int:
        """A Delta commit made the messages with these hashes durable: hide them and call `swap`
        (the reader swaps its new snapshot in) in one brief hold of the lock, so that a query
        sees each message once, in the tail or in Delta; then forget them, sweep (`committed`:
        the store job's committed offsets, read before the snapshot) and trim, each a chunk at a
        time, so inserts and queries never wait for more than one chunk. One caller at a time
        (the reader's refresh). Returns how many messages were forgotten."""
        with self.lock:
            self.generation += 1
            self._hidden = durable
            swap()
            # Look up the smaller side, so a compaction's millions of hashes cost no more than
            # the tail's size.
            candidates = list(durable) if len(durable) <= len(self._entries) else list(self._entries)
        gone = 0
        entries = self._entries
        for i in range(0, len(candidates), _RELEASE_CHUNK):
            with self.lock:
                chunk = {h: entries[h] for h in candidates[i:i + _RELEASE_CHUNK] if h in durable and h in entries}
                if chunk:
                    self._remove_keys(chunk, trim=False)
            gone += len(chunk)
            _let_waiters_in()
        with self.lock:
            self._hidden = frozenset()
        self.dropped += gone
        if committed:
            self._sweep(committed)
        self.tidy()
        return gone

    def _sweep(self, committed: Mapping[int, int]) -> int:
        """Forget messages whose Kafka offset lies below the store job's committed end of their
        partition: called after forgetting what the matching snapshot holds, so what is left
        there is what the job refused (a receive time it found in the future, a copy it had
        already)."""
        swept, more = 0, True
        while more:
            gone: dict[bytes, Row] = {}
            more = False
            with self.lock:
                for partition, arrivals in self._arrivals.items():
                    end = committed.get(partition)
                    while end is not None and arrivals and arrivals[0][0] < end:
                        if len(gone) >= _RELEASE_CHUNK:
                            more = True
                            break
                        offset, h = arrivals.popleft()
                        if self._coords.get(h) == (partition, offset) and h in self._entries:
                            gone[h] = self._entries[h]
                if gone:
                    self._remove_keys(gone, trim=False)
            swept += len(gone)
            _let_waiters_in()
        if swept:
            self.swept += swept
            log.info("store tail: %d messages below the store job's committed offsets are not in Delta "
                     "(refused by the job): dropped", swept)
        return swept

    def _live(self, key: Key) -> bool:
        return self._keys.get(key[2]) is key

    def _remove_keys(self, gone: Mapping[bytes, Row], trim: bool = True) -> None:
        """Forget entries. Their keys stay in the sorted lists as stale ones (skipped by reads):
        trimmed off the front of the lists concerned (commits take the oldest first), and all
        lists are rebuilt once stale keys outnumber live ones. trim False: leave that to
        `tidy()` (a commit's release holds the lock only for its dictionary deletes)."""
        for h in gone:
            del self._entries[h]
            del self._keys[h]
            self._coords.pop(h, None)
        self._stale += len(gone)
        if trim:
            self._trim_lists({r[_CONTENT] for r in gone.values()}, {r[_PUBSUB] for r in gone.values()})
        else:
            self._untrimmed_content.update(r[_CONTENT] for r in gone.values())
            self._untrimmed_pubsub.update(r[_PUBSUB] for r in gone.values())

    def tidy(self) -> None:
        """Trim the lists that forgotten messages left stale keys in, `_RELEASE_CHUNK` keys per
        hold of the lock (takes it)."""
        with self.lock:
            contents, pubsubs = self._untrimmed_content, self._untrimmed_pubsub
            self._untrimmed_content, self._untrimmed_pubsub = set(), set()
        self._trim_lists(contents, pubsubs, locking=True)

    def _trim_lists(self, contents: set[str], pubsubs: set[str], locking: bool = False) -> None:
        """Trim the stale keys off the front of the overall list and of the named topics' lists;
        rebuild every list once stale keys outnumber live ones. locking: take the lock for each
        `_RELEASE_CHUNK` keys (else the caller holds it)."""
        hold = self.lock if locking else contextlib.nullcontext()
        budget = _RELEASE_CHUNK if locking else math.inf
        work: list[tuple[dict[str, list[Key]] | None, str]] = [(None, "")]
        work += [(self._by_content, name) for name in contents]
        work += [(self._by_pubsub, name) for name in pubsubs]
        i = 0
        while i < len(work):
            with hold:
                spent = 0
                while i < len(work) and spent < budget:
                    index, name = work[i]
                    lst = self._all if index is None else index.get(name)
                    n = self._trim(lst, budget - spent) if lst is not None else 0
                    if index is None:
                        self._stale -= n
                    elif lst is not None and not lst:
                        del index[name]
                    if lst is None or n < budget - spent:
                        i += 1  # done with this list
                    spent += n + 1
            if locking:
                _let_waiters_in()
        with hold:
            if self._stale > max(len(self._entries), 10_000):
                live = self._live
                self._all = [k for k in self._all if live(k)]
                for index in (self._by_content, self._by_pubsub):
                    for name in list(index):
                        index[name] = [k for k in index[name] if live(k)]
                        if not index[name]:
                            del index[name]
                self._stale = 0

    def _trim(self, lst: list[Key], budget: float = math.inf) -> int:
        """Drop stale keys off the front of `lst`, at most `budget`; how many."""
        i, n, keys = 0, min(len(lst), budget), self._keys
        while i < n and keys.get(lst[i][2]) is not lst[i]:
            i += 1
        if i:
            del lst[:i]
        return i

    # --- reads (call with `lock` held) -----------------------------------------------------

    def get_locked(self, message_hash: bytes) -> StoredMessage | None:
        row = self._entries.get(message_hash)
        return None if row is None or message_hash in self._hidden else StoredMessage(*row)

    def nearest_locked(self, query: StoreQuery, n: int) -> list[StoredMessage]:
        """The (at most) n matching messages nearest to the cursor, in no particular order."""
        if not self._entries:
            return []
        if query.content_topics:
            lists = [self._by_content.get(c, []) for c in set(query.content_topics)]
        elif query.pubsub_topic:
            lists = [self._by_pubsub.get(query.pubsub_topic, [])]
        else:
            lists = [self._all]
        out: list[StoredMessage] = []
        live, hidden = self._keys, self._hidden
        c = query.cursor
        for lst in lists:
            # The cursor's bound in the total order (received_time, digest, hash): a v3 cursor
            # names one message, a beta2 cursor lies beyond every message at its Index.
            if query.forward:
                i = 0 if c is None else bisect.bisect_right(lst, c.bound(True))
                keys = (lst[j] for j in range(i, len(lst)))
            else:
                i = len(lst) if c is None else bisect.bisect_left(lst, c.bound(False))
                keys = (lst[j] for j in range(i - 1, -1, -1))
            got = 0
            for key in keys:
                if live.get(key[2]) is not key or key[2] in hidden:
                    continue  # stale, or durable
                row = self._entries[key[2]]
                if query.pubsub_topic and row[_PUBSUB] != query.pubsub_topic:
                    continue
                m = StoredMessage(*row)
                if not in_window(m, query):
                    continue
                out.append(m)
                got += 1
                if got >= n:
                    break
        return out

    def snapshot(self) -> list[StoredMessage]:
        with self.lock:
            hidden = self._hidden
            return [StoredMessage(*self._entries[k[2]]) for k in self._all if self._live(k) and k[2] not in hidden]


def committed_offsets(checkpoint: str, topic: str,
                      store: ObjectStoreSettings | None = None) -> dict[int, int] | None:
    """Where the store job's committed data ends in `topic`: {partition: next offset} from the
    offset log of the last batch with a commit marker in its checkpoint (Spark's
    `offsets/<batch>` and `commits/<batch>` files), or None when there is no local checkpoint.
    A batch's Delta commit precedes its commit marker, so everything before these offsets is in
    the table; a later batch may be too (the hash check takes care of it)."""
    if checkpoint and store is not None and is_s3(checkpoint):
        return _s3_committed_offsets(checkpoint, topic, store)
    root = local_path(checkpoint) if checkpoint else None
    if root is None:
        return None
    commits = [int(os.path.basename(p)) for p in glob.glob(os.path.join(root, "commits", "*"))
               if os.path.basename(p).isdigit()]
    if not commits:
        return None
    try:
        with open(os.path.join(root, "offsets", str(max(commits)))) as f:
            lines = f.read().splitlines()
        for line in lines[2:]:
            offsets = json.loads(line)
            if topic in offsets:
                return {int(p): int(o) for p, o in offsets[topic].items()}
    except (OSError, ValueError) as exc:
        log.warning("cannot read the store job's offsets in %s: %s", root, exc)
    return None


def _s3_committed_offsets(checkpoint: str, topic: str, store: ObjectStoreSettings) -> dict[int, int] | None:
    """committed_offsets of a checkpoint on S3 (read with Arrow's S3 file system)."""
    from pyarrow import fs

    root = checkpoint.split("://", 1)[1].rstrip("/")
    try:
        s3 = store.arrow_filesystem()
        listed = s3.get_file_info(fs.FileSelector(f"{root}/commits", allow_not_found=True))
        commits = [int(i.base_name) for i in listed if i.base_name.isdigit()]
        if not commits:
            return None
        with s3.open_input_stream(f"{root}/offsets/{max(commits)}") as f:
            lines = f.read().decode().splitlines()
        for line in lines[2:]:
            offsets = json.loads(line)
            if topic in offsets:
                return {int(p): int(o) for p, o in offsets[topic].items()}
    except (OSError, ValueError) as exc:
        log.warning("cannot read the store job's offsets in %s: %s", checkpoint, exc)
    return None


class TailFollower(Follower):
    """The consumer thread: waku.messages -> validated messages -> `tail`, unless the table has
    them (`durable(hashes) -> set` of those already in Delta, from the reader's hash index). A
    failed loop starts again from its start position (`ingest.kafka_follow.Follower`).

    `ready` is set once the records that were in the topic at start are in the tail.

    Two ways to read, each a consumer session of its own (a consumer's fetch settings are fixed
    when it is made), the next one starting where the last one's records end:
    - *following*, record by record (a fetch answered at the first record): a message is in the
      tail ~5-10 ms after Kafka acknowledged it. From start, and while queries come;
    - *idle*, after `idle_after_s` with no query: one fetch every `idle_fetch_s`, taken in at
      once. Kafka answers one fetch a second instead of one a record, and the tail takes in one
      batch instead of one per record.
    A query (`demand`) while idle wakes the loop, which follows again from where it was; the
    query waits until the tail holds what Kafka held when the new session began (~1 s of
    records to read: a few ms)."""

    def __init__(self, settings: TailSettings, tail: Tail,
                 durable: Callable[[list[bytes]], set[bytes]],
                 wait_for: threading.Event | None = None) -> None:
        super().__init__("store tail", "store-tail", log)
        self.settings = settings
        self.tail = tail
        self.durable = durable
        self.wait_for = wait_for
        self.consumed = 0
        self.refused: dict[str, int] = {}
        # Called after each batch taken in with its oldest record's age (now - Kafka append time):
        # how late the tail is (the bridge's waku_store_tail_lag_seconds).
        self.on_taken: Callable[[float], None] | None = None
        # The way of reading (see the class): what a session is, what a query sees.
        self._mode = threading.Lock()
        self._idle = False
        self._last_demand = time.monotonic()
        self._wake = threading.Event()  # a query came while idle
        self._caught_up = self.ready  # set when the tail holds what Kafka held at the last wake
        self.sessions = {"following": 0, "idle": 0}  # sessions begun, by way of reading

    @property
    def idle(self) -> bool:
        """The tail reads Kafka once every idle_fetch_s (no query for idle_after_s)."""
        return self._idle

    def demand(self) -> threading.Event:
        """A query is about to read the tail: the event set once the tail holds what a query
        must see (at start, what Kafka held then; after an idle spell, what it held when this
        query woke the loop). The tail follows record by record until idle_after_s pass without
        another."""
        with self._mode:
            self._last_demand = time.monotonic()
            if self._idle and self._caught_up.is_set():
                self._caught_up = threading.Event()
                self._wake.set()
            return self._caught_up

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait up to `timeout` for it."""
        super().stop()
        self._wake.set()
        self.join(timeout)

    def consumer_config(self, idle: bool = False) -> dict[str, Any]:
        """librdkafka's properties for the tail's consumer (`core.kafka.follower_config`). The
        loop takes at most every TAKE_INTERVAL_S: under load ~200 batches a second, not many of a
        few (the tail's cost per batch: the table check, the lock, the merges), at most ~5 ms more
        on a message's way to the tail (measured: p50 8 ms at 1,000 and 10,000 msg/s, as with a
        10 ms fetch wait; docs/decisions.md, issue 41). A following session's fetch is answered at
        the first record, else after FOLLOW_FETCH_WAIT_MS: a fetch the broker holds (the one in
        flight when a session begins, or the only one librdkafka sends after a fetch error backed a
        partition off) delays a catch-up by at most that, well inside ready_wait_s. An idle
        session's fetch is answered after idle_fetch_s, or sooner once 1 MiB is there."""
        s = self.settings
        extra: dict[str, Any] = {"fetch.wait.max.ms": max(1, round(s.idle_fetch_s * 1000)),
                                 "fetch.min.bytes": 1 << 20} if idle else {"fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS}
        # Reaching a partition's end is reported (the tail is `ready` once every partition has
        # been read up to where it ended at start).
        return follower_config(s.bootstrap_servers, "waku-store-tail", s.client_options, **{
            "enable.partition.eof": True, "logger": _LIBRDKAFKA_LOG, "error_cb": self._kafka_error, **extra})

    def _loop(self) -> None:
        if self.wait_for is not None:
            while not self.wait_for.wait(0.5):  # the reader's hash index of the table as it is
                if self._stop.is_set():
                    return
        with self._mode:  # a (re)started loop follows
            self._idle = False
        # One consumer for each way of reading, kept for the loop's life: a new one would first
        # connect and ask for the metadata (~60 ms on a query's way). The one not reading has
        # nothing assigned and fetches nothing.
        following: Consumer = self._take_consumer()
        idle: Consumer | None = None
        try:
            positions = None
            while not self._stop.is_set():
                if self._idle:
                    idle = idle or self._open(self.consumer_config(idle=True))
                    positions = self._idle_session(idle, positions)
                    idle.unassign()
                else:
                    positions = self._following(following, positions)
                    following.unassign()
                if positions is None:
                    return
        finally:
            following.close()
            if idle is not None:
                idle.close()

    def _partitions(self, consumer: Consumer) -> dict[int, tuple[int, int]] | None:
        """{partition: (low, high) watermarks} of the topic; {} when it does not exist yet (the
        tail is then ready: nothing to catch up with); None when stopped meanwhile."""
        from confluent_kafka import KafkaException, TopicPartition

        s = self.settings
        while True:
            try:
                meta = consumer.list_topics(s.topic, timeout=5.0).topics[s.topic]
            except KafkaException as exc:  # cannot reach Kafka: retried, one line per error
                self._kafka_error(exc.args[0])
                if self._stop.wait(2.0):
                    return None
                continue
            parts = meta.partitions if meta.error is None else None
            if parts:
                return {p: consumer.get_watermark_offsets(TopicPartition(s.topic, p), timeout=10.0)
                        for p in sorted(parts)}
            if not self.ready.is_set():
                # No such topic yet: nothing in Kafka to catch up with; follow it once it exists.
                log.info("store tail: topic %s does not exist yet; following it once it does", s.topic)
                self.ready.set()
            if self._stop.wait(0.5):
                return None

    def _following(self, consumer: Consumer, positions: dict[int, int] | None) -> dict[int, int] | None:
        """Follow record by record from `positions` (None: the start position, `_starts`) until
        idle_after_s pass with no query; the next offsets to read then, None when stopped."""
        from confluent_kafka import TopicPartition

        s = self.settings
        with self._mode:
            caught_up = self._caught_up  # what the queries that woke the loop wait for
            self._wake.clear()
        bounds = self._partitions(consumer)
        if bounds is None:
            return None
        ends = {p: high for p, (_, high) in bounds.items()}
        if positions is None:
            starts = self._starts(consumer, bounds)
            log.info("store tail: following %s from %s (%s)", s.topic, starts, self._origin)
        else:
            starts = {p: positions.get(p, low) for p, (low, _) in bounds.items()}
            log.debug("store tail: following %s again from %s", s.topic, starts)
        self.sessions["following"] += 1
        # A partition read to its end is assigned one record back (read again and left out): a
        # fetch that names only such partitions would otherwise be held by the broker for
        # fetch.wait.max.ms (5 s), and librdkafka sends none other meanwhile. Its first fetch
        # names the partitions made active so far, maybe not those with records to read
        # (seen: a catch-up that took 5 s, test_store_freshness.py).
        consumer.assign([TopicPartition(s.topic, p, starts[p] - 1 if starts[p] == high > low else starts[p])
                         for p, (low, high) in bounds.items()])
        at = dict(starts)
        pending = {p for p in bounds if starts[p] < ends[p]}
        if not pending:
            caught_up.set()
            self.ready.set()
        began = 0.0
        while not self._stop.is_set():
            # Wait for the first record, then take what else librdkafka's fetcher has queued
            # (it fetches on threads of its own, without the GIL).
            first = consumer.poll(IDLE_POLL_S)  # returns at the first record
            if first is None:
                if self._idle_now(caught_up):
                    return at
                continue
            # At most one take every TAKE_INTERVAL_S: under load the batch gathers meanwhile;
            # at a trickle the poll's wait has passed it already (no extra wake-up a record).
            gather = began + TAKE_INTERVAL_S - time.monotonic()
            if gather > 0 and self._stop.wait(gather):
                break
            began = time.monotonic()
            records, reached = self._records([first, *consumer.consume(TAKE_MAX - 1, 0)])
            self._take_all(records, at)
            if pending:
                # Partitions read to their end (an EOF event), or past where they ended at start.
                reached.update(p for _, p, o, _ in records if o + 1 >= ends[p])
                pending.difference_update(reached)
                if not pending:
                    caught_up.set()
                    self.ready.set()
            if self._idle_now(caught_up):
                return at
        return None

    def _idle_now(self, caught_up: threading.Event) -> bool:
        """Caught up and no query for idle_after_s: turn idle (the next query wakes the loop)."""
        after = self.settings.idle_after_s
        if not after or not caught_up.is_set():
            return False
        with self._mode:
            if time.monotonic() - self._last_demand < after:
                return False
            self._idle = True
        log.debug("store tail: no query for %g s, reading Kafka every %g s", after, self.settings.idle_fetch_s)
        return True

    def _idle_session(self, consumer: Consumer, positions: dict[int, int] | None) -> dict[int, int] | None:
        """Read from `positions` once every idle_fetch_s (the consumer's fetches wait that long)
        until a query wakes the loop; the next offsets to read then, None when stopped."""
        from confluent_kafka import TopicPartition

        assert positions is not None  # a following session came first
        s = self.settings
        self.sessions["idle"] += 1
        at = dict(positions)
        consumer.assign([TopicPartition(s.topic, p, o) for p, o in at.items()])
        while not self._stop.is_set():
            woken = self._wake.wait(s.idle_fetch_s)
            records: list[Record] = []
            while True:
                got = consumer.consume(TAKE_MAX, 0)
                records += self._records(got)[0]
                if len(got) < TAKE_MAX:
                    break
            self._take_all(records, at)
            if woken:
                with self._mode:
                    self._idle = False
                return None if self._stop.is_set() else at
        return None

    def _records(self, messages: list[Message]) -> tuple[list[Record], set[int]]:
        """librdkafka's messages -> (records, partitions an EOF event says were read to their
        end); any other error is logged."""
        from confluent_kafka import KafkaError

        records: list[Record] = []
        ended: set[int] = set()
        for m in messages:
            err = m.error()
            partition = m.partition()
            if err is None:
                offset = m.offset()
                assert partition is not None and offset is not None  # a record has both
                records.append((m.value(), partition, offset, kafka_seconds(m.timestamp())))
            elif err.code() == KafkaError._PARTITION_EOF and partition is not None:
                ended.add(partition)
            else:
                self._kafka_error(err)
        return records, ended

    def _take_all(self, records: list[Record], at: dict[int, int]) -> None:
        """Take in the records from `at` on (each partition's next offset) and move it past them."""
        records = [r for r in records if r[2] >= at.get(r[1], 0)]
        if not records:
            return
        for _, partition, offset, _ in records:
            at[partition] = max(at.get(partition, 0), offset + 1)
        self._take(records)
        if self.on_taken is not None:
            appended = [t for _, _, _, t in records if t is not None]
            if appended:
                self.on_taken(time.time() - min(appended))

    _origin = ""

    def _starts(self, consumer: Consumer, bounds: dict[int, tuple[int, int]]) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        s = self.settings
        committed = committed_offsets(s.checkpoint_path, s.topic, s.object_store)
        if committed is not None:
            self._origin = "the store job's last committed batch"
            starts = {p: committed.get(p, low) for p, (low, _) in bounds.items()}
        else:
            self._origin = f"{s.lookback_s:g} s back, no store job checkpoint"
            at = int((time.time() - s.lookback_s) * 1000)
            found = consumer.offsets_for_times([TopicPartition(s.topic, p, at) for p in bounds], timeout=10.0)
            # No record at or after that time: the partition's end (librdkafka answers -1).
            starts = {tp.partition: (tp.offset if tp.offset >= 0 else bounds[tp.partition][1]) for tp in found}
        # Never more than the tail can hold.
        per_part = max(1, s.max_messages // max(1, len(bounds)))
        return {p: min(high, max(low, starts[p], high - per_part)) for p, (low, high) in bounds.items()}

    def _take(self, records: list[Record]) -> None:
        """Records as (value, partition, offset, Kafka timestamp in seconds or None)."""
        lim = self.settings.limits
        fresh: dict[bytes, StoredMessage] = {}
        coords: dict[bytes, tuple[int, int]] = {}
        for value, partition, offset, kafka_time in records:
            try:
                m, why = stored_form(value, lim, kafka_time)
            except Exception as exc:  # noqa: BLE001 - one hostile record must not stop the tail
                log.warning("store tail: record %s/%d refused: %s: %s", partition, offset, type(exc).__name__, exc)
                m, why = None, "error"
            if m is None:
                assert why is not None  # a message, or the reason there is none
                self.refused[why] = self.refused.get(why, 0) + 1
                continue
            h = m.message_hash
            assert h is not None  # stored_form sets it
            old = fresh.get(h)
            if old is None or (m.received_time, m.digest) < (old.received_time, old.digest):
                fresh[h] = m
                coords[h] = (partition, offset)
        self.consumed += len(records)
        if not fresh:
            return
        # Checked against the table, then taken in by chunks (the lock is held briefly: queries
        # wait for it); when a new snapshot was swapped in meanwhile, the rest is checked again.
        items = list(fresh.items())
        generation = self.tail.generation
        durable = self._durable([h for h, _ in items])
        while items:
            with self.tail.lock:
                if self.tail.generation == generation:
                    chunk, items = items[:_CHUNK], items[_CHUNK:]
                    self.tail.add_locked((m for h, m in chunk if h not in durable), coords)
                    continue
            generation = self.tail.generation
            durable = self._durable([h for h, _ in items])

    def _durable(self, hashes: list[bytes]) -> set[bytes]:
        """The table's check, tried again on a storage error (a snapshot whose files a vacuum
        removed); if it keeps failing, nothing counts as durable: a message the table already
        holds may then show twice until the store job's committed offsets pass it (sweep)."""
        for attempt in range(3):
            try:
                return self.durable(hashes)
            except Exception as exc:  # noqa: BLE001 - storage errors: retry, then go on
                log.warning("store tail: checking %d hashes against the table failed (%s: %s)", len(hashes),
                            type(exc).__name__, exc)
                if self._stop.wait(0.2 * (attempt + 1)):
                    break
        return set()


def _let_waiters_in() -> None:
    """Between two holds of the tail's lock by a long release: sleep a moment (giving up the
    GIL), so that a thread woken when the lock was let go (an insert, a query) takes it before
    this one does again. Python's locks are not fair: without this, the releasing thread took the
    lock back chunk after chunk and a query waited for most of the release (page max 152-157 ms
    at commits of 40,000 messages, against 50-83 ms with it; benchmarks.md, session 16). ~0.25 ms
    a pause, ~100 pauses for such a commit."""
    time.sleep(0.0002)


def _merge(lst: list[Key], keys: list[Key]) -> None:
    """Merge `keys` into the sorted list `lst`: appended when they all come after it, else its
    part from the first new key on is sorted again with them (two sorted runs: one pass)."""
    if not keys:
        return
    keys.sort()
    if not lst or lst[-1] < keys[0]:
        lst.extend(keys)
        return
    at = bisect.bisect_right(lst, keys[0])
    rest = lst[at:]
    rest.extend(keys)
    rest.sort()
    lst[at:] = rest

