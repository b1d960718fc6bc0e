"""The store on a real S3 object store: SeaweedFS's S3 gateway (tools/object_store.py, one
server for the module). Messages are written to a Delta table on the bucket with delta-rs; the
store service's reader (delta-rs snapshot, Parquet through Arrow's S3 file system, the hash
index) answers walks exactly as the oracle says, over libp2p too; it follows new versions;
concurrent delta-rs writers commit safely (S3 conditional PUT); the fresh tail reads the store
job's offsets from an s3a:// checkpoint. The server and the session's S3 settings are the
fixtures of tests/integration/conftest.py."""
from __future__ import annotations

import random
import threading
import uuid

import pyarrow as pa
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from core.settings import ObjectStoreSettings
from core.store_page import StoreQuery
from ingest.host import build_host, listen_addrs
from ingest.store.client import StoreClient
from ingest.store.reader import MESSAGES_ARROW_SCHEMA, ReaderSettings, StoreReader, write_messages
from ingest.store.server import StoreServer, StoreServiceSettings
from ingest.store.tail import committed_offsets
from tests.integration.conftest import S3_BUCKET
from tests.unit.test_store_query import (
    PAGE_SIZES,
    check_paging,
    make_row,
    random_cursor,
    random_filters,
    random_rows,
)

pytestmark = pytest.mark.integration

SEED = 20261126
BUCKET = S3_BUCKET  # the session server's bucket (tests/integration/conftest.py)


def new_table(scheme: str = "s3a") -> str:
    return f"{scheme}://{BUCKET}/{uuid.uuid4().hex[:8]}/messages"


def write_rows(uri: str, rows: list[dict], store: ObjectStoreSettings, rnd: random.Random, files: int = 3,
               group: int = 7) -> None:
    """The rows in `files` appends (overlapping time ranges), each sorted, as the store job writes."""
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    for i in range(files):
        chunk = sorted(shuffled[i::files], key=lambda r: (r["received_time"], r["digest"]))
        write_messages(uri, pa.Table.from_pylist(chunk, schema=MESSAGES_ARROW_SCHEMA), max_row_group_size=group,
                       storage_options=store.storage_options())


def test_walks_are_exact_from_s3(s3):
    print(f"seed {SEED}")
    rnd = random.Random(SEED)
    rows = random_rows(rnd, 120)
    uri = new_table()
    write_rows(uri, rows, s3.settings, rnd)
    reader = StoreReader(ReaderSettings(uri, object_store=s3.settings))
    assert reader.refresh() == 2
    assert all(f.path.startswith("s3a://") for f in reader.snapshot.files)
    cases = []
    for forward in (True, False):
        for size in PAGE_SIZES:
            pubsub, contents = random_filters(rnd)
            cases.append((pubsub, contents, forward, size, random_cursor(rnd, rows)))
    for pubsub, contents, forward, size, cursor in cases:
        check_paging(reader.query, rows, pubsub, contents, forward, size, cursor)
    assert reader.row_groups_read > 0
    # The hash index over the files on S3: every stored hash found, an unknown one not.
    hashes = [r["message_hash"] for r in rows]
    assert reader.durable_among(hashes + [b"\x00" * 32]) == set(hashes)
    assert reader.locate(rows[7]["message_hash"]).digest == rows[7]["digest"]


def test_reader_follows_new_versions_on_s3(s3):
    rnd = random.Random(SEED + 1)
    uri = new_table("s3")  # s3:// works as s3a:// does
    reader = StoreReader(ReaderSettings(uri, object_store=s3.settings))
    assert reader.refresh() is None  # no table yet
    rows = random_rows(rnd, 40)
    write_rows(uri, rows[:20], s3.settings, rnd, files=1)
    assert reader.refresh() == 0
    assert len(reader.query(StoreQuery(page_size=100)).messages) == 20
    write_rows(uri, rows[20:], s3.settings, rnd, files=1)
    assert reader.refresh() == 1
    check_paging(reader.query, rows, "", (), True, 100, None)


def test_store_service_answers_over_libp2p_from_s3(s3):
    rnd = random.Random(SEED + 2)
    rows = random_rows(rnd, 60)
    uri = new_table()
    write_rows(uri, rows, s3.settings, rnd)
    reader = StoreReader(ReaderSettings(uri, object_store=s3.settings))
    reader.refresh()

    async def main():
        host = build_host(create_new_key_pair(), listen_addrs("127.0.0.1", 0, -1))
        StoreServer(reader, StoreServiceSettings()).mount(host)
        async with host.run(listen_addrs("127.0.0.1", 0, -1)), StoreClient.running(timeout=30) as client:
            peer = await client.connect(f"{host.get_addrs()[0]}")
            got, query = [], StoreQuery(page_size=7)
            while True:
                page = await client.query(peer, query)
                got.extend(page.messages)
                if page.cursor is None:
                    return got
                query = query.with_cursor(page.cursor)

    got = trio.run(main)
    want = sorted(rows, key=lambda r: (r["received_time"], r["digest"]))
    assert [m.digest for m in got] == [r["digest"] for r in want]  # beta2 carries no receive time


def test_concurrent_delta_rs_writers_commit_safely(s3):
    """Two writers appending to one table at once: every append becomes its own version (S3's
    conditional PUT refuses the second writer of a commit file; delta-rs retries on the next
    version), no rows lost."""
    from deltalake import DeltaTable

    uri = new_table()
    store = s3.settings.storage_options()
    write_messages(uri, pa.Table.from_pylist([], schema=MESSAGES_ARROW_SCHEMA), storage_options=store)
    per_writer, errors = 6, []

    def writer(w: int) -> None:
        try:
            for i in range(per_writer):
                row = make_row(1.7e9 + w * 100 + i, "/waku/2/rs/0/0", "/app/1/c/proto", b"w%d-%d" % (w, i),
                               w * 100 + i)
                write_messages(uri, pa.Table.from_pylist([row], schema=MESSAGES_ARROW_SCHEMA),
                               storage_options=store)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    dt = DeltaTable(uri, storage_options=store)
    assert dt.version() == 2 * per_writer
    assert dt.to_pyarrow_table(columns=["message_hash"]).num_rows == 2 * per_writer


def test_tail_reads_committed_offsets_from_an_s3_checkpoint(s3):
    root = f"{BUCKET}/{uuid.uuid4().hex[:8]}/checkpoints/store"
    fs = s3.settings.arrow_filesystem()
    assert committed_offsets(f"s3a://{root}", "waku.messages", s3.settings) is None  # no checkpoint yet
    for batch, offsets in ((0, '{"waku.messages":{"0":5,"1":7}}'), (1, '{"waku.messages":{"0":9,"1":12}}'),
                           (2, '{"waku.messages":{"0":20,"1":30}}')):
        with fs.open_output_stream(f"{root}/offsets/{batch}") as f:
            f.write(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}\n'.encode())
    for batch in (0, 1):  # batch 2 planned, not committed
        with fs.open_output_stream(f"{root}/commits/{batch}") as f:
            f.write(b'v1\n{"nextBatchWatermarkMs":0}\n')
    assert committed_offsets(f"s3a://{root}", "waku.messages", s3.settings) == {0: 9, 1: 12}


def test_store_job_writes_messages_on_s3a_and_the_service_walks_them(spark_on_s3, kafka, s3, tmp_path):
    """The store job (Spark's Kafka source, Delta on s3a:// with its checkpoint there, the
    conditional log store) stores exactly the load generator's messages; the store service reads
    the same table and the tail reads the job's s3a:// checkpoint."""
    from pipeline.store.settings import StoreJobSettings
    from tests.integration.test_store_job import assert_store_matches, job_config, new_topic, run_available_now
    from tools.loadgen import LoadGenerator, LoadProfile, produce

    spark = spark_on_s3
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=20, duplicate_share=0.1, invalid_share=0.05,
                                    payload_bytes=None, seed=SEED))
    produce(kafka, topic, gen.batch(1500))
    prefix = uuid.uuid4().hex[:8]
    sets = dict(item.split("=", 1) for item in s3.overrides(BUCKET, prefix))
    cfg = job_config(kafka, topic, tmp_path, **sets)
    assert cfg.table_path("messages").startswith("s3a://")
    run_available_now(spark, cfg)
    assert_store_matches(spark, cfg, gen)
    # Delta's s3a:// log store is ours; it refuses a second commit file of one version.
    assert spark.sparkContext.getConf().get("spark.delta.logStore.s3a.impl") == "waku.pipeline.S3ConditionalLogStore"
    jvm, hconf = spark._jvm, spark.sparkContext._jsc.hadoopConfiguration()
    store = jvm.waku.pipeline.S3ConditionalLogStore(hconf)
    commit = jvm.org.apache.hadoop.fs.Path(f"{cfg.table_path('messages')}/_delta_log/{99:020d}.json")

    def actions(text: str):
        lines = jvm.java.util.ArrayList()
        lines.add(text)
        return lines.iterator()

    store.write(commit, actions('{"commitInfo":{"n":1}}'), False, hconf)
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        store.write(commit, actions('{"commitInfo":{"n":2}}'), False, hconf)
    assert list(store.read(commit, hconf)) == ['{"commitInfo":{"n":1}}']
    fs = s3.settings.arrow_filesystem()
    fs.delete_file(commit.toString().split("://", 1)[1])

    reader = StoreReader(ReaderSettings.from_config(cfg))
    assert reader.refresh() is not None
    got, query = [], StoreQuery(page_size=50)
    while True:
        page = reader.query(query)
        got.extend(m.message_hash for m in page.messages)
        if page.cursor is None:
            break
        query = query.with_cursor(page.cursor)
    assert sorted(got) == sorted(gen.truth.stored)
    ends = committed_offsets(cfg.checkpoint_path("store"), topic, s3.settings)
    assert ends is not None and sum(ends.values()) == 1500
    assert StoreJobSettings.from_config(cfg).warehouse.checkpoint_path("store").startswith("s3a://")
