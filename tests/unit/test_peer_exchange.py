"""Peer exchange server: the pure choice of ENRs, the codec, the service's answers (429 over the
rate, 400 on bytes that are no PeerExchangeRPC), and static peers given as ENRs."""
from __future__ import annotations

import random

import multiaddr

from core.config import load_config
from ingest import enr
from ingest.enr import RELAY, WakuEnrFields
from ingest.peer_exchange import codec
from ingest.peer_exchange.protocol import MAX_PEERS, Candidate, choose
from ingest.peer_exchange.service import PeerExchangeService
from ingest.settings import BridgeSettings
from schemas import peer_exchange_pb2 as pb

SEED = 39


def record(i: int, cluster: int = 1) -> enr.Record:
    fields = WakuEnrFields((multiaddr.Multiaddr(f"/ip4/10.0.{i // 250}.{i % 250 + 1}/tcp/60000"),), RELAY,
                           cluster, (0,))
    return enr.decode(enr.build((i + 1).to_bytes(32, "big"), 1, fields))


def candidates(n: int, first: int = 0, **kw) -> list[Candidate]:
    out = []
    for i in range(first, first + n):
        r = record(i, **kw)
        out.append(Candidate(r.peer_id().to_base58(), r, True))
    return out


def test_choose_at_most_what_was_asked_and_at_most_60():
    print("seed", SEED)
    rng = random.Random(SEED)
    pool = candidates(80)
    assert len(choose(5, pool, 1, "me", rng)) == 5
    picked = choose(1000, pool, 1, "me", rng)
    assert len(picked) == MAX_PEERS and len(set(picked)) == MAX_PEERS
    assert choose(0, pool, 1, "me", rng) == []
    assert len(choose(100, pool[:3], 1, "me", rng)) == 3


def test_choose_skips_ourselves_the_disconnected_and_other_clusters():
    rng = random.Random(SEED)
    ours, other = candidates(3), candidates(2, first=3, cluster=2)
    me = ours[0].peer_id
    gone = Candidate(ours[2].peer_id, ours[2].record, False)
    got = choose(10, [ours[0], ours[1], gone, *other], 1, me, rng)
    assert got == [ours[1].record.raw]
    assert len(choose(10, [ours[1], *other], 0, me, rng)) == 3  # cluster 0: nothing checked


def test_codec_round_trip():
    assert codec.decode_query(codec.encode_query(7)) == 7
    raws = [r.record.raw for r in candidates(2)]
    assert codec.decode_response(codec.encode_response(raws)) == (codec.SUCCESS, raws)
    rpc = pb.PeerExchangeRPC.FromString(codec.encode_response([], codec.TOO_MANY_REQUESTS))
    assert rpc.response.status_code == 429 and not rpc.response.HasField("status_desc")


def test_service_answers_and_limits():
    pool = candidates(4)
    svc = PeerExchangeService(None, "me", 1, lambda: pool, per_s=1.0, rng=random.Random(SEED))  # type: ignore[arg-type]
    status, out = svc.answer(codec.encode_query(2))
    assert status == codec.SUCCESS and len(codec.decode_response(out)[1]) == 2
    status, out = svc.answer(codec.encode_query(2))  # the burst (1) is spent
    assert status == codec.TOO_MANY_REQUESTS and codec.decode_response(out) == (429, [])
    # nwaku's px:5/1s: 5 at once, then 5 a second for the node; a peer gets 75 % of 10 s of it.
    clock = [0.0]
    nwaku = PeerExchangeService(None, "me", 1, lambda: pool, per_s=5.0, clock=lambda: clock[0])  # type: ignore[arg-type]
    codes = [nwaku.answer(codec.encode_query(1), "a")[0] for _ in range(6)]
    assert codes == [200] * 5 + [429]
    clock[0] = 100.0  # both buckets full: the node's 50, peer a's 37
    codes = [nwaku.answer(codec.encode_query(1), "a")[0] for _ in range(40)]
    assert codes.count(200) == 37 and codes[-1] == 429
    assert nwaku.answer(codec.encode_query(1), "b")[0] == 200  # another peer: the node's bucket still has some
    unlimited = PeerExchangeService(None, "me", 1, lambda: pool, per_s=0)  # type: ignore[arg-type]
    assert unlimited.answer(b"\xff\xff\xff")[0] == codec.BAD_REQUEST
    assert all(unlimited.answer(codec.encode_query(1))[0] == codec.SUCCESS for _ in range(20))


def test_static_peers_may_be_enrs(tmp_path):
    r = record(7)
    cfg = load_config([f"bridge.key_file={tmp_path / 'k'}",
                       f"bridge.static_peers=/ip4/127.0.0.1/tcp/1/p2p/{r.peer_id()},{r.text()}"], environ={})
    s = BridgeSettings.from_config(cfg)
    assert s.static_enrs == (r.raw,)
    assert [str(p.peer_id) for p in s.static_peers] == [str(r.peer_id())] * 2
    assert [str(a) for a in s.static_peers[1].addrs] == ["/ip4/10.0.0.8/tcp/60000"]
