"""The subscriptions job's expiry runs Spark work only when a row can be past its TTL: a bound
of the table's smallest last_refresh (lowered by each batch's earliest SUBSCRIBE) skips the
DELETE while every row is fresh, and the rows it deletes are exactly the expired ones."""
from __future__ import annotations

import dataclasses

import pytest

from core.config import load_config
from schemas import pipeline_records_pb2 as pr

pytestmark = pytest.mark.integration

PT = "/waku/2/default-waku/proto"


def ev(peer: str, op: int, cts=(), t: float = 100.0) -> bytes:
    return pr.SubscriptionEvent(peer_id=peer, bridge_id="B1", op=op, pubsub_topic=PT if cts else "",
                                content_topics=list(cts), event_time=t, request_id="r",
                                protocol="v2").SerializeToString()


def kafka_rows(spark, values: list[bytes], first_offset: int):
    rows = [(v, 0, first_offset + i) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "value binary, partition int, offset long")


def test_expiry_is_skipped_while_every_row_is_fresh(spark, tmp_path):
    from pipeline.filter.settings import SubscriptionsJobSettings
    from pipeline.filter.subscriptions import SubscriptionsJob, expiry_due

    assert expiry_due(None, 10.0) and expiry_due(9.0, 10.0) and not expiry_due(10.0, 10.0)
    cfg = load_config([f"warehouse.root={tmp_path}"], environ={})
    settings = dataclasses.replace(SubscriptionsJobSettings.from_config(cfg), ttl_s=100.0)
    job = SubscriptionsJob(spark, settings)
    ttl = settings.ttl_s + job.expiry_grace_s
    rows = lambda: {r.peer_id: r.last_refresh for r in spark.read.format("delta").load(job.path).collect()}  # noqa: E731

    job._process(kafka_rows(spark, [ev("p1", pr.SUBSCRIBE, ["a"], 1000), ev("p2", pr.SUBSCRIBE, ["b"], 1010)], 0), 0)
    job.expire_now(now=1000 + ttl - 1)           # bound unknown: read from the table; nothing old
    assert job.expiry_runs == {"skipped": 0, "checked": 1, "deleted": 0} and job.earliest == 1000
    job.expire_now(now=1000 + ttl - 0.5)         # the bound alone answers: no Spark work
    assert job.expiry_runs["skipped"] == 1

    # p1 refreshes: the bound stays 1000 (a lower bound), so the next due check reads the table
    job._process(kafka_rows(spark, [ev("p1", pr.REFRESH, t=1050)], 2), 1)
    job.expire_now(now=1000 + ttl + 1)
    assert job.expiry_runs["checked"] == 2 and job.earliest == 1010 and set(rows()) == {"p1", "p2"}

    # a SUBSCRIBE with an older time lowers the bound: expiry looks again and deletes it
    job._process(kafka_rows(spark, [ev("p3", pr.SUBSCRIBE, ["c"], 900)], 3), 2)
    assert job.earliest == 900
    job.expire_now(now=1000 + ttl + 2)
    assert job.expiry_runs["deleted"] == 1 and rows() == {"p1": 1050.0, "p2": 1010.0}
    assert job.earliest == 1010

    job.expire_now(now=1010 + ttl + 1)           # p2 is past its TTL now, p1 is not
    assert rows() == {"p1": 1050.0} and job.earliest == 1050 and job.expiry_runs["deleted"] == 2
    job.expire_now(now=1050 + ttl + 1)
    assert rows() == {} and job.earliest == float("inf")
    job.expire_now(now=10**9)                    # an empty table: nothing to look at until a SUBSCRIBE
    assert job.expiry_runs["skipped"] == 2


def test_the_warm_up_runs_the_batch_path_and_leaves_nothing(spark, tmp_path):
    """The start-up warm-up takes every MERGE branch and the expiry on a throw-away table, which
    is gone afterwards."""
    from pipeline.filter.subscriptions import warm_up

    path = str(tmp_path / "subscriptions-warm-up")
    assert warm_up(spark, path, 300.0) > 0
    assert not (tmp_path / "subscriptions-warm-up").exists()
