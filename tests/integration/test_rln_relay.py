"""RLN-v2 on real bridges (real libp2p hosts, the embedded Kafka, zerokit's proofs): two bridges
with memberships of one static group and a relay peer that publishes with proofs of its own.
Every way a message can fail (over the rate limit in one epoch, a forged proof, a stale root, a
wrong epoch, a stale timestamp, no proof, a proof that does not decode) is rejected with its
reason, never reaches Kafka and is never forwarded to the other bridge; valid messages are
stored and relayed by both. Lightpush with and without a proof (ours from the bridge's own
membership, 504 once this epoch's are spent, 420 for a forged one), a REST-style publish of the
bridge's own, and a wrong keystore password that stops `waku-bridge run` with one line."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid

import multiaddr
import pytest
import trio
from libp2p.peer.peerinfo import info_from_p2p_addr

from core.config import REPO_ROOT, load_config
from ingest.lightpush import codec
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.publisher import Publisher
from ingest.rln import keystore, zk
from ingest.rln.errors import RlnRefused
from ingest.rln.keystore import MembershipCredential
from ingest.rln.membership import StaticMembership
from ingest.rln.rules import (
    DEFAULT_RLN_IDENTIFIER,
    HASHED,
    encode_proof,
    epoch_bytes,
    epoch_of,
    external_nullifier,
    signal,
)
from ingest.settings import BridgeSettings
from schemas import lightpush_pb2 as lp
from schemas import pipeline_records_pb2 as pr
from schemas.rln_pb2 import RateLimitProof
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_bridge import consume_all, create_topic
from tests.integration.test_lightpush import send

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not zk.available(), reason="waku_rln not built (scripts/build_rln.sh)")]

SEED = 20261202
SHARD = "/waku/2/rs/1/0"
CT = "/rln-test/1/chat/proto"
LIMIT = 2
PASSWORD = "correct horse"


class Member:
    def __init__(self, index: int, ident: tuple[bytes, bytes, bytes, bytes]) -> None:
        self.index = index
        self.trapdoor, self.nullifier, self.secret, self.commitment = ident
        self.leaf = zk.rate_commitment(self.commitment, LIMIT)

    def credential(self) -> MembershipCredential:
        return MembershipCredential(self.trapdoor, self.nullifier, self.secret, self.commitment, "0", "static",
                                    self.index, LIMIT)


def prove(group: StaticMembership, member: Member, msg: WakuMessage, message_id: int, *,
          epoch: int | None = None) -> WakuMessage:
    path = group.own_path(member.index)
    e = epoch_bytes(epoch_of(msg.timestamp, 600) if epoch is None else epoch)
    en = external_nullifier(e, DEFAULT_RLN_IDENTIFIER, HASHED, zk.poseidon, zk.hash_to_field)
    p, root, sx, sy, n = zk.prove(member.secret, LIMIT, message_id, path.elements, path.bits,
                                  zk.hash_to_field(signal(msg)), en)
    out = WakuMessage()
    out.CopyFrom(msg)
    out.rate_limit_proof = encode_proof(p, root, e, sx, sy, n, DEFAULT_RLN_IDENTIFIER)
    return out


def bridge_config(kafka: str, topic: str, tmp, name: str, members: list[Member], keystore_path: str, index: int,
                  extra: tuple[str, ...] = ()) -> list[str]:
    commitments = ",".join(hex(int.from_bytes(m.leaf, "little")) for m in members)
    return [f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp / name}",
            "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
            "bridge.cluster_id=1", f"bridge.pubsub_topics={SHARD}", "filter.enabled=false",
            "store_service.enabled=false", "rln.enabled=auto", "rln.membership=static",
            f"rln.static_rate_commitments={commitments}", f"rln.keystore_path={keystore_path}",
            f"rln.keystore_password={PASSWORD}", f"rln.membership_index={index}",
            # every message of the test in one epoch whatever the machine's speed: timestamps are
            # fixed at the start, the clock gap covers the run
            "rln.max_clock_gap_s=300", *extra]


def test_rln_relay_two_bridges(kafka, tmp_path):
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    members = [Member(i, zk.identity(rng.randbytes(16))) for i in range(4)]
    a_member, peer, b_member, client = members  # bridge A, the relay peer, bridge B, a light client
    group = StaticMembership(tuple(m.leaf for m in members))
    stale_group = StaticMembership(tuple(m.leaf for m in members[:2]) + (bytes(32),) * 2)
    for m, name in ((a_member, "a.json"), (b_member, "b.json")):
        keystore.save(tmp_path / name, PASSWORD, m.credential(), kdf_iterations=1000)
    topic_a, topic_b = (f"test.rln.{x}.{uuid.uuid4().hex[:8]}" for x in "ab")
    create_topic(kafka, topic_a)
    create_topic(kafka, topic_b)
    metrics_a, metrics_b = BridgeMetrics(), BridgeMetrics()
    a = Bridge(BridgeSettings.from_config(load_config(
        bridge_config(kafka, topic_a, tmp_path, "ka", members, str(tmp_path / "a.json"), 0), environ={})),
        metrics=metrics_a, out=open(os.devnull, "w"))
    b = Bridge(BridgeSettings.from_config(load_config(
        bridge_config(kafka, topic_b, tmp_path, "kb", members, str(tmp_path / "b.json"), 2), environ={})),
        metrics=metrics_b, out=open(os.devnull, "w"))

    t0 = time.time_ns()

    def message(i: int, ts: int = t0) -> WakuMessage:
        return WakuMessage(payload=b"rln-%d" % i, content_topic=CT, timestamp=ts + i)

    valid = [prove(group, peer, message(0), 0), prove(group, peer, message(1), 1)]
    spam = prove(group, peer, message(2), 0)                   # message id 0 again, same epoch
    forged_proof = RateLimitProof.FromString(prove(group, peer, message(3), 1).rate_limit_proof)
    forged_proof.proof = bytes(reversed(forged_proof.proof))
    forged = message(3)
    forged.rate_limit_proof = forged_proof.SerializeToString()
    stale_root = prove(stale_group, peer, message(4), 0)       # a root the group never had
    wrong_epoch = prove(group, peer, message(5), 0, epoch=epoch_of(t0, 600) + 1)
    old_ts = t0 - 1000 * 10**9
    stale_clock = prove(group, peer, message(6, old_ts), 0)
    no_proof = message(7)
    garbage = message(8)
    garbage.rate_limit_proof = b"\x0a\x05short"
    bad = {"rln_spam": spam, "rln_proof": forged, "rln_root": stale_root, "rln_epoch": wrong_epoch,
           "rln_clock": stale_clock, "rln_missing": no_proof, "rln_decode": garbage}
    pushed_with_proof = prove(group, client, message(20), 0)
    forged_push = message(21)
    forged_push.rate_limit_proof = forged.rate_limit_proof
    out: dict = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await nursery.start(b.run)
            a_addr = str(a.addrs[0])
            a_id = info_from_p2p_addr(multiaddr.Multiaddr(a_addr)).peer_id
            relay_peer = Publisher()
            async with relay_peer.running([SHARD]):
                await relay_peer.connect(a_addr)
                await relay_peer.wait_for_mesh(SHARD)
                assert b.host is not None
                from ingest.host import dial
                await dial(b.host, info_from_p2p_addr(multiaddr.Multiaddr(a_addr)), 10)
                with trio.fail_after(30):
                    while not (a.router and len(a.router.mesh.get(SHARD, ())) >= 2):
                        await trio.sleep(0.05)
                for m in valid:
                    await relay_peer.publish(m, SHARD)
                for m in bad.values():
                    await relay_peer.publish(m, SHARD)
                # lightpush to A: a client's own proof, none (A proves: its message id 0), a forged one
                host = relay_peer.host
                answers = []
                for rid, m in (("with-proof", pushed_with_proof), ("no-proof", message(22)), ("forged", forged_push)):
                    r = lp.LightpushResponse.FromString(
                        await send(host, a_id, codec.LIGHTPUSH_V3_CODEC, codec.v3_request(rid, m, SHARD)))
                    answers.append((rid, r.status_code, r.status_desc))
                # A's own publish (REST relay publish's path): its message id 1, the last of the epoch
                own = message(23)
                out["own_peers"] = await a.publish(SHARD, own, own.SerializeToString())
                r = lp.LightpushResponse.FromString(  # nothing left to prove with: 504
                    await send(host, a_id, codec.LIGHTPUSH_V3_CODEC, codec.v3_request("spent", message(24), SHARD)))
                answers.append(("spent", r.status_code, r.status_desc))
                try:
                    await a.publish(SHARD, message(25), message(25).SerializeToString())
                    out["own_spent"] = None
                except RlnRefused as exc:
                    out["own_spent"] = (exc.status, str(exc))
                out["answers"] = answers
                with trio.fail_after(60):  # everything valid reached B through A
                    while metrics_b.value("waku_bridge_accepted_total") < 5:
                        await trio.sleep(0.05)
                await trio.sleep(1.0)  # anything invalid would have arrived by now too
            a.stop()
            b.stop()

    trio.run(main)
    for reason in bad:
        assert metrics_a.value("waku_bridge_rejected_total", reason=reason) == 1, reason
        assert metrics_b.value("waku_bridge_rejected_total", reason=reason) == 0, reason
    assert metrics_a.value("waku_bridge_accepted_total") == 5  # 2 relayed, 2 lightpushed, 1 of its own
    assert [x[:2] for x in out["answers"]] == [("with-proof", 200), ("no-proof", 200), ("forged", 420), ("spent", 504)]
    assert "OUT_OF_RLN_PROOF" in out["answers"][3][2]
    assert out["own_peers"] is not None
    assert out["own_spent"] is not None and out["own_spent"][0] == 500
    stored_a = [pr.IngestRecord.FromString(r.value).message for r in consume_all(kafka, topic_a, 5)]
    stored_b = [pr.IngestRecord.FromString(r.value).message for r in consume_all(kafka, topic_b, 5)]
    want = sorted([b"rln-0", b"rln-1", b"rln-20", b"rln-22", b"rln-23"])
    assert sorted(m.payload for m in stored_a) == want
    assert sorted(m.payload for m in stored_b) == want
    assert all(m.rate_limit_proof for m in stored_a + stored_b)
    assert metrics_a.value("waku_rln_valid_messages_total", shard=SHARD) >= 5


def test_a_wrong_keystore_password_stops_the_bridge_with_one_line(kafka, tmp_path):
    rng = random.Random(SEED)
    m = Member(0, zk.identity(rng.randbytes(16)))
    keystore.save(tmp_path / "k.json", PASSWORD, m.credential(), kdf_iterations=1000)
    args = bridge_config(kafka, "unused", tmp_path, "key", [m], str(tmp_path / "k.json"), 0,
                         ("rln.keystore_password=wrong",))
    cmd = [sys.executable, "-m", "ingest.cli", "run"]
    for a in args:
        cmd += ["--set", a]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    lines = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode == 2, proc.stderr
    assert lines == [f"error: rln: wrong password for rln keystore {tmp_path / 'k.json'}"], proc.stderr
    assert "Traceback" not in proc.stderr
    missing = subprocess.run(cmd[:-2] + ["--set", f"rln.keystore_path={tmp_path / 'nope.json'}"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and f"rln keystore {tmp_path / 'nope.json'} not found" in missing.stderr
