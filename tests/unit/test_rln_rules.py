"""RLN-v2: zerokit's own vectors through our binding (native/waku_rln), nwaku's encodings byte
for byte (signal, epoch, identifier, both external-nullifier rules, RateLimitProof), nwaku's
check order, and proofs made and verified by zerokit with every way a message can fail."""
from __future__ import annotations

import random

import pytest

from ingest.relay.codec import Reject
from ingest.rln import zk
from ingest.rln.membership import RootWindow, StaticMembership, index_bits
from ingest.rln.rules import (
    DEFAULT_RLN_IDENTIFIER,
    HASHED,
    PLAIN,
    NullifierLog,
    RlnReject,
    Rules,
    decode_proof,
    encode_proof,
    epoch_bytes,
    epoch_of,
    external_nullifier,
    max_epoch_gap,
    precheck,
    signal,
)
from schemas.rln_pb2 import RateLimitProof
from schemas.waku_message_pb2 import WakuMessage

pytestmark = pytest.mark.skipif(not zk.available(), reason="waku_rln not built (scripts/build_rln.sh)")

SEED = 20261201
FIELD = 21888242871839275222246405745257275088548364400416034343698204186575808495617


def le(value: int) -> bytes:
    return value.to_bytes(32, "little")


def uint(raw: bytes) -> int:
    return int.from_bytes(raw, "little")


# -- zerokit's vectors (rln 3.0.0's tests) ------------------------------------------------------

def test_poseidon_is_circoms():
    # circomlib's poseidon([1, 2]) (t = 3), the value every Poseidon implementation is checked by
    assert uint(zk.poseidon([le(1), le(2)])) == 0x115CC0F5E7D690413DF64C6B9662E9CF2A3617F2743245519E19607A4417189A


def test_seeded_identity_is_zerokits():
    # rln/tests/keygen.rs test_extended_seeded_keygen
    trapdoor, nullifier, secret, commitment = zk.identity(bytes(range(10)))
    assert uint(trapdoor) == 0x766CE6C7E7A01BDF5B3F257616F603918C30946FA23480F2859C597817E6716
    assert uint(nullifier) == 0x1F18714C7BC83B5BCA9E89D404CF6F2F585BC4C0F7ED8B53742B7E2B298F50B4
    assert uint(secret) == 0x2ACA62AAA7ABAF3686FFF2CAF00F55AB9462DC12DB5B5D4BCF3994E671F8E521
    assert uint(commitment) == 0x68B66AA0A8320D2E56842581553285393188714C48F9B17ACD198B4F1734C5C
    assert secret == zk.poseidon([trapdoor, nullifier]) and commitment == zk.poseidon([secret])


def test_merkle_tree_is_zerokits():
    # rln/tests/proof.rs test_merkle_proof_hardcoded: leaf 3 of a depth-20 tree
    secret = zk.hash_to_field(b"test-merkle-proof")
    rate = zk.rate_commitment(zk.poseidon([secret]), 100)
    tree = zk.merkle_tree(20)
    tree.set(3, rate)
    limbs = (4939322235247991215, 5110804094006647505, 4427606543677101242, 910933464535675827)
    assert uint(bytes(tree.root())) == sum(limb << (64 * i) for i, limb in enumerate(limbs))
    elements, bits = tree.proof(3)
    assert [uint(bytes(e)) for e in elements[:3]] == [
        0, 0x2098F5FB9E239EAB3CEAC3F27B81E481DC3124D55FFED523A839EE8446B64864,
        0x1069673DCDB12263DF301A6FF584A7EC261A44CB9DC68DF067A4774460B1F1E1]
    assert uint(bytes(elements[19])) == 0x1830EE67B5FB554AD5F63D4388800E1CFE78E310697D46E43C9CE36134F72CCA
    assert bytes(bits) == bytes([1, 1] + [0] * 18) == index_bits(3)


def test_hash_to_field_is_keccak_reduced_little_endian():
    from Crypto.Hash import keccak
    for data in (b"", b"RLN is awesome", bytes(range(256))):
        digest = keccak.new(digest_bits=256, data=data).digest()
        assert uint(zk.hash_to_field(data)) == uint(digest) % FIELD


# -- nwaku's encodings ----------------------------------------------------------------------------

def test_default_identifier_is_nwakus():
    # waku_rln_relay/constants.nim DefaultRlnIdentifier
    assert list(DEFAULT_RLN_IDENTIFIER) == [114, 108, 110, 47, 119, 97, 107, 117, 45, 114, 108, 110, 45, 114,
                                            101, 108, 97, 121, 47, 118, 50, 46, 48, 46, 48] + [0] * 7


def test_signal_epoch_and_external_nullifiers():
    msg = WakuMessage(payload=b"\x01\x02", content_topic="/app/1/chat/proto", timestamp=1_700_000_123_456_789_000)
    # toRLNSignal: payload ‖ content topic ‖ timestamp as uint64 little-endian
    assert signal(msg) == b"\x01\x02/app/1/chat/proto" + (1_700_000_123_456_789_000).to_bytes(8, "little")
    # calcEpoch + toEpoch: floor(t / 600) as uint64 LE in 32 bytes
    assert epoch_of(msg.timestamp, 600) == 1_700_000_123 // 600
    assert epoch_bytes(2833333) == (2833333).to_bytes(8, "little") + bytes(24)
    e = epoch_bytes(2833333)
    hashed = external_nullifier(e, DEFAULT_RLN_IDENTIFIER, HASHED, zk.poseidon, zk.hash_to_field)
    plain = external_nullifier(e, DEFAULT_RLN_IDENTIFIER, PLAIN, zk.poseidon, zk.hash_to_field)
    assert hashed == zk.poseidon([zk.hash_to_field(e), zk.hash_to_field(DEFAULT_RLN_IDENTIFIER)])
    assert plain == zk.poseidon([e, DEFAULT_RLN_IDENTIFIER])
    assert hashed != plain


def test_rate_limit_proof_bytes_are_nwakus_field_numbers():
    parts = [bytes([i]) * n for i, n in ((1, 128), (2, 32), (3, 32), (4, 32), (5, 32), (6, 32), (7, 32))]
    raw = encode_proof(*parts)
    # proto3 bytes fields 1..7 in order: tag (field << 3 | 2), length, bytes (nwaku's write3 order)
    expected = b"".join(bytes([(f << 3) | 2]) + (bytes([0x80, 0x01]) if len(p) == 128 else bytes([len(p)])) + p
                        for f, p in enumerate(parts, 1))
    assert raw == expected
    decoded = decode_proof(raw)
    assert decoded is not None and decoded.proof == parts[0] and decoded.rln_identifier == parts[6]
    assert decode_proof(b"\xff\xff") is None
    assert decode_proof(RateLimitProof(proof=bytes(127)).SerializeToString()) is None


def test_reasons_are_relay_reasons():
    assert {r.value for r in RlnReject} <= {r.value for r in Reject}


def test_root_window_holds_nwakus_count():
    w = RootWindow(50)
    for i in range(60):
        w.add(le(i))
        w.add(le(i))  # the same root twice: one entry
    assert len(w) == 51 and le(9) in w.roots and le(8) not in w.roots


def test_nullifier_log_keeps_the_epochs_a_clock_gap_spans():
    log = NullifierLog(max_epoch_gap(Rules()))
    log.record(10, b"n")
    assert log.seen(10, b"n") and not log.seen(11, b"n")
    log.clear_old(11)
    assert log.seen(10, b"n")
    log.clear_old(12)
    assert not log.seen(10, b"n")
    log.record(12, b"m")
    log.discard(12, b"m")  # a message Kafka did not take: its proof may come again
    assert not log.seen(12, b"m")


# -- proofs end to end ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def group():
    """A static group of 3 members (limit 2 each); member 1's secret."""
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    ids = [zk.identity(rng.randbytes(16)) for _ in range(3)]
    leaves = tuple(zk.rate_commitment(c, 2) for _, _, _, c in ids)
    return StaticMembership(leaves), ids[1][2]


def prove(group, msg: WakuMessage, message_id: int = 0, rule: str = HASHED, epoch: int | None = None) -> WakuMessage:
    membership, secret = group
    path = membership.own_path(1)
    e = epoch_bytes(epoch_of(msg.timestamp, 600) if epoch is None else epoch)
    en = external_nullifier(e, DEFAULT_RLN_IDENTIFIER, rule, zk.poseidon, zk.hash_to_field)
    p, root, sx, sy, n = zk.prove(secret, 2, message_id, path.elements, path.bits, zk.hash_to_field(signal(msg)), en)
    out = WakuMessage()
    out.CopyFrom(msg)
    out.rate_limit_proof = encode_proof(p, root, e, sx, sy, n, DEFAULT_RLN_IDENTIFIER)
    return out


def verdict(group, msg: WakuMessage, now: float, rule: str = HASHED) -> str:
    rules = Rules(nullifier_rule=rule)
    proof, reason = precheck(msg, now, group[0].roots, rules)
    if reason is not None:
        return reason.value
    assert proof is not None
    en = external_nullifier(proof.epoch, proof.rln_identifier, rule, zk.poseidon, zk.hash_to_field)
    return zk.verify(proof.proof, proof.merkle_root, en, zk.hash_to_field(signal(msg)), proof.share_x,
                     proof.share_y, proof.nullifier, ())


def test_a_proof_verifies_and_every_alteration_fails_in_nwakus_order(group):
    now = 1_800_000_000.0
    msg = WakuMessage(payload=b"hello", content_topic="/app/1/chat/proto", timestamp=int(now * 1e9))
    good = prove(group, msg)
    assert verdict(group, good, now) == "valid"
    assert verdict(group, msg, now) == "rln_missing"
    bad = WakuMessage()
    bad.CopyFrom(good)
    bad.rate_limit_proof = b"\x0a\x03abc"
    assert verdict(group, bad, now) == "rln_decode"
    assert verdict(group, good, now + 21) == "rln_clock"
    assert verdict(group, good, now - 20.9) == "valid"  # nwaku truncates the gap to whole seconds
    assert verdict(group, prove(group, msg, epoch=epoch_of(msg.timestamp, 600) - 1), now) == "rln_epoch"
    other = StaticMembership(group[0].leaves[:2])
    assert verdict((other, group[1]), good, now) == "rln_root"
    changed = WakuMessage()
    changed.CopyFrom(good)
    changed.payload = b"hellO"
    assert verdict(group, changed, now) == "signal"       # share_x is not this message's x
    forged = RateLimitProof.FromString(good.rate_limit_proof)
    forged.proof = bytes(reversed(forged.proof))
    f = WakuMessage()
    f.CopyFrom(good)
    f.rate_limit_proof = forged.SerializeToString()
    assert verdict(group, f, now) == "proof"


def test_the_two_external_nullifier_rules_do_not_verify_each_other(group):
    now = 1_800_000_000.0
    msg = WakuMessage(payload=b"x", content_topic="/app/1/chat/proto", timestamp=int(now * 1e9))
    old = prove(group, msg, rule=PLAIN)
    assert verdict(group, old, now, PLAIN) == "valid"
    assert verdict(group, old, now, HASHED) == "proof"
    assert verdict(group, prove(group, msg, rule=HASHED), now, PLAIN) == "proof"


def test_one_message_id_twice_in_an_epoch_gives_one_nullifier(group):
    now = 1_800_000_000.0
    a = prove(group, WakuMessage(payload=b"a", content_topic="/app/1/chat/proto", timestamp=int(now * 1e9)), 0)
    b = prove(group, WakuMessage(payload=b"b", content_topic="/app/1/chat/proto", timestamp=int(now * 1e9) + 1), 0)
    c = prove(group, WakuMessage(payload=b"c", content_topic="/app/1/chat/proto", timestamp=int(now * 1e9) + 2), 1)
    na, nb, nc = (RateLimitProof.FromString(m.rate_limit_proof).nullifier for m in (a, b, c))
    assert na == nb != nc
    with pytest.raises(ValueError, match="witness"):  # message id 2 of a limit of 2: no proof
        prove(group, WakuMessage(payload=b"d", content_topic="/x/1/y/z", timestamp=int(now * 1e9)), 2)


def test_the_verifier_threads_give_zerokits_verdicts_and_survive_a_cancelled_caller(group):
    """zk.Verifier (the bridge's path) against zk.verify inline, on a valid and a forged proof;
    a caller cancelled mid-verification leaves the verifier serving the next ones."""
    import trio

    from ingest.rln.service import ExternalNullifiers
    now = 1_800_000_000.0
    good = prove(group, WakuMessage(payload=b"v", content_topic="/app/1/chat/proto", timestamp=int(now * 1e9)))
    proof = decode_proof(good.rate_limit_proof)
    assert proof is not None
    ens = ExternalNullifiers(HASHED)
    en = ens(proof.epoch, proof.rln_identifier)
    assert en == external_nullifier(proof.epoch, proof.rln_identifier, HASHED, zk.poseidon, zk.hash_to_field)
    assert ens(proof.epoch, proof.rln_identifier) is en  # once an epoch
    args = (proof.proof, proof.merkle_root, en, zk.hash_to_field(signal(good)), proof.share_x, proof.share_y,
            proof.nullifier)
    forged = (bytes(reversed(proof.proof)),) + args[1:]
    verifier = zk.Verifier(1)

    async def main() -> list[str]:
        with trio.move_on_after(0):  # cancelled before its verdict comes back
            await verifier.verify(*args)
        return [await verifier.verify(*a) for a in (args, forged, args)]
    assert trio.run(main) == [zk.verify(*args, ()), zk.verify(*forged, ()), "valid"] == ["valid", "proof", "valid"]

    async def many() -> list[str]:
        # more callers at once than threads, valid and forged interleaved: each gets its own verdict
        verdicts: list[str] = [""] * 6

        async def one(i: int) -> None:
            verdicts[i] = await verifier.verify(*(forged if i % 2 else args))
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)
        return verdicts
    assert trio.run(many) == ["valid", "proof"] * 3  # a second trio run: its own inbox
    with pytest.raises(ValueError, match="external_nullifier"):  # a malformed input is refused at once
        trio.run(verifier.verify, *args[:2], b"short", *args[3:])
    with pytest.raises(ValueError):
        zk.Verifier(0)
