"""Delta log checkpoints written by delta-rs beside a Spark writer (pipeline/spark/log_checkpoints.py),
on real Spark with Delta: Spark's commits write none, Spark and delta-rs read the table from the
checkpoints written, and a table Spark checkpointed before (its checksum sidecars) stays readable."""
from __future__ import annotations

import json
import os

import pytest

from core.tables import NO_SPARK_CHECKPOINTS
from pipeline.spark.log_checkpoints import LAST_CHECKPOINT_SIDECAR, LogCheckpointer

pytestmark = pytest.mark.integration


def checkpoints(path: str) -> dict[int, bool]:
    """Checkpoint versions in the log, each with whether Spark wrote it (its parquet footer)."""
    import pyarrow.parquet as pq

    out = {}
    for name in os.listdir(os.path.join(path, "_delta_log")):
        if name.endswith(".checkpoint.parquet"):
            meta = pq.read_metadata(os.path.join(path, "_delta_log", name)).metadata or {}
            out[int(name.split(".")[0])] = b"org.apache.spark.version" in meta
    return out


def read_through_hadoop(spark, path: str) -> str:
    """A file read the way Spark's Delta reads it: through Hadoop's local file system, which
    checks the file against its `.crc` sidecar (ChecksumException on a stale one)."""
    jvm = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    fs = p.getFileSystem(spark._jsc.hadoopConfiguration())
    stream = fs.open(p)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def rewrite_through_hadoop(spark, path: str) -> None:
    """Write a file again through Hadoop's local file system, which puts a checksum sidecar beside it."""
    with open(path, "rb") as f:
        content = f.read()
    jvm = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    out = p.getFileSystem(spark._jsc.hadoopConfiguration()).create(p, True)
    try:
        out.write(bytearray(content))
    finally:
        out.close()


def test_checkpoints_by_delta_rs_replace_sparks_and_spark_reads_them(spark, tmp_path):
    from delta.tables import DeltaTable as SparkDeltaTable
    from deltalake import DeltaTable

    path = str(tmp_path / "t")
    # A table of an earlier release: Spark's Delta checkpointed it (every 3 commits), leaving
    # Hadoop checksum sidecars beside the checkpoint file and (Delta's own log store wrote it
    # through Hadoop) beside _last_checkpoint.
    spark.range(10).write.format("delta").option("delta.checkpointInterval", "3").save(path)
    for _ in range(3):
        spark.range(10).write.format("delta").mode("append").save(path)
    assert checkpoints(path) == {3: True}
    rewrite_through_hadoop(spark, os.path.join(path, "_delta_log", "_last_checkpoint"))
    assert os.path.exists(os.path.join(path, "_delta_log", LAST_CHECKPOINT_SIDECAR))
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in NO_SPARK_CHECKPOINTS.items())
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({settings})")  # version 4

    writer = LogCheckpointer([path], interval=4, spark=spark)
    assert writer.check(path) is None  # at start, the last multiple (4) counts as done
    for _ in range(9):  # versions 5..13
        spark.range(10).write.format("delta").mode("append").save(path)
        writer.poke()
        writer.wait()
    # Spark's commits wrote none (its interval is off); delta-rs wrote 8 and 12, exactly there.
    assert checkpoints(path) == {3: True, 8: False, 12: False}
    assert writer.written == [(path, 8, "delta-rs"), (path, 12, "delta-rs")]
    log_dir = os.path.join(path, "_delta_log")
    assert not os.path.exists(os.path.join(log_dir, LAST_CHECKPOINT_SIDECAR))
    assert json.loads(read_through_hadoop(spark, os.path.join(log_dir, "_last_checkpoint")))["version"] == 12

    # Spark, from a cold cache, starts from delta-rs's checkpoint and sees every row; so does delta-rs.
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    snapshot = delta_log.unsafeVolatileSnapshot()
    assert snapshot.version() == 13
    assert snapshot.checkpointProvider().version() == 12
    assert spark.read.format("delta").load(path).count() == 130
    assert SparkDeltaTable.forPath(spark, path).history().count() == 14
    assert DeltaTable(path).to_pyarrow_dataset().count_rows() == 130
    # And Spark appends on from there.
    spark.range(10).write.format("delta").mode("append").save(path)
    assert spark.read.format("delta").load(path).count() == 140


def test_the_local_log_store_lists_a_log_as_deltas_own_does(spark, tmp_path):
    """conf/spark-defaults.conf makes LocalDirLogStore Delta's log store for local paths: the same
    entries in the same order as Delta's default (HDFSLogStore), without a stat of the entries
    below the start (docs/decisions.md, session 19)."""
    path = str(tmp_path / "t")
    for _ in range(4):
        spark.range(3).write.format("delta").mode("append").save(path)
    log_dir = os.path.join(path, "_delta_log")
    for junk in ("00000000000000000000-below", ".00000000000000000003.json.tmp", "00000000000000000002.json.tmp"):
        open(os.path.join(log_dir, junk), "w").close()
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    start = jvm.org.apache.hadoop.fs.Path(f"file:{log_dir}/00000000000000000001.json")
    delegate = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).store().getDelegate(start)
    assert delegate.logStoreImpl().getClass().getName() == "waku.pipeline.LocalDirLogStore"

    def names(it) -> list[str]:
        out = []
        while it.hasNext():
            out.append(it.next().getPath().getName())
        return out

    ours = names(delegate.logStoreImpl().listFrom(start, conf))
    deltas = names(jvm.io.delta.storage.HDFSLogStore(conf).listFrom(start, conf))
    assert ours == deltas
    assert ours[0] == "00000000000000000001.json" and "00000000000000000002.json.tmp" in ours
    assert not any(n.endswith(".crc") and n.startswith(".") for n in ours)
    assert spark.read.format("delta").load(path).count() == 12


def test_the_local_log_store_writes_a_commit_once(spark, tmp_path):
    """LocalDirLogStore's write: the lines as Delta's writes them, a second write of a version
    refused with the FileAlreadyExistsException Delta's commit expects (link(2): atomic also
    across processes), an overwrite replacing the file, no temporary file left behind."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    store = jvm.waku.pipeline.LocalDirLogStore(conf)
    log_dir = tmp_path / "_delta_log"
    target = jvm.org.apache.hadoop.fs.Path(f"file:{log_dir}/00000000000000000000.json")

    def lines(*items):
        out = jvm.java.util.ArrayList()
        for item in items:
            out.add(item)
        return out.iterator()

    store.write(target, lines('{"a":1}', '{"b":2}'), False, conf)
    assert (log_dir / "00000000000000000000.json").read_text() == '{"a":1}\n{"b":2}\n'
    with pytest.raises(Exception) as refused:
        store.write(target, lines('{"c":3}'), False, conf)
    assert "java.nio.file.FileAlreadyExistsException" in str(refused.value)
    assert (log_dir / "00000000000000000000.json").read_text() == '{"a":1}\n{"b":2}\n'
    # An overwrite of a file Hadoop wrote (with its checksum sidecar) leaves it readable through Hadoop.
    rewrite_through_hadoop(spark, str(log_dir / "00000000000000000000.json"))
    assert (log_dir / ".00000000000000000000.json.crc").exists()
    store.write(target, lines('{"d":4}'), True, conf)
    assert read_through_hadoop(spark, str(log_dir / "00000000000000000000.json")) == '{"d":4}\n'
    assert sorted(os.listdir(log_dir)) == ["00000000000000000000.json"]


def test_the_checkpoint_file_manager_writes_a_file_once(spark, tmp_path):
    """conf/spark-defaults.conf makes LocalCheckpointFileManager Spark's checkpoint file manager:
    on a local path a second write of a name is refused with the FileAlreadyExistsException
    Spark's offset log expects (link(2): atomic also across processes), an overwrite replaces
    the file and its stale checksum sidecar, a cancelled write leaves nothing, and reads, lists
    and deletes are Spark's own."""
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    Path = jvm.org.apache.hadoop.fs.Path
    d = tmp_path / "offsets"
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        Path(f"file:{d}"), conf)
    assert manager.getClass().getName() == "waku.pipeline.LocalCheckpointFileManager"

    def write(name: str, text: str, overwrite: bool = False) -> None:
        out = manager.createAtomic(Path(f"file:{d}/{name}"), overwrite)
        out.write(bytearray(text.encode()))
        out.close()

    manager.mkdirs(Path(f"file:{d}"))
    write("0", "v1\nfirst")
    with pytest.raises(Exception) as refused:
        write("0", "v1\nsecond")
    assert "org.apache.hadoop.fs.FileAlreadyExistsException" in str(refused.value)
    assert read_through_hadoop(spark, str(d / "0")) == "v1\nfirst"
    rewrite_through_hadoop(spark, str(d / "0"))
    assert (d / ".0.crc").exists()
    write("0", "v1\nthird", overwrite=True)
    assert read_through_hadoop(spark, str(d / "0")) == "v1\nthird"
    cancelled = manager.createAtomic(Path(f"file:{d}/1"), False)
    cancelled.write(bytearray(b"v1\nnever"))
    cancelled.cancel()
    assert sorted(os.listdir(d)) == ["0"]
    assert [s.getPath().getName() for s in manager.list(Path(f"file:{d}"))] == ["0"]
    assert manager.exists(Path(f"file:{d}/0"))
    manager.delete(Path(f"file:{d}/0"))
    assert os.listdir(d) == []


def test_a_query_restarts_from_offset_and_commit_logs_the_manager_wrote(spark, tmp_path):
    """A streaming query's offset and commit logs written through the local checkpoint file
    manager: each batch's offsets and commit are there, and a restarted query goes on from its
    checkpoint, neither repeating nor skipping a row."""
    checkpoint = str(tmp_path / "ck")
    sink = str(tmp_path / "sink")
    source = spark.readStream.format("rate").option("rowsPerSecond", 200).load().select("value")

    def run(seconds: float) -> None:
        q = (source.writeStream.format("delta").option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start(sink))
        try:
            q.awaitTermination(seconds)
            assert q.exception() is None
        finally:
            q.stop()

    run(6)
    run(6)

    def ids(log: str) -> list[int]:
        return sorted(int(n) for n in os.listdir(os.path.join(checkpoint, log)) if n.isdigit())

    assert len(ids("commits")) >= 2 and set(ids("commits")) <= set(ids("offsets"))
    assert not [n for n in os.listdir(os.path.join(checkpoint, "offsets")) if n.endswith(".tmp")]
    values = [r.value for r in spark.read.format("delta").load(sink).select("value").collect()]
    assert len(values) == len(set(values)) and sorted(values) == list(range(len(values)))


def test_a_restarted_job_checkpoints_at_its_first_commit_when_that_is_a_multiple(spark, tmp_path):
    """A job started on a table at version 3 (interval 2) whose first batch commits version 4:
    with the checkpointer made at its start, version 4 gets its checkpoint (the first check, after that
    commit, used to take 4 as done and skip it: seen in test_store_job's random stop)."""
    path = str(tmp_path / "t")
    for _ in range(4):  # versions 0..3
        spark.range(3).write.format("delta").mode("append").save(path)
    writer = LogCheckpointer([path], interval=2, spark=spark)
    spark.range(3).write.format("delta").mode("append").save(path)  # version 4: this run's first commit
    writer.poke()
    writer.wait()
    assert writer.written == [(path, 4, "delta-rs")]
    assert checkpoints(path) == {4: False}
    # A path that is no table yet is left to its first check.
    later = LogCheckpointer([str(tmp_path / "none")], interval=2)
    assert later.check(str(tmp_path / "none")) is None
