"""The online store reader: answers history pages in milliseconds from the latest snapshot of
the Delta `messages` table, without Spark.

- The snapshot (file list + per-file statistics) is read with the Rust Delta reader
  (`deltalake`) and followed as the store job commits (`follow()` polls every
  `store_service.refresh_interval_s`; `refresh()` does it once).
- A query walks "units" in store order: data files first (Delta min/max statistics on
  received_time, pubsub_topic and content_topic), then their Parquet row groups (footer
  statistics), nearest to the cursor first. A unit is read only when its statistics allow a
  match and it could still hold a message of the page; the walk stops as soon as the page is
  complete and no unread unit can hold a nearer message. Files may overlap in time (several
  micro-batches, compaction): the walk is a merge, so the page is exact regardless.
- Decoded row groups are kept in an LRU cache (`store_service.cache_mb`), so a client paging
  along the cursor reads each row group once.
- Each query reads at most `store_service.max_scan_rows` rows, plus the row groups that
  straddle the cursor. When that budget ends a page early the page is partial: it holds the
  messages found so far and its cursor is the scan frontier (a position with no message, always
  beyond the query's cursor), from which the next query continues. No query scans the whole
  table for one page, and a walk that follows cursors always ends.
- With a fresh tail (ingest/store/tail.py: messages in Kafka not yet in Delta) every page is
  the exact merge of the snapshot and the tail; a new snapshot is swapped in together with
  dropping the tail messages it holds, under the tail's lock.

The page semantics are core/store_page.py's (`finish_page`, `check_query`).
"""
from __future__ import annotations

import heapq
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from numbers import Integral
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.config import Config
from core.settings import ObjectStoreSettings, is_s3
from core.store_page import (
    MAX_DIGEST,
    MIN_DIGEST,
    PAGE_COLUMNS,
    Index,
    Page,
    StoredMessage,
    StoreLimits,
    StoreQuery,
    edge_index,
    finish_page,
    key_of,
    page_size_of,
)
from core.tables import MESSAGES_COLUMNS, MESSAGES_PARTITION_BY, MESSAGES_STATS_COLUMNS
from core.threads import SupervisedThread

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from ingest.store.tail import Tail

log = logging.getLogger("ingest.store.reader")

# Delta truncates string statistics to this many characters (a truncated max is then only a
# prefix bound, compared conservatively).
DELTA_STRING_PREFIX = 32


@dataclass(frozen=True)
class ReaderSettings:
    table_path: str
    limits: StoreLimits = StoreLimits()
    max_scan_rows: int = 1_000_000
    refresh_interval_s: float = 1.0
    cache_mb: int = 512
    # follow() reads the newest row groups into the cache, up to this much (MiB).
    preload_mb: int = 0
    # How to reach an s3a:// table ([warehouse] s3_*); unused for a local one.
    object_store: ObjectStoreSettings = ObjectStoreSettings()

    @classmethod
    def from_config(cls, config: Config) -> ReaderSettings:
        s = config["store_service"]
        return cls(config.table_path("messages"), StoreLimits.from_config(config), s["max_scan_rows"],
                   s["refresh_interval_s"], s["cache_mb"], s["preload_mb"], ObjectStoreSettings.from_config(config))

    def storage_options(self) -> dict[str, str] | None:
        """delta-rs's storage options of the table (None: a local table)."""
        return self.object_store.storage_options() if is_s3(self.table_path) else None


ParquetOpener = Callable[[str], pq.ParquetFile]


class ParquetFiles:
    """Opens a table's Parquet files where the table is: the local file system, or S3 through
    Arrow's S3 file system with the warehouse's endpoint and credentials (a file's path is then
    its full URI, `s3a://bucket/key`). Keeps each file's footer (and on S3 its open handle, which
    holds no connection) until `retain` drops it: data files are immutable, so a row group read
    is then one ranged read. On S3 that is one GET instead of three (the HEAD of opening, the
    footer, the data); measured on SeaweedFS, a 4 MiB row group read went from 16.8 to 13.3 ms,
    docs/benchmarks.md "store on S3 vs local disk"."""

    def __init__(self, location: str, store: ObjectStoreSettings | None = None) -> None:
        self._s3 = (store or ObjectStoreSettings()).arrow_filesystem() if is_s3(location) else None
        self._kept: dict[str, tuple[Any, pq.FileMetaData]] = {}  # path -> (source, footer)
        self._lock = threading.Lock()

    def __call__(self, path: str) -> pq.ParquetFile:
        kept = self._kept.get(path)
        if kept is not None:
            return pq.ParquetFile(kept[0], metadata=kept[1])
        source: Any = path if self._s3 is None else self._s3.open_input_file(path.split("://", 1)[1])
        pf = pq.ParquetFile(source)
        with self._lock:
            self._kept[path] = (source, pf.metadata)
        return pf

    def __len__(self) -> int:
        return len(self._kept)

    def retain(self, live: set[str] | frozenset[str]) -> None:
        """Forget the files not in `live` (gone from the table)."""
        with self._lock:
            for path in [p for p in self._kept if p not in live]:
                del self._kept[path]


@dataclass
class _Stats:
    """Min/max of a unit (None: unknown, the unit may hold anything)."""
    min_rt: float = -math.inf
    max_rt: float = math.inf
    pubsub: tuple[str | None, str | None] = (None, None)
    content: tuple[str | None, str | None] = (None, None)
    rows: int = 0
    # Sender timestamps (ns) of the rows that have one, and how many rows have none (None:
    # unknown). What a time window compares (StoredMessage.time_ns).
    min_ts: int | None = None
    max_ts: int | None = None
    ts_nulls: int | None = None


@dataclass
class _File:
    path: str
    stats: _Stats
    row_groups: list[tuple[int, _Stats]] | None = None  # from the footer, on first use


@dataclass
class Snapshot:
    version: int
    files: list[_File] = field(default_factory=list)
    paths: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.paths = frozenset(f.path for f in self.files)


def _in_range(value: str, lo: str | None, hi: str | None, truncated_max: bool) -> bool:
    if lo is not None and value < lo:
        return False
    if hi is not None and value > hi:
        if not truncated_max or len(hi) < DELTA_STRING_PREFIX:
            return False
        n = DELTA_STRING_PREFIX - 1
        return value[:n] <= hi[:n]
    return True


def _may_match(st: _Stats, query: StoreQuery, truncated: bool) -> bool:
    c = query.cursor
    if c is not None:
        if query.forward and st.max_rt < c.received_time:
            return False
        if not query.forward and st.min_rt > c.received_time:
            return False
    if query.pubsub_topic and not _in_range(query.pubsub_topic, *st.pubsub, truncated):
        return False
    if query.content_topics and not any(_in_range(t, *st.content, truncated) for t in query.content_topics):
        return False
    if query.time_start is not None or query.time_end is not None:
        return _may_be_in_window(st, query.time_start, query.time_end)
    return True


def _may_be_in_window(st: _Stats, start: int | None, end: int | None) -> bool:
    """Whether a unit may hold a row whose time (sender timestamp, or receive time without
    one) lies in [start, end]: its timestamp range meets the window, or it may hold rows without
    a timestamp (null or 0) and its receive-time range meets the window."""
    lo = -math.inf if start is None else start
    hi = math.inf if end is None else end
    if st.min_ts is None or st.max_ts is None:
        if st.ts_nulls is None or st.ts_nulls < st.rows or st.rows == 0:
            return True  # no statistics: anything
    elif st.min_ts <= hi and st.max_ts >= lo:
        return True
    # Here either every row is null (ts_nulls == rows > 0) or min and max are known.
    untimed = (st.ts_nulls is None or st.ts_nulls > 0
               or (st.min_ts is not None and st.max_ts is not None and st.min_ts <= 0 <= st.max_ts))
    # int(received_time * 1e9) of a row may round a little either way: 1 µs of slack.
    return untimed and st.min_rt * 1e9 - 1e3 <= hi and st.max_rt * 1e9 + 1e3 >= lo


def _frontier_cursor(frontier: float, forward: bool) -> Index:
    """The position just before (forward) / after (backward) everything at `frontier` (a
    position: no message hash)."""
    if forward:
        return Index(math.nextafter(frontier, -math.inf), MAX_DIGEST)
    return Index(math.nextafter(frontier, math.inf), MIN_DIGEST)


def _advances(frontier: float, query: StoreQuery) -> bool:
    """Whether a partial page ending at `frontier` moves the walk: its cursor lies strictly
    beyond the query's cursor (and is a finite position)."""
    if not math.isfinite(frontier):
        return False
    c = query.cursor
    if c is None:
        return True
    fwd = query.forward
    new = _frontier_cursor(frontier, fwd).bound(fwd)
    here = Index(float(c.received_time), bytes(c.digest), c.message_hash).bound(fwd)
    return new > here if fwd else new < here


def _stat(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _ns_stats(lo: Any, hi: Any) -> tuple[int | None, int | None]:
    """A unit's min and max sender timestamps as integer nanoseconds. Delta's and Parquet's
    statistics of the long column are integers, kept exact: a window bound equal to a message's
    timestamp must compare equal to it. Should a statistic come as a float (a float64 holds
    today's nanoseconds only to 256 ns), the range is widened by its rounding, so that no unit
    holding a message at a window's bound is skipped."""
    def exact(v: Any, widen: int) -> int | None:
        v = _stat(v)
        if v is None or isinstance(v, bool):
            return None
        if isinstance(v, Integral):
            return int(v)
        f = float(v)
        if not math.isfinite(f):
            return None
        return int(f) + widen * (int(math.ulp(f)) + 1)
    return exact(lo, -1), exact(hi, 1)


def _footer_stats(md: pq.FileMetaData) -> list[tuple[int, _Stats]]:
    names = {md.schema.column(i).name: i for i in range(md.num_columns)}
    out = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        st = _Stats(rows=rg.num_rows)

        def stats(col: str, rg: Any = rg) -> Any:  # this row group's (bound: a closure would see the last)
            i = names.get(col)
            return rg.column(i).statistics if i is not None else None

        def minmax(col: str) -> tuple[Any, Any]:
            s = stats(col)
            if s is None or not s.has_min_max:
                return (None, None)
            return (_stat(s.min), _stat(s.max))

        lo, hi = minmax("received_time")
        st.min_rt = -math.inf if lo is None else float(lo)
        st.max_rt = math.inf if hi is None else float(hi)
        st.pubsub = minmax("pubsub_topic")
        st.content = minmax("content_topic")
        st.min_ts, st.max_ts = _ns_stats(*minmax("timestamp"))
        ts = stats("timestamp")
        st.ts_nulls = ts.null_count if ts is not None and ts.has_null_count else None
        out.append((g, st))
    return out


class _Group:
    """A decoded row group and its filter columns as NumPy arrays (topics as dictionary codes)."""

    __slots__ = ("table", "rt", "ps_codes", "ps_index", "ct_codes", "ct_index", "nbytes", "_ts")

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        col = table["received_time"]
        # np.asarray per chunk (zero copy); ChunkedArray.to_numpy is ~10^4 times slower here.
        self.rt = (np.asarray(col.chunk(0)) if col.num_chunks == 1
                   else np.concatenate([np.asarray(c) for c in col.chunks]))
        self.ps_codes, self.ps_index = _codes(table["pubsub_topic"])
        self.ct_codes, self.ct_index = _codes(table["content_topic"])
        self.nbytes = table.nbytes + self.rt.nbytes + self.ps_codes.nbytes + self.ct_codes.nbytes
        self._ts: np.ndarray | None = None

    def time_ns(self) -> np.ndarray:
        """Per row, what a time window compares: the sender timestamp (ns), or the receive time
        when there is none (StoredMessage.time_ns)."""
        if self._ts is None:
            rt_ns = (self.rt * 1e9).astype(np.int64)
            if "timestamp" in self.table.column_names:
                ts = pc.fill_null(self.table["timestamp"].combine_chunks(), 0).to_numpy(zero_copy_only=False)
                self._ts = np.where(ts == 0, rt_ns, ts.astype(np.int64))
            else:
                self._ts = rt_ns
        return self._ts


class _HashIndex:
    """message hash -> (data file, row group, row) over every indexed data file: the first 8
    bytes of each hash, sorted, with its file number and location (20 bytes a row). A file's
    hashes come in as a sorted segment of their own, and segments of like size are merged
    (one stable sort of two sorted runs), so there are O(log rows) segments and a lookup costs a
    binary search in each, whatever the number of files (a table of 100,000 micro-batch files
    is a lookup in ~20 segments, not 100,000 searches). Files that leave the table (compaction,
    vacuum) are filtered out of the segments. A prefix hit is confirmed on its row by the caller.
    Indexing takes `_index_lock` (one file at a time, so a file is read and indexed once even
    when the follow thread and query threads index a snapshot together); the segment swap takes
    `_lock`; readers take the segment list as it is (replaced, never changed). A file stays in
    the segments from its indexing until it leaves the table: a lookup never misses a row of an
    indexed file (re-indexing a file once removed it and added it back, and a lookup in between
    missed its rows: a v3 cursor answered "not a stored message")."""

    def __init__(self, open_parquet: ParquetOpener = pq.ParquetFile) -> None:
        self._open = open_parquet
        self._numbers: dict[str, int] = {}  # path -> file number
        self._paths: dict[int, str] = {}
        self._segments: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (prefixes, file numbers, locations)
        self._next = 0
        self._lock = threading.Lock()
        self._index_lock = threading.Lock()

    def __contains__(self, path: str) -> bool:
        return path in self._numbers

    def add(self, path: str) -> bool:
        """Index `path` unless it is already; True when it was indexed now."""
        with self._index_lock:
            if path in self._numbers:
                return False
            keys, locs, _ = self._read(path)
            self._insert(path, keys, locs)
            return True

    def add_with_hashes(self, path: str) -> list[bytes]:
        """Index `path` unless it is already, and return its message hashes."""
        with self._index_lock:
            keys, locs, every = self._read(path, with_hashes=True)
            if path not in self._numbers:
                self._insert(path, keys, locs)
            return every

    def _read(self, path: str, with_hashes: bool = False) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
        """(prefixes, locations, hashes: empty unless with_hashes) of a data file's rows (its
        message_hash column). Vectorized: a file compaction wrote (a million rows) is indexed
        in a fraction of the GIL time one Python object a row took (~0.3 s a million), which
        the store's queries, on threads of the same process, waited for."""
        pf = self._open(path)
        every: list[bytes] = []
        parts_k, parts_l = [], []
        if "message_hash" in pf.schema_arrow.names:
            for g in range(pf.metadata.num_row_groups):
                col = pf.read_row_group(g, columns=["message_hash"])["message_hash"].combine_chunks()
                fast = _column_hashes(col, with_hashes)
                if fast is not None:
                    prefixes, hashes = fast
                    every.extend(hashes)
                else:  # nulls or short values: one Python object a row
                    values = col.to_pylist()
                    if with_hashes:
                        every.extend(h for h in values if h)
                    prefixes = _prefixes(values)
                parts_k.append(prefixes)
                parts_l.append((np.uint64(g) << np.uint64(32)) | np.arange(len(prefixes), dtype=np.uint64))
        keys = np.concatenate(parts_k) if parts_k else np.zeros(0, dtype=np.uint64)
        locs = np.concatenate(parts_l) if parts_l else np.zeros(0, dtype=np.uint64)
        return keys, locs, every

    def _insert(self, path: str, keys: np.ndarray, locs: np.ndarray) -> None:
        order = np.argsort(keys, kind="stable")
        with self._lock:
            number = self._next
            self._next += 1
            segments = [*self._segments, (keys[order], np.full(len(keys), number, dtype=np.uint32), locs[order])]
            while len(segments) >= 2 and len(segments[-2][0]) <= 2 * len(segments[-1][0]):
                a, b = segments[-2], segments[-1]
                merged = np.argsort(np.concatenate((a[0], b[0])), kind="stable")
                seg_keys, seg_files, seg_locs = (np.concatenate((x, y))[merged] for x, y in zip(a, b, strict=True))
                segments[-2:] = [(seg_keys, seg_files, seg_locs)]
            # The path's number is known to readers before its segment is, never after.
            self._numbers[path], self._paths[number] = number, path
            self._segments = segments

    def candidates_many(self, prefixes: np.ndarray) -> list[tuple[int, str, int, int]]:
        """(i, path, row group, row) for every indexed row whose prefix equals prefixes[i]."""
        out: list[tuple[int, str, int, int]] = []
        if not len(prefixes):
            return out
        paths = self._paths
        for keys, numbers, locs in self._segments:
            lo = np.searchsorted(keys, prefixes, side="left")
            hi = np.searchsorted(keys, prefixes, side="right")
            for i in np.flatnonzero(hi > lo).tolist():
                for j in range(lo[i], hi[i]):
                    path, v = paths.get(int(numbers[j])), int(locs[j])
                    if path is not None:
                        out.append((i, path, v >> 32, v & 0xFFFFFFFF))
        return out

    def candidates(self, message_hash: bytes) -> list[tuple[str, int, int]]:
        """(path, row group, row) for every indexed row whose prefix is this hash's."""
        prefix = np.array([int.from_bytes(message_hash[:8], "big")], dtype=np.uint64)
        return [(path, group, row) for _, path, group, row in self.candidates_many(prefix)]

    def retain(self, live: set[str] | frozenset[str]) -> None:
        """Forget the files not in `live`."""
        with self._index_lock, self._lock:
            gone = {n for path, n in self._numbers.items() if path not in live}
            if gone:
                self._remove_locked(gone)

    def _remove_locked(self, numbers: set[int]) -> None:
        dead = np.fromiter(numbers, dtype=np.uint32)
        kept = []
        for seg in self._segments:
            keep = ~np.isin(seg[1], dead)
            if keep.all():
                kept.append(seg)
            elif keep.any():
                seg_keys, seg_files, seg_locs = (x[keep] for x in seg)
                kept.append((seg_keys, seg_files, seg_locs))
        self._segments = kept
        for n in numbers:
            del self._numbers[self._paths.pop(n)]

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + n.nbytes + v.nbytes for k, n, v in self._segments)


def _column_hashes(col: pa.Array, with_hashes: bool) -> tuple[np.ndarray, list[bytes]] | None:
    """(prefixes as `_prefixes` gives them, the values as bytes when with_hashes, else []) of a
    binary column read from its Arrow buffers; None when a value is null or shorter than 8 bytes
    (`_prefixes` then)."""
    large = pa.types.is_large_binary(col.type)
    if col.null_count or not (large or pa.types.is_binary(col.type)):
        return None
    n = len(col)
    if n == 0:
        return np.zeros(0, dtype=np.uint64), []
    _, offsets_buf, data_buf = col.buffers()
    kind = np.int64 if large else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=kind, count=n + 1, offset=col.offset * np.dtype(kind).itemsize)
    starts = offsets[:-1].astype(np.int64)
    if (np.diff(offsets) < 8).any():
        return None
    data = np.frombuffer(data_buf, dtype=np.uint8)
    prefixes = data[starts[:, None] + np.arange(8)].view(">u8").reshape(n).astype(np.uint64)
    if not with_hashes:
        return prefixes, []
    raw = data_buf.to_pybytes()
    return prefixes, [raw[a:b] for a, b in zip(starts.tolist(), offsets[1:].tolist(), strict=True)]


def _prefixes(hashes: Sequence[bytes | None]) -> np.ndarray:
    """The first 8 bytes of each hash as a big-endian unsigned integer (0 for a missing one)."""
    if all(h is not None and len(h) >= 8 for h in hashes):
        return np.frombuffer(b"".join(h[:8] for h in hashes if h is not None), dtype=">u8").astype(np.uint64)
    return np.array([int.from_bytes(h[:8], "big") if h else 0 for h in hashes], dtype=np.uint64)


def _codes(col: pa.ChunkedArray) -> tuple[np.ndarray, dict[str, int]]:
    enc = pc.dictionary_encode(col.combine_chunks())
    return enc.indices.to_numpy(zero_copy_only=False), {v: i for i, v in enumerate(enc.dictionary.to_pylist())}


def _arrow_set_up() -> None:
    np.asarray(pa.array([0.0]))


class _LRU:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.items: OrderedDict[tuple[str, int], _Group] = OrderedDict()  # by (path, row group)
        self.lock = threading.Lock()

    def get(self, key: tuple[str, int]) -> _Group | None:
        with self.lock:
            t = self.items.get(key)
            if t is not None:
                self.items.move_to_end(key)
            return t

    def put(self, key: tuple[str, int], table: _Group) -> None:
        with self.lock:
            if key in self.items:
                return
            self.items[key] = table
            self.bytes += table.nbytes
            while self.bytes > self.max_bytes and len(self.items) > 1:
                _, old = self.items.popitem(last=False)
                self.bytes -= old.nbytes


class NotCached(Exception):
    """query(cached_only=True) would have to read from storage."""


class StoreReader:
    """Pages of the Delta `messages` table, thread-safe.

        reader = StoreReader(ReaderSettings.from_config(config))
        reader.refresh()                 # or reader.follow() in the background
        page = reader.query(StoreQuery(content_topics=("/app/1/chat/proto",)))
    """

    def __init__(self, settings: ReaderSettings, tail: Tail | None = None) -> None:
        self.settings = settings
        # Messages in Kafka not yet in Delta (ingest/store/tail.py), merged into every page.
        self.tail = tail
        self.snapshot: Snapshot | None = None
        # Set once every data file of the table as first seen has its hashes indexed (follow()).
        self.hashes_ready = threading.Event()
        self._table: DeltaTable | None = None
        self._cache = _LRU(settings.cache_mb * 1024 * 1024)
        self._footers: dict[str, list[tuple[int, _Stats]]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: SupervisedThread | None = None  # follow()
        self.row_groups_read = 0
        self._open = ParquetFiles(settings.table_path, settings.object_store)
        self._hashes = _HashIndex(self._open)
        self._indexed_version: int | None = None  # every data file of this snapshot version is indexed
        # Arrow's one-time NumPy/pandas set-up (0.5-1 s), not on a query and not in the way of the
        # node's start (/health): on a thread of its own; a query that comes first waits for it.
        threading.Thread(target=_arrow_set_up, name="store-reader-arrow-set-up", daemon=True).start()

    # --- the snapshot ---------------------------------------------------------------------

    def refresh(self) -> int | None:
        """Load the latest table version (no-op when unchanged); returns it (None: no table)."""
        from deltalake import DeltaTable

        with self._lock:
            # Read before the table: every batch committed by then is in the version read next.
            committed = self.tail.committed() if self.tail is not None else None
            try:
                if self._table is None:
                    options = self.settings.storage_options()
                    if not DeltaTable.is_deltatable(self.settings.table_path, options):
                        return None
                    self._table = DeltaTable(self.settings.table_path, storage_options=options)
                else:
                    try:
                        self._table.update_incremental()
                    except Exception as exc:  # noqa: BLE001 - retried below from the latest checkpoint
                        # delta-rs catches up from the latest checkpoint when the commits after
                        # this version are cleaned up (the log is kept an hour on the store
                        # tables); should an update fail anyway, load the table afresh.
                        log.info("reloading %s from its latest checkpoint (%s)", self.settings.table_path, exc)
                        self._table = DeltaTable(self.settings.table_path,
                                                 storage_options=self.settings.storage_options())
            except Exception as exc:  # noqa: BLE001 - keep serving the last snapshot
                log.warning("cannot refresh %s: %s", self.settings.table_path, exc)
                return self.snapshot.version if self.snapshot else None
            version = self._table.version()
            if self.snapshot is None or self.snapshot.version != version:
                new = self._build(self._table, version)
                if self.snapshot is not None:
                    self._warm(new)
                self._publish(new, committed)
                self._forget_removed(new)
                log.debug("store snapshot version %d: %d files", version, len(new.files))
            return version

    def _warm(self, new: Snapshot) -> None:
        """Before a new version is swapped in, while queries still read the last one (its files
        stay on storage for store.vacuum_retain_hours): read the footers of its new files, index
        their hashes (the tail's publish indexes them itself) and preload its newest row groups.
        After a compaction rewrote the table, queries would otherwise all read cold files at once,
        and the first hash lookup index a million rows on its query thread (issue 71: a query p99
        of seconds while `maintain` ran)."""
        assert self.snapshot is not None  # the first version is not warmed: start-up indexes and preloads it
        old = self.snapshot.paths
        for f in new.files:
            if self._stop.is_set():
                return
            if f.path not in old:
                self._row_groups(f)
                if self.tail is None or not self.hashes_ready.is_set():
                    self._hashes.add(f.path)
        self.preload(snapshot=new)

    def _publish(self, new: Snapshot, committed: dict[int, int] | None = None) -> None:
        """Swap in a new snapshot. With a tail: index the hashes of the new data files first,
        then hide those hashes in the tail and swap, in one brief hold of the tail's lock (a
        query, which takes the snapshot and its tail matches under that lock, sees each message
        once); the tail then forgets them a chunk at a time (`Tail.publish`)."""
        if self.tail is None:
            self.snapshot = new
            return
        durable: list[bytes] = []
        # Until the index of the table as first seen is built, the tail takes nothing in (its
        # follower waits for hashes_ready) and there is nothing to drop.
        if self.hashes_ready.is_set():
            old = {f.path for f in self.snapshot.files} if self.snapshot else set()
            for f in new.files:
                if f.path not in old:
                    durable.extend(self._hashes.add_with_hashes(f.path))

        def swap() -> None:
            self.snapshot = new

        gone = self.tail.publish(set(durable), swap, committed if self.hashes_ready.is_set() else None)
        if gone:
            log.debug("store tail: %d messages now in Delta version %d", gone, new.version)

    def _build(self, dt: DeltaTable, version: int) -> Snapshot:
        feats = dt.protocol().reader_features or []
        if "deletionVectors" in feats:
            log.warning("%s uses deletion vectors, which the online reader does not apply",
                        self.settings.table_path)
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        root = dt.table_uri
        if root.startswith("file://"):
            root = root[len("file://"):]
        files = []
        for a in actions:
            st = _Stats(rows=a.get("num_records") or 0)
            lo, hi = _stat(a.get("min.received_time")), _stat(a.get("max.received_time"))
            st.min_rt = -math.inf if lo is None else float(lo)
            st.max_rt = math.inf if hi is None else float(hi)
            st.pubsub = (a.get("min.pubsub_topic"), a.get("max.pubsub_topic"))
            st.content = (a.get("min.content_topic"), a.get("max.content_topic"))
            st.min_ts, st.max_ts = _ns_stats(a.get("min.timestamp"), a.get("max.timestamp"))
            st.ts_nulls = _stat(a.get("null_count.timestamp"))
            path = os.path.join(root, unquote(a["path"]))
            files.append(_File(path, st, None))
        # Footers already read (a path names immutable content) are reused.
        for f in files:
            f.row_groups = self._footers.get(f.path)
        return Snapshot(version, files)

    def _forget_removed(self, snap: Snapshot) -> None:
        """Once `snap` is swapped in: drop the footers, hash index entries and open files of the
        files it no longer has."""
        live = snap.paths
        for path in list(self._footers):
            if path not in live:
                del self._footers[path]
        self._hashes.retain(live)
        self._open.retain(live)

    def follow(self) -> None:
        """Refresh every refresh_interval_s in a daemon thread until close()."""
        if self._thread is not None:
            return

        def loop(stop: threading.Event) -> None:
            if self._thread is not None and self._thread.failures:  # started again after a failure
                self.refresh()
            if self.tail is not None:  # the tail waits for the index: index first
                self.index_hashes()
                self.hashes_ready.set()
            self.preload()
            self.index_hashes()
            self.hashes_ready.set()
            while not stop.wait(self.settings.refresh_interval_s):
                version = self.snapshot.version if self.snapshot else None
                # A later version was warmed before its swap (refresh); the table's first, when it
                # appears after start, was not.
                if self.refresh() != version and version is None:
                    self.preload()
                    self.index_hashes()

        self.refresh()
        # A failure (a file gone under the reader, a storage error) is counted and the loop started
        # again: a dead follower would serve one table version forever and let the tail grow.
        self._thread = SupervisedThread("store-reader-follow", loop)
        self._thread.start()

    def preload(self, mb: int | None = None, snapshot: Snapshot | None = None) -> int:
        """Read the newest row groups (by received_time) of `snapshot` (default: the current one)
        into the cache, up to `mb` MiB (default settings.preload_mb, at most the cache size);
        returns the groups read. Queries about recent history, the usual ones, then never wait
        for storage."""
        budget = min(self.settings.preload_mb if mb is None else mb, self.settings.cache_mb) * 1024 * 1024
        snap = self.snapshot if snapshot is None else snapshot
        if snap is None or budget <= 0:
            return 0
        groups: list[tuple[float, str, int]] = []
        for f in sorted(snap.files, key=lambda f: f.stats.max_rt, reverse=True):
            if self._stop.is_set():
                break
            groups.extend((st.max_rt, f.path, g) for g, st in self._row_groups(f))
            if len(groups) * 256 * 1024 > budget:  # enough candidates (groups of 256 KiB or more)
                break
        groups.sort(reverse=True)
        used = read = 0
        for _, path, g in groups:
            if used >= budget or self._stop.is_set():
                break
            before = self.row_groups_read
            used += self._read(path, g).nbytes
            read += self.row_groups_read - before
        if read:
            log.info("store reader: preloaded %d row groups (%.0f MiB)", read, used / 2**20)
        return read

    # --- message hashes (store v3 cursors and lookups) -------------------------------------

    def index_hashes(self) -> int:
        """Index the message hashes of every data file of the snapshot not yet indexed (reads
        only their message_hash column); returns the files indexed."""
        snap = self.snapshot
        done = 0
        for f in (snap.files if snap else []):
            if self._stop.is_set():
                break
            if self._hashes.add(f.path):
                done += 1
        return done

    def durable_among(self, hashes: list[bytes]) -> set[bytes]:
        """Those of `hashes` that the current snapshot holds (the hash index, each prefix hit
        confirmed on its row)."""
        snap = self.snapshot
        if snap is None or not hashes:
            return set()
        self._index_snapshot(snap)
        out: set[bytes] = set()
        for i, path, group, row in self._hashes.candidates_many(_prefixes(hashes)):
            if path not in snap.paths:  # indexed for a newer snapshot, not swapped in yet (or gone)
                continue
            g = self._read(path, group)
            if "message_hash" in g.table.column_names and g.table["message_hash"][row].as_py() == hashes[i]:
                out.add(hashes[i])
        return out

    def _index_snapshot(self, snap: Snapshot) -> None:
        """Index any data file of `snap` not indexed yet (once per snapshot version)."""
        if self._indexed_version == snap.version:
            return
        for f in snap.files:
            self._hashes.add(f.path)
        self._indexed_version = snap.version

    def locate(self, message_hash: bytes) -> StoredMessage | None:
        """The stored message with this hash (its store position and fields), from the tail or
        the hash index, or None when neither holds it."""
        if self.tail is not None:
            with self.tail.lock:
                m = self.tail.get_locked(message_hash)
            if m is not None:
                return m
        snap = self.snapshot
        if snap is None:
            self.refresh()
            snap = self.snapshot
            if snap is None:
                return None
        if len(message_hash) != 32:
            return None
        self._index_snapshot(snap)
        for path, group, row in self._hashes.candidates(message_hash):
            if path not in snap.paths:
                continue
            g = self._read(path, group)
            if "message_hash" in g.table.column_names and g.table["message_hash"][row].as_py() == message_hash:
                return StoredMessage.from_mapping(g.table.slice(row, 1).to_pylist()[0])
        return None

    @property
    def follower(self) -> SupervisedThread | None:
        """The follow() thread, when started (its failures, its problem())."""
        return self._thread

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.stop()
            self._thread.join(timeout=5)
            self._thread = None

    # --- queries --------------------------------------------------------------------------

    def query(self, query: StoreQuery, cached_only: bool = False) -> Page:
        """One page of a query that passed check_query (the store protocol's plan() and the
        CLI check it once, before asking). cached_only: raise NotCached instead of reading a
        footer or row group that is not in memory (the server answers such queries inline,
        others in a worker thread)."""
        snap = self.snapshot
        if snap is None:
            self.refresh()
            snap = self.snapshot
        if self.tail is None:
            return Page(forward=query.forward) if snap is None else self._walk(snap, query, cached_only)
        # One more than the page: finish_page gives a cursor only when a further message follows.
        n = page_size_of(query.page_size, self.settings.limits) + 1
        # The snapshot and the tail as of one moment. Inline (cached_only) callers do not wait
        # for the lock (a commit's drop or a chunk of arrivals may hold it): a worker thread will.
        if not self.tail.lock.acquire(blocking=not cached_only):
            raise NotCached("the tail is busy")
        try:
            snap = self.snapshot
            fresh = self.tail.nearest_locked(query, n)
        finally:
            self.tail.lock.release()
        if snap is None:
            return finish_page(fresh, query, self.settings.limits)
        # The walk starts from the tail's nearest: a page the tail fills (the newest page of a
        # busy topic) reads no Delta unit that lies beyond its n-th message.
        return self._walk(snap, query, cached_only, fresh)

    def _row_groups(self, f: _File, cached_only: bool = False) -> list[tuple[int, _Stats]]:
        if f.row_groups is None:
            rgs = self._footers.get(f.path)
            if rgs is None:
                if cached_only:
                    raise NotCached(f.path)
                rgs = _footer_stats(self._open(f.path).metadata)
                self._footers[f.path] = rgs
            f.row_groups = rgs
        return f.row_groups

    def _read(self, path: str, group: int, cached_only: bool = False) -> _Group:
        key = (path, group)
        g = self._cache.get(key)
        if g is None:
            if cached_only:
                raise NotCached(path)
            pf = self._open(path)
            have = set(pf.schema_arrow.names)
            g = _Group(pf.read_row_group(group, columns=[c for c in PAGE_COLUMNS if c in have]))
            self.row_groups_read += 1
            self._cache.put(key, g)
        return g

    def _matching(self, g: _Group, query: StoreQuery, n: int) -> list[StoredMessage]:
        """The (at most) n matching rows of the group nearest to the cursor."""
        mask = None
        if query.pubsub_topic:
            code = g.ps_index.get(query.pubsub_topic)
            if code is None:
                return []
            mask = g.ps_codes == code
        if query.content_topics:
            codes = [g.ct_index[c] for c in query.content_topics if c in g.ct_index]
            if not codes:
                return []
            m = g.ct_codes == codes[0] if len(codes) == 1 else np.isin(g.ct_codes, codes)
            mask = m if mask is None else mask & m
        if query.time_start is not None or query.time_end is not None:
            ts = g.time_ns()
            m = np.ones(len(ts), dtype=bool)
            if query.time_start is not None:
                m &= ts >= query.time_start
            if query.time_end is not None:
                m &= ts <= query.time_end
            mask = m if mask is None else mask & m
        c = query.cursor
        rt = g.rt
        if c is not None:
            t = c.received_time
            side = rt > t if query.forward else rt < t
            ties = np.flatnonzero(rt == t)
            if len(ties):
                # Rows at the cursor's receive time: on the queried side by (digest, hash), the
                # cursor's bound in the total order (store_page.Index.bound).
                _, digest, hash_ = c.bound(query.forward)
                take = pa.array(ties)
                digests = g.table["digest"].take(take).to_pylist()
                hashes = (g.table["message_hash"].take(take).to_pylist()
                          if "message_hash" in g.table.column_names else [None] * len(ties))
                ok = [i for i, d, h in zip(ties.tolist(), digests, hashes, strict=True)
                      if ((d, h or b"") > (digest, hash_) if query.forward else (d, h or b"") < (digest, hash_))]
                if ok:
                    side[ok] = True
            mask = side if mask is None else mask & side
        idx = np.flatnonzero(mask) if mask is not None else np.arange(len(rt))
        if len(idx) > n:
            # The n nearest by received_time, plus every row tied with the n-th (the exact
            # order of those by digest is settled below).
            times = rt[idx]
            if query.forward:
                kth = np.partition(times, n - 1)[n - 1]
                idx = idx[times <= kth]
            else:
                kth = np.partition(times, len(times) - n)[len(times) - n]
                idx = idx[times >= kth]
        if not len(idx):
            return []
        rows = [StoredMessage.from_mapping(r) for r in g.table.take(pa.array(idx)).to_pylist()]
        rows.sort(key=key_of, reverse=not query.forward)
        return rows[:n]

    def _walk(self, snap: Snapshot, query: StoreQuery, cached_only: bool = False,
              seed: Sequence[StoredMessage] = ()) -> Page:
        """The page of `query` from the snapshot's units and `seed`, matching messages from
        elsewhere (the tail's nearest: never in the snapshot), as one page in store order. The
        walk collects one message more than the page (`n`): whether a further one follows."""
        size = page_size_of(query.page_size, self.settings.limits)
        n = size + 1
        fwd = query.forward
        heap: list[tuple[float, int, _File, int, _Stats]] = []
        seq = 0

        def push(f: _File, group: int, st: _Stats) -> None:
            nonlocal seq
            if _may_match(st, query, truncated=group < 0):
                heapq.heappush(heap, (st.min_rt if fwd else -st.max_rt, seq, f, group, st))
                seq += 1

        for f in snap.files:
            push(f, -1, f.stats)
        found = sorted(seed, key=key_of, reverse=not fwd)[:n]
        scanned = 0
        partial = False
        frontier: float | None = None
        while heap:
            prio, _, f, group, st = heapq.heappop(heap)
            if len(found) >= n:
                edge = found[n - 1].received_time
                if (fwd and st.min_rt > edge) or (not fwd and st.max_rt < edge):
                    break
            if group < 0:
                for g, gst in self._row_groups(f, cached_only):
                    push(f, g, gst)
                continue
            if scanned >= self.settings.max_scan_rows:
                # Stop only where the next page makes progress: every unread unit starts at or
                # after the frontier, so the page may end there only if that position lies
                # beyond the cursor. Units straddling the cursor (files overlapping in time) are
                # read whatever the budget, else a walk would stand still (issue 12).
                edge_rt = st.min_rt if fwd else st.max_rt
                if _advances(edge_rt, query):
                    partial, frontier = True, edge_rt
                    break
            t = self._read(f.path, group, cached_only)
            scanned += len(t.rt)
            found.extend(self._matching(t, query, n))
            found.sort(key=key_of, reverse=not fwd)
            del found[n:]
        if not partial:
            return finish_page(found, query, self.settings.limits, scanned)
        # The budget ended the walk: keep what is certainly nearest (before the frontier), and
        # continue from the frontier next time.
        if frontier is None or not math.isfinite(frontier):
            return finish_page(found, query, self.settings.limits, scanned)
        cursor = _frontier_cursor(frontier, fwd)
        if fwd:
            found = [m for m in found if m.received_time < frontier]
        else:
            found = [m for m in found if m.received_time > frontier]
        page = finish_page(found, query, self.settings.limits, scanned)
        if len(page.messages) < size:
            page.cursor, page.partial = cursor, True
        elif page.cursor is None:  # a full page: more may lie beyond the frontier
            page.cursor = edge_index(page)
        log.info("store query hit the scan budget (%d rows): partial page of %d", scanned, len(page.messages))
        return page


_ARROW_TYPES = {"double": pa.float64(), "binary": pa.binary(), "string": pa.string(), "long": pa.int64(),
                "int": pa.int32(), "timestamp": pa.timestamp("us", tz="UTC")}

# The contract of core/tables.py as an Arrow schema, to write test and benchmark tables straight
# into Delta with `deltalake` (no Spark).
MESSAGES_ARROW_SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[kind], nullable)
                                   for name, kind, nullable in MESSAGES_COLUMNS])


def write_messages(path: str, rows: pa.Table, mode: Literal["error", "append", "ignore", "overwrite"] = "append",
                   max_row_group_size: int = 16384, storage_options: dict[str, str] | None = None) -> None:
    """Append Arrow rows (MESSAGES_ARROW_SCHEMA) to the Delta messages table at `path`, with
    the store job's partitioning and statistics columns (tests, benchmarks); `storage_options`
    for an s3a:// table (`ObjectStoreSettings.storage_options`)."""
    from deltalake import WriterProperties, write_deltalake

    write_deltalake(path, rows.cast(MESSAGES_ARROW_SCHEMA), mode=mode, partition_by=list(MESSAGES_PARTITION_BY),
                    configuration={"delta.dataSkippingStatsColumns": MESSAGES_STATS_COLUMNS},
                    writer_properties=WriterProperties(max_row_group_size=max_row_group_size),
                    storage_options=storage_options)
