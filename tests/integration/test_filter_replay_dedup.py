"""A filter job's replay is pushed once (issue 37). The real filter query (resident criteria, the
embedded Kafka; micro-batch, and real-time mode as deployed) writes each PushRecord with its source
record's partition and offset in waku.messages; it is stopped before it commits (micro-batch: its
checkpoint loses its commit, as a query killed before committing its batch; real time: stopped
inside its 5-minute epoch, as when a worker dies) and runs again: the batch or epoch is matched and
written a second time. Every
push record, both runs', decoded through the bridge's `_deliver` with a hash memory far smaller
than the replay, is dropped as `replayed` when it is one (by its source offset); the one message
two bridges relayed is dropped as `duplicate` by the hashes (always with a memory holding the run)."""
from __future__ import annotations

import math
import time
import uuid
from pathlib import Path

import pytest
import trio

from core.config import Config, load_config
from core.records import ingest_key, ingest_value, subscription_event
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_bridge import consume_all, create_topic
from tests.integration.test_filter_service import wait_until

pytestmark = pytest.mark.integration

PT = "/waku/2/rs/1/0"
CT = "/app/1/replay/proto"
PEER = "16Uiu2HAmReplayPeer"
N = 400          # distinct messages; the bridge below remembers 64 hashes per peer


def _settings(kafka: str, root: Path, tag: str, trigger: str) -> Config:
    return load_config([
        f"kafka.bootstrap_servers={kafka}",
        f"topics.messages=test.replay.{tag}.messages", "topics.messages_partitions=2",
        f"topics.subscriptions=test.replay.{tag}.subscriptions",
        f"topics.push_prefix=test.replay.{tag}.push.",
        f"warehouse.root={root / 'warehouse'}", f"warehouse.checkpoints={root / 'checkpoints'}",
        "spark.master=local[2]", "spark.shuffle_partitions=2",
        f"filter.trigger={trigger}", "filter.trigger_seconds=0.2",
        "filter.realtime_checkpoint_interval=5 minutes",
        "filter.starting_offsets=earliest",
    ], environ={})


def _produce(kafka: str, cfg: Config) -> dict[tuple[int, int], bytes]:
    """The subscription, then N messages over 2 partitions, one of them relayed by two bridges
    (two source records); returns each source record's (partition, offset) -> message hash."""
    from kafka import KafkaProducer

    messages, subscriptions = cfg.get("topics.messages"), cfg.get("topics.subscriptions")
    create_topic(kafka, messages, 2)
    create_topic(kafka, subscriptions, 1)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    key, value = subscription_event(PEER, "B", pr.SUBSCRIBE, time.time(), PT, [CT], "r1", "v2")
    producer.send(subscriptions, key=key, value=value).get(30)
    sent = []
    now = time.time()
    for i in range(N):
        msg = WakuMessage(payload=i.to_bytes(4, "big"), content_topic=CT, timestamp=int(now * 1e9) + i)
        data = msg.SerializeToString()
        copies = [("A", i % 2), ("C", 1 - i % 2)] if i == 7 else [("A", i % 2)]
        for bridge, partition in copies:
            sent.append((producer.send(messages, key=ingest_key(PT, msg), partition=partition,
                                       value=ingest_value(PT, data, now, bridge)), ingest_key(PT, msg)))
    producer.flush()
    coords = {}
    for future, h in sent:
        meta = future.get(30)
        coords[(meta.partition, meta.offset)] = h
    producer.close()
    return coords


def _forget_commits(checkpoint: Path) -> list[str]:
    """The checkpoint as a query killed after planning batch 0 and before committing it leaves it:
    no commit, no later offsets. Returns the names removed."""
    removed = []
    for f in sorted((checkpoint / "commits").glob("*")) + sorted((checkpoint / "offsets").glob("*")):
        if f.parent.name == "commits" or f.name.lstrip(".").split(".")[0] != "0":
            f.unlink()
            removed.append(f"{f.parent.name}/{f.name}")
    return removed


@pytest.mark.parametrize("trigger", ["microbatch", "realtime"])
def test_a_replayed_batch_is_pushed_once(kafka, spark, tmp_path, trigger):
    from pipeline.filter.criteria import close_indexes
    from pipeline.filter.matching import start_filter_query
    from pipeline.filter.settings import FilterJobSettings

    tag = uuid.uuid4().hex[:8]
    cfg = _settings(kafka, tmp_path, tag, trigger)
    coords = _produce(kafka, cfg)
    settings = FilterJobSettings.from_config(cfg)
    push_topic = settings.push_prefix + "B"
    create_topic(kafka, push_topic, 1)
    checkpoint = tmp_path / "filter-checkpoint"

    def run_until(total: int) -> None:
        query = start_filter_query(spark, settings, query_name=f"replay_{tag}", checkpoint=str(checkpoint))
        try:
            wait_until(lambda: len(consume_all(kafka, push_topic, total, timeout=2)) >= total, 120,
                       f"{total} push records", progress=lambda: query.lastProgress and query.lastProgress["batchId"])
        finally:
            query.stop()
            close_indexes(spark)

    run_until(N + 1)
    first = consume_all(kafka, push_topic, N + 1)
    assert len(first) == N + 1
    print("removed from the checkpoint:", _forget_commits(checkpoint))
    run_until(2 * (N + 1))             # batch or epoch 0 (every record: produced before the start) again
    values = [r.value for r in consume_all(kafka, push_topic, 2 * (N + 1))]
    records = [pr.PushRecord.FromString(v) for v in values]
    replayed = len(records) - (N + 1)
    print(f"push records: first run {N + 1}, replayed {replayed}")
    assert replayed == N + 1

    # every record names its source record, and each partition's records are in offset order
    # within a run
    assert all(r.HasField("source_partition") and r.HasField("source_offset") for r in records)
    assert all(coords[(r.source_partition, r.source_offset)] == r.message_hash for r in records)
    for run in (records[:N + 1], records[N + 1:]):
        for p in (0, 1):
            offsets = [r.source_offset for r in run if r.source_partition == p]
            assert offsets == sorted(offsets)

    # A hash memory far smaller than the replay (64): every replayed record is caught by its
    # source offset. The copy of message 7 relayed by bridge C (the other partition) is caught by
    # the hashes only when fewer than 64 pushes came between the two copies, which depends on how
    # the run interleaved the partitions; with a memory holding the whole run (1,024) it always is.
    for memory in (64, 1024):
        queued, outcomes = _deliver_all(values, memory)
        assert outcomes["replayed"] == replayed, (memory, outcomes)
        assert queued + outcomes["duplicate"] == N + 1, (memory, queued, outcomes)
        if memory > 2 * (N + 1):
            assert queued == N and outcomes["duplicate"] == 1, (memory, queued, outcomes)


def _deliver_all(values: list[bytes], memory: int):
    """The push records through a bridge's `_deliver` (hash memory `memory` per peer): how many
    were queued for the peer, and the outcomes."""
    from ingest.filter.service import FilterService
    from ingest.filter.settings import FilterSettings
    from ingest.filter.state import Change

    svc = FilterService(None, "B", FilterSettings(dedup_per_peer=memory), bootstrap_servers="127.0.0.1:1")
    svc.started_at = 0.0               # a bridge that ran all along (not one restarted since)
    svc.view.apply(PEER, Change(pr.SUBSCRIBE, PT, (CT,), protocol="v2"), time.time())
    send, recv = trio.open_memory_channel(math.inf)
    svc._queues[PEER] = send
    for i in range(0, len(values), 50):
        svc._deliver(values[i:i + 50])
    queued = 0
    while True:
        try:
            recv.receive_nowait()
        except trio.WouldBlock:
            break
        queued += 1
    return queued, svc.push_stats.outcomes
