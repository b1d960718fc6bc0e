"""13/WAKU2-STORE 2.0.0-beta2 history queries over the Delta `messages` table: the one
implementation of the paging semantics, used by the online reader (ingest/store/reader.py),
the libp2p store protocol (ingest/store/), the `waku-store` CLI and the Spark DataFrame query
(pipeline/store/query.py). Plain Python: no Spark, no libp2p.

Semantics (../shared/DESIGN.md "Store 2.0.0-beta2 paging"):
- a message's Index is (received_time, digest); the order is received_time, then digest as
  unsigned bytes, then the message hash as unsigned bytes (a total order: two messages may
  share an Index, e.g. one payload on two pubsub topics received at once);
- a beta2 cursor is an Index: a position exclusive of every message at that Index; a store v3
  cursor names one message, and is its Index with its hash (`Index.message_hash`): a walk
  following v3 cursors meets every message once;
- page size 0 -> the default (20); above the maximum (100) -> the maximum;
- forward: the messages after the cursor; backward: the messages before it (the cursor is
  exclusive and is a position: valid whether or not a message sits there); no cursor: the
  first (forward) or last (backward) page;
- pages are always returned oldest first; the response cursor is the Index of the last
  (forward) or first (backward) message of the page, present only when more messages follow
  (nwaku reads one row more than the page to know: no cursor after an exactly full last page);
  a reader hands `finish_page` at least page size + 1 candidates when that many match;
- empty pubsub topic / content filters mean "any".

A query that cannot be served (`check_query` gives a reason) gets an empty page.

    from core.store_page import StoreQuery, page_from_rows
    page = page_from_rows(rows, StoreQuery(pubsub_topic="/waku/2/rs/1/0", forward=False))
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.config import Config

DIGEST_BYTES = 32
MIN_DIGEST = b"\x00" * DIGEST_BYTES
MAX_DIGEST = b"\xff" * DIGEST_BYTES
# Below and above every 32-byte message hash: the third key of a position between messages.
MIN_HASH = b""
MAX_HASH = b"\xff" * 33

# A message's place in the store order: (received_time, digest, message hash).
Key = tuple[float, bytes, bytes]

# Columns a page needs: the Index, the filters, the WakuMessage fields and its hash (store v3).
PAGE_COLUMNS = ("received_time", "digest", "pubsub_topic", "content_topic", "payload", "version",
                "timestamp", "meta", "rate_limit_proof", "message_hash")


@dataclass(frozen=True, order=True)
class Index:
    """A position in the store order: (received_time, digest), compared as such. Without a
    message hash it is a beta2 position, exclusive of every message at that Index; with one
    (a store v3 cursor, a page's edge message) it is that message's place in the total order."""
    received_time: float
    digest: bytes
    message_hash: bytes | None = field(default=None, compare=False)

    def bound(self, forward: bool) -> Key:
        """The cursor as a key of the total order: a page holds the keys above it (forward)
        or below it (backward). Without a hash, beyond every message at this Index."""
        if self.message_hash is not None:
            return (self.received_time, self.digest, self.message_hash)
        return (self.received_time, self.digest, MAX_HASH if forward else MIN_HASH)

    @classmethod
    def at_time(cls, t: float) -> Index:
        """The position just before every message received at `t` (a forward start, or a
        backward end exclusive of `t`)."""
        return cls(float(t), MIN_DIGEST)


@dataclass(frozen=True)
class StoreLimits:
    default_page_size: int = 20
    max_page_size: int = 100
    max_content_topics: int = 100

    @classmethod
    def from_config(cls, config: Config) -> StoreLimits:
        s = config["store_service"]
        return cls(s["default_page_size"], s["max_page_size"], s["max_content_topics"])


@dataclass(frozen=True)
class StoreQuery:
    pubsub_topic: str = ""
    content_topics: tuple[str, ...] = ()
    cursor: Index | None = None
    forward: bool = True
    page_size: int = 0
    # Store v3's time window, Unix nanoseconds, both ends inclusive, on the message's sender
    # timestamp (its receive time when it has none), as nwaku filters. None: unbounded.
    time_start: int | None = None
    time_end: int | None = None

    def with_cursor(self, cursor: Index | None) -> StoreQuery:
        return replace(self, cursor=cursor)


@dataclass
class StoredMessage:
    """One stored message: its Index, its pubsub topic and the WakuMessage fields."""
    received_time: float
    digest: bytes
    pubsub_topic: str
    content_topic: str
    payload: bytes = b""
    version: int | None = None
    timestamp: int | None = None
    meta: bytes | None = None
    rate_limit_proof: bytes | None = None
    message_hash: bytes | None = None

    @property
    def index(self) -> Index:
        return Index(self.received_time, self.digest, self.message_hash)

    @property
    def time_ns(self) -> int:
        """What a time window compares: the sender timestamp, or the receive time without one."""
        return self.timestamp if self.timestamp else int(self.received_time * 1e9)

    @classmethod
    def from_mapping(cls, row: Any) -> StoredMessage:
        get: Callable[[str], Any] = row.get if isinstance(row, dict) else (lambda k: row[k])
        return cls(float(get("received_time")), bytes(get("digest")), get("pubsub_topic"), get("content_topic"),
                   bytes(get("payload") or b""), get("version"), get("timestamp"),
                   None if get("meta") is None else bytes(get("meta")),
                   None if get("rate_limit_proof") is None else bytes(get("rate_limit_proof")),
                   _optional_bytes(row, "message_hash"))


@dataclass
class Page:
    """Messages oldest first, and the response cursor (None: no further page)."""
    messages: list[StoredMessage] = field(default_factory=list)
    cursor: Index | None = None
    forward: bool = True
    rows_scanned: int = 0
    # True when the reader's scan budget ended the page early: `cursor` is then the scan
    # frontier (a position), and the next page continues from there.
    partial: bool = False


def page_size_of(requested: int, limits: StoreLimits = StoreLimits()) -> int:
    if requested <= 0:
        return limits.default_page_size
    return min(requested, limits.max_page_size)


def check_query(query: StoreQuery, limits: StoreLimits = StoreLimits()) -> str | None:
    """Why the query cannot be served (a short reason used as a metric label), or None."""
    if len(query.content_topics) > limits.max_content_topics:
        return "too_many_content_topics"
    c = query.cursor
    if c is not None and math.isnan(float(c.received_time)):
        # Every other cursor is a position (any digest length, +-inf): only NaN is not ordered.
        return "bad_cursor_time"
    return None


def key_of(m: StoredMessage) -> Key:
    """The message's place in the store order (a message without a hash sorts first at its Index)."""
    return (m.received_time, m.digest, m.message_hash or MIN_HASH)


def after_cursor(key: Key, query: StoreQuery) -> bool:
    """Whether a message at `key` is on the queried side of the cursor."""
    c = query.cursor
    if c is None:
        return True
    return key > c.bound(True) if query.forward else key < c.bound(False)


def matches_topics(pubsub_topic: str, content_topic: str, query: StoreQuery) -> bool:
    if query.pubsub_topic and pubsub_topic != query.pubsub_topic:
        return False
    return not query.content_topics or content_topic in query.content_topics


def in_window(m: StoredMessage, query: StoreQuery) -> bool:
    if query.time_start is None and query.time_end is None:
        return True
    t = m.time_ns
    return (query.time_start is None or t >= query.time_start) and (query.time_end is None or t <= query.time_end)


def finish_page(candidates: Iterable[StoredMessage], query: StoreQuery, limits: StoreLimits = StoreLimits(),
                rows_scanned: int = 0) -> Page:
    """The page from matching messages on the queried side of the cursor (any order; the
    `n + 1` nearest to the cursor at least, when that many match): the `n` nearest, oldest
    first, with the cursor when a further message follows (the `n + 1`-th)."""
    n = page_size_of(query.page_size, limits)
    ordered = sorted(candidates, key=key_of, reverse=not query.forward)[:n + 1]
    more = len(ordered) > n
    del ordered[n:]
    if not query.forward:
        ordered.reverse()
    cursor = None
    if more:
        cursor = ordered[-1].index if query.forward else ordered[0].index
    return Page(ordered, cursor, query.forward, rows_scanned)


def edge_index(page: Page) -> Index | None:
    """The Index of the page's edge message (last forward, first backward), None when empty."""
    if not page.messages:
        return None
    return page.messages[-1].index if page.forward else page.messages[0].index


def page_from_rows(rows: Iterable[StoredMessage], query: StoreQuery, limits: StoreLimits = StoreLimits()) -> Page:
    """The plain-Python form (small tables, tests): filter `rows`, then `finish_page`."""
    if check_query(query, limits):
        return Page(forward=query.forward)
    rows = list(rows)
    hits = [m for m in rows if matches_topics(m.pubsub_topic, m.content_topic, query)
            and after_cursor(key_of(m), query) and in_window(m, query)]
    return finish_page(hits, query, limits, len(rows))


def history_pages(fetch: Callable[[StoreQuery], Page], query: StoreQuery,
                  max_pages: int | None = None) -> Iterator[Page]:
    """Follow the cursors: yields pages from `fetch(query) -> Page` until an empty one (or a
    page without cursor). Works with any of the three forms (Spark, reader, libp2p client).
    A partial page (reader scan budget) may be empty and still carry a cursor: follow it."""
    pages = 0
    while max_pages is None or pages < max_pages:
        page = fetch(query)
        pages += 1
        yield page
        if page.cursor is None:
            return
        query = query.with_cursor(page.cursor)


def _optional_bytes(row: Any, key: str) -> bytes | None:
    value = row.get(key) if isinstance(row, dict) else None
    return None if value is None else bytes(value)
