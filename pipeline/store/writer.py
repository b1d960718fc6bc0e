"""One micro-batch of the store job: decode, validate, de-duplicate, write.

Exactly once, across crashes and restarts at any point, without relying on the checkpoint alone:
- Kafka offsets live in the query's checkpoint; a batch that did not finish is re-run whole
  with the same offsets, so the same rows.
- Every write is keyed by content, so re-running a batch (or re-reading the topic under a reset
  checkpoint) adds nothing that is already there:
  - `messages`: de-duplication by message hash, within the batch (earliest receive, then lowest
    Kafka coordinates, wins) and against the table. A record re-produced to Kafka at any later
    time carries its original receive time, so it is always caught; copies of a timestamped
    message from different bridges are received within `limits.max_clock_skew_s` of its
    timestamp (else refused), so within `store.dedup_window_s` of each other; copies of a
    message without timestamp are checked against every stored one, however old: the untimed
    index (`untimed_hashes`, the hashes alone; appended after the messages commit with the
    batch's untimed hashes it lacks, so a re-run batch completes it).
    The decision is made on the driver (pipeline/store/recent.py) from the batch's narrow
    columns (hash, receive time, Kafka coordinates; one Spark job that also fills the cache).
    The table is checked in memory for receive times the query's `RecentHashes` cover (loaded
    from Delta at the query's first batch, then kept with what each batch stores), and read
    (receive times within the window of the batch's minutes, file skipping keeps it to their
    files) only for what lies below them: replays, records re-produced long after. The payload
    rows go to Delta in one write, one commit per batch (no join at all when every row is
    stored; else a filter on the Kafka offsets of the fewer side, one binary literal holding the set).
  - `quarantine`: anti-join on the Kafka coordinates (topic, partition, offset), reading only
    the batch's own offset ranges per partition (file statistics skip the rest of the table);
    skipped when every refused offset of the batch lies above what the table may hold
    (`QuarantineMarks`: the table's maxima per partition, read once per query). It runs on its
    own thread, beside the messages de-duplication and write (two tables, two commits whose
    driver-side work overlaps); the batch ends when both have.
  Delta's txnAppId/txnVersion options would also make re-runs idempotent, but measured here
  they triple the cost of every commit (docs/store-layout.md), and they would wrongly skip the
  batches of a reset checkpoint whose batch ids restart at 0.
- `job_metrics`: the batch's figures (`figures(stats)`) go to the job's metrics listener
  (pipeline/spark/metrics.py), which merges them with the query's progress once the batch has
  committed and appends the row to Delta `job_metrics` (at most once per batch).
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import InheritableThread
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.spark.metrics import BatchFigures
from pipeline.spark.records import decode_ingest_records
from pipeline.spark.session import register_java_function
from pipeline.store.messages_append import MessagesAppender
from pipeline.store.recent import BUCKET_S, HASH_DTYPE, BatchDecision, RecentHashes, decide
from pipeline.store.settings import StoreJobSettings
from pipeline.store.tables import MESSAGES_SCHEMA, QUARANTINE_SCHEMA, UNTIMED_INDEX, UNTIMED_SCHEMA
from pipeline.store.tables import untimed as untimed_column
from pipeline.store.validation import Limits, with_rejection_reason

log = logging.getLogger("waku.store")

STORED_COLUMNS = [f.name for f in MESSAGES_SCHEMA.fields]
QUARANTINE_COLUMNS = [f.name for f in QUARANTINE_SCHEMA.fields]


@dataclass
class BatchStats:
    input_rows: int = 0
    valid_rows: int = 0
    ephemeral_rows: int = 0
    quarantined_rows: int = 0
    stored_rows: int = 0
    messages_writer: str = ""  # who appended the batch's rows to `messages`: "delta-rs" or "spark"
    rule_failures: dict[str, int] | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.phase_seconds[name] = round(time.monotonic() - began, 3)

    @property
    def duplicate_rows(self) -> int:
        return self.valid_rows - self.stored_rows


def received_time_ranges(buckets: list[int], window_s: float) -> list[tuple[float, float]]:
    """Merged [lo, hi] receive-time ranges covering each minute bucket widened by the window."""
    ranges: list[tuple[float, float]] = []
    for b in sorted(buckets):
        lo, hi = b * BUCKET_S - window_s, (b + 1) * BUCKET_S + window_s
        if ranges and lo <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], hi))
        else:
            ranges.append((lo, hi))
    return ranges


def _in_ranges(col: Column, ranges: list[tuple[float, float]]) -> Column:
    cond = F.lit(False)
    for lo, hi in ranges:
        cond = cond | ((col >= F.lit(lo)) & (col <= F.lit(hi)))
    return cond


def _received_date(col: Column) -> Column:
    return F.date_format(F.timestamp_micros((col * F.lit(1e6)).cast("bigint")), "yyyy-MM-dd")


def _wall_clock() -> Column:
    """The time a row is written, read per row (`System.currentTimeMillis` through `reflect`,
    which Spark evaluates without generating code for it). `current_timestamp()` is the query's
    time as a literal in the stage's generated code: a new class to compile every batch."""
    return F.timestamp_millis(F.reflect(F.lit("java.lang.System"), F.lit("currentTimeMillis")).cast("bigint"))


def coordinate_ranges(col_partition: Column, col_offset: Column,
                      ranges: dict[int, tuple[int, int]]) -> Column:
    """(partition, offset) within the batch's [min, max] offsets of each partition: lets Delta
    skip every file of a table keyed by Kafka coordinates that the batch cannot be in."""
    cond = F.lit(False)
    for partition, (lo, hi) in sorted(ranges.items()):
        cond = cond | ((col_partition == F.lit(partition)) & col_offset.between(F.lit(lo), F.lit(hi)))
    return cond


COORDINATE_SET_FN = "waku_in_coordinates"
COORDINATE_SET_CLASS = "waku.pipeline.CoordinateSet"


def pack_coordinates(coords: set[tuple[int, int]]) -> bytes:
    """Kafka (partition, offset) pairs as jvm/.../CoordinateSet.java reads them: 12 bytes a pair,
    a big-endian int32 partition then a big-endian int64 offset, in no order (the UDF sorts)."""
    pairs = np.array(list(coords), dtype=np.int64).reshape(-1, 2)
    packed = np.empty(len(pairs), dtype=[("partition", ">i4"), ("offset", ">i8")])
    packed["partition"], packed["offset"] = pairs[:, 0], pairs[:, 1]
    return packed.tobytes()


def in_coordinates(spark, partition: Column, offset: Column, coords: set[tuple[int, int]]) -> Column:
    """True for the rows whose (`partition`, `offset`) is one of `coords`: the set goes to the JVM
    as one binary literal (CoordinateSet.java). As an IN list, a literal per offset, the ~12,500
    copies of a 250,000-record batch took ~1 s of the driver's CPU to parse, analyse and plan
    (and through py4j one literal costs ~1 ms each)."""
    fn = register_java_function(spark, COORDINATE_SET_FN, COORDINATE_SET_CLASS, T.BooleanType())
    return F.call_function(fn, partition, offset, F.lit(bytearray(pack_coordinates(coords))))


class QuarantineMarks:
    """Per Kafka partition of the job's topic, an offset at or above every record `quarantine`
    may hold: loaded once from the table (one Spark job at the query's first refused record),
    raised before each quarantine write. A batch whose refused records all lie above the marks
    cannot be in the table (a re-run batch or a reset checkpoint re-reads offsets at or below
    them), so it skips the anti-join; any other batch runs it. Retention deleting old rows only
    makes the marks conservative."""

    def __init__(self, table_path: str, topic: str) -> None:
        self.table_path, self.topic = table_path, topic
        self.marks: dict[int, int] | None = None

    def load(self, spark) -> None:
        if self.marks is None:
            rows = (spark.read.format("delta").load(self.table_path)
                    .where(F.col("kafka_topic") == F.lit(self.topic))
                    .groupBy("kafka_partition").agg(F.max("kafka_offset").alias("hi")).collect())
            self.marks = {r.kafka_partition: r.hi for r in rows if r.kafka_partition is not None}

    def all_above(self, ranges: dict[int, tuple[int, int]]) -> bool:
        assert self.marks is not None
        return all(lo > self.marks.get(p, -1) for p, (lo, _) in ranges.items())

    def raise_to(self, ranges: dict[int, tuple[int, int]]) -> None:
        assert self.marks is not None
        for p, (_, hi) in ranges.items():
            self.marks[p] = max(hi, self.marks.get(p, -1))


class _Background:
    """A function run on a Spark-aware thread (it inherits the batch's local properties);
    `join` waits for it and raises what it raised."""

    def __init__(self, fn) -> None:
        self.error: BaseException | None = None

        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - raised again by join
                self.error = exc

        self.thread = InheritableThread(target=run, name="store-quarantine-write", daemon=True)
        self.thread.start()

    def join(self, quiet: bool = False) -> None:
        self.thread.join()
        if self.error is not None and not quiet:
            raise self.error


def _existing_hashes(spark, decision: BatchDecision, valid: DataFrame, settings: StoreJobSettings,
                     recent: RecentHashes | None, stats: BatchStats) -> tuple[set[bytes], set[bytes]]:
    """The batch's hashes already stored, and those of them in the untimed index. Each hash once
    across the whole table: a copy of a timestamped message is received within max_clock_skew_s
    of its timestamp (else refused), so within the window of the first copy; a message without
    timestamp can come again any time, so it is checked against the untimed index (every
    untimed hash stored). Receive times the recent hashes cover are checked in memory; the rest
    (a replay, re-produced records) reads `messages` within the window of the batch's minutes."""
    tables = settings.warehouse
    ranges = received_time_ranges(sorted(decision.buckets), settings.dedup_window_s)
    if recent is not None and recent.enabled:
        if not recent.loaded:
            with stats.phase("load_recent"):
                floor = recent.start_floor(max(time.time(), decision.max_received))
                held = (spark.read.format("delta").load(tables.table_path("messages"))
                        .where(F.col("received_time") >= F.lit(floor))
                        .select("message_hash", "received_time").toArrow())
                recent.load_arrays(floor, _hash_column(held.column(0)),
                                   held.column(1).to_numpy().astype(float, copy=False))
        existing = recent.contains_many(list(decision.first))
        held_from = recent.floor
        assert held_from is not None  # loaded above
        ranges = [(lo, min(hi, held_from)) for lo, hi in ranges if lo < held_from]
    else:
        existing = set()
    hashes = valid.select("message_hash")
    if ranges:
        existing |= _lookup(spark.read.format("delta").load(tables.table_path("messages"))
                            .where(_in_ranges(F.col("received_time"), ranges)), hashes)
    indexed: set[bytes] = set()
    if decision.untimed:
        indexed = _lookup(spark.read.format("delta").load(tables.table_path(UNTIMED_INDEX)),
                          hashes.where(untimed_column(F.col("timestamp"))))
        existing |= indexed
    return existing, indexed


def _hash_column(col: pa.ChunkedArray) -> np.ndarray:
    """An Arrow column of 32-byte message hashes as a NumPy S32 array, without a Python object
    per hash (the recent hashes' load reads millions)."""
    arr = col.combine_chunks().cast(pa.binary()) if col.num_chunks else pa.array([], pa.binary())
    if not len(arr):
        return np.empty(0, dtype=HASH_DTYPE)
    if pc.any(pc.not_equal(pc.binary_length(arr), 32)).as_py() or arr.null_count:
        return np.array(arr.to_pylist(), dtype=HASH_DTYPE)  # not the table's contract: the slow way
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    return data.view(HASH_DTYPE).copy()


def _lookup(table: DataFrame, hashes: DataFrame) -> set[bytes]:
    """The hashes of `hashes` (the batch's, cached) that `table` holds."""
    rows = table.select("message_hash").join(hashes, "message_hash", "left_semi").distinct().collect()
    return {bytes(r.message_hash) for r in rows}


def check_records(kafka_rows: DataFrame, limits: Limits) -> DataFrame:
    """Kafka rows of waku.messages -> one row per record, decoded (pipeline/spark/records.py),
    with `reason`: the first validation rule it breaks, or null. The raw bytes are kept only for
    refused rows (quarantine); valid rows carry their decoded form. The store job applies this
    to its streaming source, so the plan is built once per query, not once per micro-batch (it
    cost ~0.3 s of every batch). The rules' `now` is each record's Kafka timestamp (a column:
    no per-batch literal, so the stage's generated code is compiled once per query)."""
    checked = with_rejection_reason(decode_ingest_records(kafka_rows), limits)
    return checked.withColumn("raw_value", F.when(F.col("reason").isNotNull(), F.col("raw_value")))


def write_batch(batch: DataFrame, batch_id: int, settings: StoreJobSettings,
                quarantine_marks: QuarantineMarks | None = None,
                recent: RecentHashes | None = None, appender: MessagesAppender | None = None) -> BatchStats:
    """Process one micro-batch of waku.messages Kafka rows; returns what happened to its rows."""
    return write_checked_batch(check_records(batch, settings.limits), batch_id, settings,
                               quarantine_marks, recent, appender)


def messages_appender(spark, settings: StoreJobSettings) -> MessagesAppender:
    """The append to `messages` the settings ask for (pipeline/store/messages_append.py), its
    Parquet dictionaries as Spark's writer has them (conf/spark-defaults.conf). delta-rs writes
    one file per day, so it takes no batch above `rows_per_file` (Spark's range-partitioned files)."""
    plain = [c for c in STORED_COLUMNS
             if spark.conf.get(f"spark.hadoop.parquet.enable.dictionary#{c}", "true") == "false"]
    return MessagesAppender(settings.warehouse.table_path("messages"),
                            min(settings.delta_rs_append_max_rows, settings.rows_per_file), plain)


def write_checked_batch(batch: DataFrame, batch_id: int, settings: StoreJobSettings,
                        quarantine_marks: QuarantineMarks | None = None,
                        recent: RecentHashes | None = None, appender: MessagesAppender | None = None) -> BatchStats:
    """Process one micro-batch of checked rows (`check_records`); returns what happened to them.
    `quarantine_marks` (kept by the query across its batches) lets batches of new offsets skip
    the quarantine anti-join; without it every batch runs it. `recent` (kept likewise) lets
    batches of recent receive times skip reading `messages`; without it every batch reads it.
    `appender` (kept likewise) writes the new rows; without it, one made for this batch."""
    spark = batch.sparkSession
    began = time.monotonic()
    if appender is None:
        appender = messages_appender(spark, settings)
    stats = BatchStats(rule_failures={})
    with stats.phase("plan"):
        checked = batch.persist()
    try:
        decision = _decide(checked, stats)
        # The quarantine write needs only the validated batch: it runs beside the messages
        # write (its own table, its own commit), so their driver-side costs overlap.
        quarantine = _Background(lambda: _write_quarantine(checked, decision, settings, quarantine_marks, stats)
                                 ) if stats.quarantined_rows else None
        try:
            if stats.valid_rows:
                _store_valid(checked, decision, settings, recent, appender, stats)
        except BaseException:
            if recent is not None:
                recent.reset()  # it may lack what a commit of this batch added: load it again
            if quarantine is not None:
                quarantine.join(quiet=True)  # the batch fails with the messages write's error
            raise
        if quarantine is not None:
            with stats.phase("wait_quarantine"):
                quarantine.join()
        with stats.phase("release"):
            checked.unpersist()
        if stats.quarantined_rows:
            log.warning("batch %d: quarantined %d records: %s", batch_id, stats.quarantined_rows,
                        stats.rule_failures)
        log.info("batch %d: %d in, %d stored%s, %d duplicates, %d ephemeral, %d quarantined (%.2fs: %s)",
                 batch_id, stats.input_rows, stats.stored_rows,
                 f" by {stats.messages_writer}" if stats.messages_writer else "", stats.duplicate_rows,
                 stats.ephemeral_rows, stats.quarantined_rows, time.monotonic() - began,
                 stats.phase_seconds)
        return stats
    finally:
        checked.unpersist()


def _decide(checked: DataFrame, stats: BatchStats) -> BatchDecision:
    """Validate the batch into the cache and decide it on the driver: one Spark job brings the
    narrow columns (no payloads) to the driver. (The refused rows' raw bytes stay in the cache:
    a batch of hostile records could be gigabytes.) Fills the batch's counts in `stats`."""
    with stats.phase("validate"):
        narrow = checked.select(
            "reason", "ephemeral", "kafka_topic", "kafka_partition", "kafka_offset", "message_hash",
            "received_time", untimed_column(F.col("timestamp")).alias("untimed")).toArrow()
        decision = decide(narrow.to_pydict())
        del narrow
    stats.input_rows, stats.valid_rows = decision.input_rows, decision.valid_rows
    stats.ephemeral_rows, stats.quarantined_rows = decision.ephemeral_rows, decision.quarantined_rows
    stats.rule_failures = dict(decision.rule_failures)
    return decision


def _write_quarantine(checked: DataFrame, decision: BatchDecision, settings: StoreJobSettings,
                      quarantine_marks: QuarantineMarks | None, stats: BatchStats) -> None:
    """Append the batch's refused rows to `quarantine`: a Kafka record once, even when a reset
    checkpoint re-reads it."""
    spark = checked.sparkSession
    refused = decision.refused_ranges
    with stats.phase("write_quarantine"):
        coordinates = ["kafka_topic", "kafka_partition", "kafka_offset"]
        # Only the batch's own coordinate ranges are read (file statistics on
        # kafka_partition/kafka_offset skip the rest), never the whole table.
        refused_rows = checked.where(F.col("reason").isNotNull())
        fresh = False
        if quarantine_marks is not None and decision.refused_topics == {settings.topic}:
            quarantine_marks.load(spark)
            fresh = quarantine_marks.all_above(refused)
            quarantine_marks.raise_to(refused)  # before the write: marks stay above the table
        if not fresh:
            recorded = (spark.read.format("delta").load(settings.warehouse.table_path("quarantine"))
                        .where(coordinate_ranges(F.col("kafka_partition"), F.col("kafka_offset"), refused))
                        .select(*coordinates))
            refused_rows = refused_rows.join(recorded, coordinates, "left_anti")
        # One task and one file: refused rows are few, and the messages write beside it
        # must not wait for a core behind one task per Kafka partition.
        (refused_rows
         .withColumn("quarantined_at", _wall_clock())
         .select(*QUARANTINE_COLUMNS).coalesce(1)
         .write.format("delta").mode("append").save(settings.warehouse.table_path("quarantine")))


def _store_valid(checked: DataFrame, decision: BatchDecision, settings: StoreJobSettings,
                 recent: RecentHashes | None, appender: MessagesAppender, stats: BatchStats) -> None:
    """De-duplicate the batch's valid rows against the store, append the first copies to
    `messages`, then index the untimed ones."""
    spark = checked.sparkSession
    valid = checked.where(F.col("reason").isNull() & ~F.col("ephemeral"))
    with stats.phase("dedupe"):
        existing, indexed = _existing_hashes(spark, decision, valid, settings, recent, stats)
        winners = decision.winners(existing)
    stats.stored_rows = len(winners)
    if winners:
        new = _first_copies(valid, decision, winners, settings, stats)
        with stats.phase("write_messages"):
            stats.messages_writer = appender.append(new, stats.stored_rows)
    if recent is not None and recent.loaded:
        recent.add((h, v[0]) for h, v in winners.items())
        recent.advance(decision.max_received)
    fresh_index = decision.untimed - indexed
    if fresh_index:
        # After the messages commit (an index row must never stand for a message not stored):
        # the batch's untimed hashes not yet indexed, whether stored now or by an earlier run of
        # this batch that ended between the two commits.
        with stats.phase("write_untimed_index"):
            (spark.createDataFrame(pa.table({
                "message_hash": pa.array(sorted(fresh_index), pa.binary()),
                "received_time": pa.array([decision.first[h][0] for h in sorted(fresh_index)],
                                          pa.float64())}), UNTIMED_SCHEMA)
             .write.format("delta").mode("append").save(settings.warehouse.table_path(UNTIMED_INDEX)))


def _first_copies(valid: DataFrame, decision: BatchDecision, winners: dict[bytes, tuple[float, int, int]],
                  settings: StoreJobSettings, stats: BatchStats) -> DataFrame:
    """The rows to store, in the stored columns, laid out as `messages` keeps them."""
    new = valid
    if stats.stored_rows < stats.valid_rows:
        # Picked by Kafka coordinates inside the one write: a filter on the winners' offsets per
        # partition, or on the others' when they are fewer (normally: the batch's few copies).
        # The set is one literal, so no Spark job builds a broadcast first.
        picked = {(p, o) for _, p, o in winners.values()}
        keep = stats.stored_rows <= stats.valid_rows - stats.stored_rows
        if not keep:
            picked = set(decision.copies) - picked
        chosen = in_coordinates(valid.sparkSession, F.col("kafka_partition"), F.col("kafka_offset"), picked)
        new = valid.where(chosen if keep else ~chosen)
    new = new.withColumn("received_date", _received_date(F.col("received_time")))
    files = max(1, math.ceil(stats.stored_rows / settings.rows_per_file))
    # Files cover disjoint received_time ranges, rows sorted by (received_time, digest). A batch
    # within rows_per_file (store.max_offsets_per_trigger at or below it) is one file: no range
    # shuffle.
    new = new.repartitionByRange(files, "received_time") if files > 1 else new.coalesce(1)
    return new.sortWithinPartitions("received_time", "digest").select(*STORED_COLUMNS)


def figures(stats: BatchStats) -> BatchFigures:
    """The store's figures of a batch for its job_metrics row and Prometheus series."""
    return BatchFigures(output_rows=stats.stored_rows, stored_rows=stats.stored_rows,
                        duplicate_rows=stats.duplicate_rows, ephemeral_rows=stats.ephemeral_rows,
                        quarantined_rows=stats.quarantined_rows, rule_failures=dict(stats.rule_failures or {}),
                        phase_seconds={f"store.{k}": v for k, v in stats.phase_seconds.items()})
