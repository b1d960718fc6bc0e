"""RLN-v2 relay rules as pure functions: nwaku's encodings and the order of its checks
(`waku/waku_rln_relay/rln_relay.nim` `validateMessage`, nwaku 0.38), without I/O or clocks.

    proof, reason = precheck(msg, now_s, roots, rules)    # decode, clock, epoch, root
    ... zk verification (ingest/rln/zk.py, off the trio loop) ...
    log.spam(proof)                                       # a nullifier seen in that epoch

Encodings (the code, not 17/WAKU2-RLN-RELAY's text, is the reference):
- the signal: payload ‖ content topic (UTF-8) ‖ timestamp as a uint64, 8 bytes little-endian;
  x = keccak256(signal) reduced little-endian modulo BN254's order (zerokit's hash_to_field_le);
- the epoch: floor(timestamp_s / epoch_s) as a uint64 little-endian, zero-padded to 32 bytes;
- the external nullifier: Poseidon(keccak256(epoch), keccak256(rln_identifier)), each hash
  reduced to the field (nwaku >= 0.38, PR #3660: rule "hashed"), or Poseidon(epoch,
  rln_identifier) (nwaku <= 0.37: rule "plain"). The two never verify each other's proofs.
"""
from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from schemas.rln_pb2 import RateLimitProof
from schemas.waku_message_pb2 import WakuMessage

DEFAULT_RLN_IDENTIFIER = b"rln/waku-rln-relay/v2.0.0".ljust(32, b"\0")
PROOF_BYTES = 128
FIELD_BYTES = 32
HASHED = "hashed"   # nwaku >= 0.38
PLAIN = "plain"     # nwaku <= 0.37
NULLIFIER_RULES = (HASHED, PLAIN)


class RlnReject(enum.StrEnum):
    """Why a message failed RLN validation (the relay's `reason` labels; every one is a
    gossipsub REJECT, as nwaku: invalid and spam are never IGNOREd)."""

    MISSING = "rln_missing"    # no rate_limit_proof
    DECODE = "rln_decode"      # not a RateLimitProof, or a field of the wrong length
    CLOCK = "rln_clock"        # |now - timestamp| above the clock gap
    EPOCH = "rln_epoch"        # the proof's epoch is not the timestamp's
    ROOT = "rln_root"          # the Merkle root is not in the acceptable window
    PROOF = "rln_proof"        # the zkSNARK (or the signal it binds) does not verify
    SPAM = "rln_spam"          # a nullifier already seen in that epoch: over the rate limit


@dataclass(frozen=True)
class Rules:
    """The network's RLN parameters (The Waku Network's by default)."""
    epoch_s: int = 600
    max_clock_gap_s: float = 20.0
    rln_identifier: bytes = DEFAULT_RLN_IDENTIFIER
    nullifier_rule: str = HASHED

    def __post_init__(self) -> None:
        if self.epoch_s <= 0:
            raise ValueError("epoch_s must be positive")
        if len(self.rln_identifier) != FIELD_BYTES:
            raise ValueError("rln_identifier must be 32 bytes")
        if self.nullifier_rule not in NULLIFIER_RULES:
            raise ValueError(f"nullifier_rule must be one of {', '.join(NULLIFIER_RULES)}")


def rln_identifier(text: str) -> bytes:
    """An application identifier as nwaku holds it: its ASCII bytes zero-padded to 32."""
    raw = text.encode()
    if len(raw) > FIELD_BYTES:
        raise ValueError(f"rln identifier {text!r} is longer than 32 bytes")
    return raw.ljust(FIELD_BYTES, b"\0")


def signal(msg: WakuMessage) -> bytes:
    """The bytes a proof binds: payload ‖ content topic ‖ timestamp (uint64 LE)."""
    return msg.payload + msg.content_topic.encode() + (msg.timestamp & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little")


def epoch_of(timestamp_ns: int, epoch_s: int) -> int:
    """The epoch of a message timestamp (ns), as nwaku's calcEpoch: floor(t_s / epoch_s)."""
    return int((timestamp_ns / 1e9) / epoch_s)


def epoch_bytes(epoch: int) -> bytes:
    return epoch.to_bytes(8, "little").ljust(FIELD_BYTES, b"\0")


def epoch_value(raw: bytes) -> int:
    return int.from_bytes(raw[:8], "little")


Poseidon = Callable[[Sequence[bytes]], bytes]
HashToField = Callable[[bytes], bytes]


def external_nullifier(epoch: bytes, identifier: bytes, rule: str, poseidon: Poseidon,
                       hash_to_field: HashToField) -> bytes:
    """The external nullifier of an epoch and application under `rule` (HASHED or PLAIN)."""
    if rule == HASHED:
        return poseidon([hash_to_field(epoch), hash_to_field(identifier)])
    if rule == PLAIN:
        return poseidon([epoch, identifier])
    raise ValueError(f"unknown external nullifier rule {rule!r}")


def decode_proof(raw: bytes) -> RateLimitProof | None:
    """A RateLimitProof with every field of its length, or None."""
    proof = RateLimitProof()
    try:
        proof.ParseFromString(raw)
    except DecodeError:
        return None
    if len(proof.proof) != PROOF_BYTES:
        return None
    for field in (proof.merkle_root, proof.epoch, proof.share_x, proof.share_y, proof.nullifier,
                  proof.rln_identifier):
        if len(field) != FIELD_BYTES:
            return None
    return proof


def precheck(msg: WakuMessage, now_s: float, roots: Sequence[bytes] | frozenset[bytes],
             rules: Rules) -> tuple[RateLimitProof | None, RlnReject | None]:
    """nwaku's checks before the zkSNARK, in its order: a proof that decodes, a timestamp
    within the clock gap of now, the proof's epoch equal to the timestamp's, the root in the
    acceptable window. (proof, None) when the zk check is next, else (None, reason)."""
    if not msg.rate_limit_proof:
        return None, RlnReject.MISSING
    proof = decode_proof(msg.rate_limit_proof)
    if proof is None:
        return None, RlnReject.DECODE
    message_s = msg.timestamp / 1e9
    if int(abs(now_s - message_s)) > rules.max_clock_gap_s:  # nwaku truncates the gap to seconds
        return None, RlnReject.CLOCK
    if proof.epoch != epoch_bytes(epoch_of(msg.timestamp, rules.epoch_s)):
        return None, RlnReject.EPOCH
    if proof.merkle_root not in roots:
        return None, RlnReject.ROOT
    return proof, None


class NullifierLog:
    """The nullifiers of valid messages per epoch (nwaku's nullifierLog): a second message
    with a nullifier seen in its epoch is spam. Epochs more than `max_epoch_gap` from the
    current one are forgotten (nwaku's clearNullifierLog)."""

    def __init__(self, max_epoch_gap: int = 1) -> None:
        self.max_epoch_gap = max(1, max_epoch_gap)
        self._epochs: OrderedDict[int, set[bytes]] = OrderedDict()

    def seen(self, epoch: int, nullifier: bytes) -> bool:
        return nullifier in self._epochs.get(epoch, ())

    def record(self, epoch: int, nullifier: bytes) -> None:
        self._epochs.setdefault(epoch, set()).add(nullifier)

    def discard(self, epoch: int, nullifier: bytes) -> None:
        self._epochs.get(epoch, set()).discard(nullifier)

    def clear_old(self, current_epoch: int) -> None:
        for epoch in [e for e in self._epochs if abs(e - current_epoch) >= self.max_epoch_gap + 1]:
            del self._epochs[epoch]

    def __len__(self) -> int:
        return sum(len(s) for s in self._epochs.values())


def max_epoch_gap(rules: Rules) -> int:
    """nwaku's rlnMaxEpochGap: the epochs a clock gap can span, at least 1."""
    return max(1, int(-(-rules.max_clock_gap_s // rules.epoch_s)))


def encode_proof(proof: bytes, root: bytes, epoch: bytes, share_x: bytes, share_y: bytes, nullifier: bytes,
                 identifier: bytes) -> bytes:
    """The RateLimitProof bytes of WakuMessage.rate_limit_proof (nwaku's field order)."""
    return RateLimitProof(proof=proof, merkle_root=root, epoch=epoch, share_x=share_x, share_y=share_y,
                          nullifier=nullifier, rln_identifier=identifier).SerializeToString()
