"""The pusher's de-duplication of a filter job's replay (issue 37: after a Spark worker was killed,
the job re-emitted up to an epoch of push records, more than the 4096 hashes kept per peer, and
go-waku clients got 4,179 pushes twice). Per (peer, source partition of waku.messages) the highest
source offset admitted is kept; a record at or below it is a replay. The hash memory stays for a
message relayed by two bridges and for records without source coordinates."""
from __future__ import annotations

import math
import random
import time

import trio

from ingest.filter.pusher import DUPLICATE, REPLAYED, Dedup
from ingest.filter.settings import FilterSettings
from ingest.filter.state import Change
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage

PT = "/waku/2/rs/1/0"
CT = "/a/1/x/proto"


def h(i: int) -> bytes:
    return i.to_bytes(32, "big")


def test_a_replay_beyond_the_hash_memory_is_dropped():
    d = Dedup(4096)
    for off in range(10_000):
        assert d.admit("p", h(off), 0, off) is None
    # the job restarts 5,000 records back: every hash but the last 4,096 is forgotten
    assert [d.admit("p", h(off), 0, off) for off in range(5_000, 10_000)] == [REPLAYED] * 5_000
    assert d.admit("p", h(10_000), 0, 10_000) is None      # and goes on from there
    # the same replay without coordinates (hashes only) pushes what the hashes forgot
    hashes_only = Dedup(4096)
    for off in range(10_000):
        hashes_only.admit("p", h(off))
    again = [hashes_only.admit("p", h(off)) for off in range(5_000, 10_000)]
    # all of it: each re-admitted old hash evicts the next one the replay is about to bring
    assert again.count(None) == 5_000


def test_partitions_interleave_in_any_order():
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    d = Dedup(16)
    next_offset = dict.fromkeys(range(4), 0)
    sent = []
    for _ in range(2_000):  # a peer's records of 4 source partitions, each partition in order
        p = rng.randrange(4)
        off = next_offset[p]
        next_offset[p] += rng.randrange(1, 5)     # other peers' records in between
        sent.append((p, off))
        assert d.admit("peer", h(p * 10**6 + off), p, off) is None
    # a replay of every partition, interleaved differently: all of it dropped
    rng.shuffle(sent)
    for p, off in sorted(sent, key=lambda r: (r[1], r[0])):
        assert d.admit("peer", h(p * 10**6 + off), p, off) == REPLAYED


def test_two_bridges_relaying_one_message_push_it_once():
    """One message, two source records (one per relaying bridge): the hashes catch the second;
    the mark of its partition still moves (the records before it went by in order)."""
    d = Dedup(4096)
    assert d.admit("p", h(1), 0, 10) is None
    assert d.admit("p", h(1), 3, 7) == DUPLICATE
    assert d.admit("p", h(2), 3, 6) == REPLAYED
    assert d.admit("p", h(2), 3, 8) is None


def test_records_without_coordinates_fall_back_to_hashes():
    d = Dedup(2)
    assert d.admit("p", h(1)) is None and d.admit("p", h(1)) == DUPLICATE
    assert d.admit("p", h(2), -1, -1) is None and d.admit("p", h(2)) == DUPLICATE
    assert d.admit("p", h(3)) is None and d.admit("p", h(1)) is None    # bounded: h(1) forgotten
    # unknown coordinates neither set nor consult a mark
    assert d.admit("p", h(9), 0, 5) is None
    assert d.admit("p", h(4)) is None and d.admit("p", h(5), -1, 3) is None


def test_marks_are_per_peer_and_forgotten_with_the_peer():
    d = Dedup(4096)
    assert d.admit("a", h(1), 0, 100) is None
    assert d.admit("b", h(2), 0, 50) is None                 # another peer, its own mark
    assert d.admit("a", h(3), 0, 50) == REPLAYED
    assert d.admit("a", h(3), 1, 50) is None                 # another partition
    d.forget("a")
    assert d.admit("a", h(1), 0, 100) is None                # marks and hashes gone
    assert d.admit("b", h(4), 0, 50) == REPLAYED


def _records(peer: str, n: int, partitions: int, seed: int, with_source: bool = True) -> list[bytes]:
    """A peer's push records as the filter job writes them: each source partition in offset order,
    partitions interleaved at random; each message distinct."""
    rng = random.Random(seed)
    offsets = dict.fromkeys(range(partitions), 0)
    out = []
    for i in range(n):
        p = rng.randrange(partitions)
        offsets[p] += rng.randrange(1, 3)
        msg = WakuMessage(payload=i.to_bytes(4, "big"), content_topic=CT, timestamp=i)
        rec = pr.PushRecord(peer_id=peer, pubsub_topic=PT, message=msg, message_hash=h(i), protocol="v2",
                            received_time=time.time())
        if with_source:
            rec.source_partition, rec.source_offset = p, offsets[p]
        out.append(rec.SerializeToString())
    return out


def _service(dedup_per_peer: int = 4096):
    from ingest.filter.service import FilterService

    svc = FilterService(None, "B", FilterSettings(dedup_per_peer=dedup_per_peer), bootstrap_servers="127.0.0.1:1")
    svc.view.apply("peerA", Change(pr.SUBSCRIBE, PT, (CT,)), time.time())
    send, recv = trio.open_memory_channel(math.inf)
    svc._queues["peerA"] = send   # the peer's PeerPusher's queue, read below
    return svc, recv


def _queued(recv) -> int:
    n = 0
    while True:
        try:
            recv.receive_nowait()
        except trio.WouldBlock:
            return n
        n += 1


def test_deliver_pushes_an_epoch_replay_once():
    """Real PushRecord bytes through the bridge's `_deliver`: 6,000 records of 4 partitions, then
    the job replays the last 5,000 (more than the 4,096 hashes) in its own interleaving."""
    seed = random.randrange(2**32)
    print("seed", seed)
    svc, recv = _service()
    records = _records("peerA", 6_000, 4, seed)
    for i in range(0, len(records), 500):   # the consumer's batches
        svc._deliver(records[i:i + 500])
    assert _queued(recv) == 6_000
    replay = records[1_000:]
    rng = random.Random(seed)
    by_partition: dict[int, list[bytes]] = {}
    for r in replay:
        by_partition.setdefault(pr.PushRecord.FromString(r).source_partition, []).append(r)
    reordered = []
    while by_partition:    # each partition still in order, partitions interleaved anew
        p = rng.choice(sorted(by_partition))
        reordered.append(by_partition[p].pop(0))
        if not by_partition[p]:
            del by_partition[p]
    svc._deliver(reordered)
    assert _queued(recv) == 0
    assert svc.push_stats.outcomes["replayed"] == 5_000


def test_deliver_without_source_coordinates_keeps_hash_dedup():
    """Records of a shuffled join (no coordinates): a replay within the hash memory is dropped
    as duplicate; beyond it, pushed again (the limit the coordinates lift)."""
    svc, recv = _service(dedup_per_peer=100)
    records = _records("peerA", 300, 2, 7, with_source=False)
    svc._deliver(records)
    assert _queued(recv) == 300
    svc._deliver(records[-100:])
    assert _queued(recv) == 0 and svc.push_stats.outcomes["duplicate"] == 100
    svc._deliver(records[:100])
    assert _queued(recv) == 100


def test_deliver_fans_a_record_out_to_each_of_its_targets():
    """A fan-out PushRecord (the resident criteria's: one per message and bridge) is pushed to
    each subscribed target once, with the same push bytes; a target not subscribed here is
    counted, and a replay of the records is dropped per target by its source offset."""
    from ingest.filter.service import FilterService

    svc = FilterService(None, "B", FilterSettings(), bootstrap_servers="127.0.0.1:1")
    svc.started_at = 0.0
    queues = {}
    for peer in ("peerA", "peerB"):
        svc.view.apply(peer, Change(pr.SUBSCRIBE, PT, (CT,)), time.time())
        send, recv = trio.open_memory_channel(math.inf)
        svc._queues[peer] = send
        queues[peer] = recv
    records = []
    for i in range(20):
        msg = WakuMessage(payload=i.to_bytes(4, "big"), content_topic=CT, timestamp=i)
        rec = pr.PushRecord(pubsub_topic=PT, message=msg, message_hash=h(i), received_time=time.time(),
                            source_partition=i % 2, source_offset=i)
        for peer in ("peerA", "peerC", "peerB"):
            rec.targets.add(peer_id=peer, protocol="v2")
        records.append(rec.SerializeToString())
    svc._deliver(records)
    got = {peer: [] for peer in queues}
    for peer, recv in queues.items():
        while True:
            try:
                got[peer].append(recv.receive_nowait().data)
            except trio.WouldBlock:
                break
    assert len(got["peerA"]) == len(got["peerB"]) == 20
    assert all(a is b for a, b in zip(got["peerA"], got["peerB"], strict=True))  # built once a message
    assert svc.push_stats.outcomes["not_subscribed"] == 20
    svc._deliver(records)
    assert svc.push_stats.outcomes["replayed"] == 40
    assert all(_queued(recv) == 0 for recv in queues.values())
