"""Every job on a real S3 object store (SeaweedFS's S3 gateway, the session server of
tests/integration/conftest.py), tables and checkpoints on s3a://:

- the subscriptions and filter jobs: a filter client's subscription reaches Delta
  `subscriptions` on S3, the matching messages are pushed end to end, and a filter job started
  again bootstraps its resident criteria from its snapshot and the subscriptions job's offsets
  on S3;
- the store job with maintain (retention, OPTIMIZE, VACUUM) committing beside it: every message
  stored once; job_metrics on S3 (appended by Spark's Delta) read by the dashboard's reader with
  the warehouse's S3 settings.

(test_store_on_s3.py covers the store job alone and the store service's reader and tail.)"""
from __future__ import annotations

import time
import uuid

import pytest
import trio

from core.config import load_config
from core.settings import local_path
from tests.conftest import BATCH_AT_EVERY_TRIGGER
from tests.integration.conftest import S3_BUCKET

pytestmark = pytest.mark.integration

SEED = 20261127


def s3_sets(s3, prefix: str) -> list[str]:
    return s3.overrides(S3_BUCKET, prefix)


def test_subscriptions_and_filter_jobs_push_from_tables_on_s3(spark_on_s3, kafka, s3, tmp_path):
    from pyarrow.fs import FileSelector

    from ingest.filter.client import FilterClient
    from ingest.metrics import BridgeMetrics
    from ingest.node import Bridge
    from ingest.publisher import Publisher
    from ingest.settings import BridgeSettings
    from pipeline.filter.criteria import close_indexes, index_stats
    from pipeline.filter.matching import start_filter_query
    from pipeline.filter.settings import FilterJobSettings, SubscriptionsJobSettings
    from pipeline.filter.subscriptions import SubscriptionsJob
    from tests.integration.test_bridge import create_topic
    from tests.integration.test_filter_service import PT, Net, addr, collect, ct, publish, wait_until

    spark = spark_on_s3
    tag = uuid.uuid4().hex[:8]
    cfg = load_config([
        f"kafka.bootstrap_servers={kafka}", f"topics.messages=test.s3.{tag}.messages",
        f"topics.subscriptions=test.s3.{tag}.subscriptions", f"topics.push_prefix=test.s3.{tag}.push.",
        *s3_sets(s3, tag), "spark.master=local[2]", "spark.shuffle_partitions=2",
        "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
        f"bridge.pubsub_topics={PT}", f"bridge.key_file={tmp_path / 'a.key'}",
        "filter.trigger_seconds=0.2", "filter.subscriptions_trigger_seconds=0.2",
        *BATCH_AT_EVERY_TRIGGER, "filter.trigger=microbatch",
        "filter.max_requests_per_peer_per_minute=1000",
    ], environ={})
    filter_settings = FilterJobSettings.from_config(cfg)
    assert filter_settings.warehouse.checkpoint_path("filter").startswith("s3a://")
    create_topic(kafka, cfg.get("topics.messages"), 2)
    devnull = open("/dev/null", "w")
    bridge = Bridge(BridgeSettings.from_config(cfg), metrics=BridgeMetrics(), out=devnull)
    publisher = Publisher()
    net = Net()

    async def setup(nursery: trio.Nursery) -> None:
        await nursery.start(bridge.run)
        with trio.fail_after(60):
            await bridge.filter.ready.wait()

        async def keep_publisher(task_status=trio.TASK_STATUS_IGNORED) -> None:
            async with publisher.running([PT]):
                await publisher.connect(addr(bridge))
                await publisher.wait_for_mesh(PT)
                task_status.started()
                await trio.sleep_forever()
        await nursery.start(keep_publisher)

    net.start(setup)
    env = {"net": net, "publisher": publisher}
    subs = SubscriptionsJob(spark, SubscriptionsJobSettings.from_config(cfg), query_name=f"s3_subs_{tag}")
    assert subs.path.startswith("s3a://")
    subs.start()
    queries = []

    def start_filter():
        q = start_filter_query(spark, filter_settings, query_name=f"s3_filter_{tag}_{len(queries)}")
        queries.append(q)
        # "latest" offsets are fixed at the first batch: wait for it before publishing.
        wait_until(lambda: q.lastProgress is not None, 180, "the filter query's first batch")
        return q

    try:
        query = start_filter()
        client = FilterClient()
        net.run(net.start_client, client)
        net.run(client.connect, addr(bridge))
        peer = client.peer_id.to_base58()
        resp = net.run(client.subscribe, PT, [ct("a"), ct("b")])
        assert (resp.status_code, resp.status_desc) == (200, "OK")

        def rows() -> set[tuple[str, str]]:
            df = spark.read.format("delta").load(subs.path).where(f"peer_id = '{peer}'")
            return {(r.pubsub_topic, r.content_topic) for r in df.collect()}

        wait_until(lambda: rows() == {(PT, ct("a")), (PT, ct("b"))}, 120, "the subscriptions table on S3")
        publish(env, [(PT, ct("a"), b"a1", False), (PT, ct("b"), b"b1", False), (PT, ct("c"), b"c1", False)])
        got = collect(env, client, 2, timeout=120)
        assert sorted(p.message.payload for p in got) == [b"a1", b"b1"]

        # Started again: the index bootstraps from a snapshot written on S3 and the subscriptions
        # job's committed offsets read from its s3a:// checkpoint (the events before them are not
        # replayed: the client's criteria can only come from the snapshot).
        query.stop()
        close_indexes(spark)
        wait_until(lambda: subs.query is not None and subs.query.lastProgress is not None, 60, "a subscriptions batch")
        query = start_filter()
        criteria = filter_settings.warehouse.checkpoint_path("filter") + "-criteria"
        snapshots = s3.settings.arrow_filesystem().get_file_info(FileSelector(criteria.split("://", 1)[1]))
        assert len(snapshots) == 2  # the two runs' snapshots, on S3
        stats = index_stats(spark)  # the new run's index alone (close_indexes)
        assert len(stats) == 1 and stats[0]["snapshot_rows"] >= 2 and not stats[0]["error"], stats
        publish(env, [(PT, ct("c"), b"c2", False), (PT, ct("a"), b"a2", False)])
        got = collect(env, client, 1, timeout=120)
        assert [p.message.payload for p in got] == [b"a2"]
    finally:
        for q in queries:
            q.stop()
        close_indexes(spark)
        subs.stop()
        trio.from_thread.run_sync(bridge.stop, trio_token=net.token)
        net.stop()
        devnull.close()


def test_store_job_and_maintain_commit_beside_each_other_on_s3(spark_on_s3, kafka, s3, tmp_path):
    """The store job appends on s3a:// (small batches by delta-rs, as on a local disk) while
    maintain (the entry point, as spark-submit runs it, Spark's Delta) deletes from and compacts
    the same tables (then, the job stopped, vacuums them): both commit by S3's conditional PUT
    (delta-rs by itself, Spark through the conditional log store); every valid message is stored
    once. job_metrics holds both
    jobs' rows on S3 and the dashboard reads them (and the row counts) with the warehouse's S3
    settings."""
    from deltalake import DeltaTable as RsTable
    from pyarrow.fs import FileSelector

    from jobs import maintain
    from pipeline.spark.metrics import JobMetrics
    from pipeline.store.job import start_store_query
    from pipeline.store.settings import StoreJobSettings
    from tests.integration.test_store_job import assert_store_matches, job_config, new_topic, run_available_now
    from tools.dashboard import DashboardSettings, read_job_metrics, table_rows
    from tools.loadgen import LoadGenerator, LoadProfile, produce

    spark = spark_on_s3
    print(f"seed {SEED}")
    topic = new_topic(kafka)
    gen = LoadGenerator(LoadProfile(content_topics=30, duplicate_share=0.1, invalid_share=0.05, seed=SEED))
    prefix = uuid.uuid4().hex[:8]
    sets = dict(item.split("=", 1) for item in s3_sets(s3, prefix))
    cfg = job_config(kafka, topic, tmp_path, **sets, **{"store.max_offsets_per_trigger": 400,
                                                       "job_metrics.write_interval_s": 1})
    messages = cfg.table_path("messages")
    assert messages.startswith("s3a://") and local_path(messages) is None
    maintain_args = [a for s in [*s3_sets(s3, prefix), f"kafka.bootstrap_servers={kafka}"] for a in ("--set", s)]
    produce(kafka, topic, gen.batch(600))
    settings = StoreJobSettings.from_config(cfg)
    metrics = JobMetrics(spark, settings.metrics).start()
    query = start_store_query(spark, settings, metrics=metrics)
    store = s3.settings.storage_options()
    try:
        wait_until = time.monotonic() + 300
        while not RsTable.is_deltatable(messages, storage_options=store) or query.lastProgress is None:
            assert query.exception() is None and time.monotonic() < wait_until, query.exception()
            time.sleep(0.5)
        produce(kafka, topic, gen.batch(400))
        assert maintain.main([*maintain_args, "--skip", "vacuum", "--skip", "audit"]) == 0
    finally:
        query.stop()
    run_available_now(spark, cfg, metrics)
    metrics.flush()
    assert metrics.appended_by == "delta-rs"  # as on a local disk: delta-rs appends (S3's conditional PUT)
    metrics.stop()
    assert_store_matches(spark, cfg, gen)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{messages}`").collect()
    ops = [r.operation for r in history]
    assert "OPTIMIZE" in ops and "WRITE" in ops, ops  # the job's appends (VACUUM is logged only on local paths)
    engines = {(r.engineInfo or "").split("/")[0] for r in history if r.operation == "WRITE"}
    assert any("delta-rs" in e for e in engines), engines  # the 400-record batches: delta-rs's appends
    # With the job stopped, a vacuum keeping nothing removes the compacted-away files from S3.
    def objects() -> int:
        return len(s3.settings.arrow_filesystem().get_file_info(FileSelector(messages.split("://", 1)[1],
                                                                              recursive=True)))

    before = objects()
    assert maintain.main([*maintain_args, "--set", "store.vacuum_retain_hours=0", "--skip", "retention",
                          "--skip", "compact", "--skip", "audit"]) == 0
    assert objects() < before
    assert_store_matches(spark, cfg, gen)

    dash = DashboardSettings.from_config(cfg)
    assert dash.job_metrics.startswith("s3a://") and dash.storage_options(dash.job_metrics) == store
    rows = read_job_metrics(dash.job_metrics, 0.0, dash.storage_options(dash.job_metrics))
    assert sum(r["input_rows"] or 0 for r in rows if r["job"] == "store") >= 1000  # a batch stopped midway runs again
    assert sum(1 for r in rows if r["job"] == "maintain") == 2
    assert table_rows(dash.messages, dash.storage_options(dash.messages)) == len(gen.truth.stored)
