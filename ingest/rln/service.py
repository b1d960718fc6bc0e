"""RLN relay on the bridge: validation of every message on the topics where RLN is on, proofs
for what the node publishes itself and for light clients' pushes, the membership kept fresh.

    rln = RlnRelay.open(settings, registry)    # keystore, membership, zk key; one-line RlnError
    nursery.start_soon(rln.run)                # membership polling (chain)
    reason = await rln.validate(topic, msg)    # None: valid (its nullifier recorded)
    msg = await rln.attach(msg)                # a proof from our membership (OutOfProofs)

The checks are nwaku's, in its order (ingest/rln/rules.py); the zkSNARK verification runs in
one of zk.Verifier's native threads, which never take the GIL (zerokit through waku_rln), so the
relay keeps reading its other peers meanwhile.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ingest.rln import keystore, zk
from ingest.rln.chain import ChainError, first_chain
from ingest.rln.errors import OutOfProofs, RlnError
from ingest.rln.keystore import KeystoreError, MembershipCredential
from ingest.rln.membership import ChainMembership, MembershipError, OwnPath, StaticMembership
from ingest.rln.rules import (
    NullifierLog,
    RlnReject,
    Rules,
    decode_proof,
    encode_proof,
    epoch_bytes,
    epoch_of,
    epoch_value,
    external_nullifier,
    max_epoch_gap,
    precheck,
    signal,
)
from ingest.rln.settings import RlnSettings
from schemas.waku_message_pb2 import WakuMessage

log = logging.getLogger("ingest.rln")

LOG_EVERY_S = 10.0


class RlnMetrics:
    """nwaku's waku_rln_* families (protocol_metrics.nim) beside the relay's reason counts."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        kw = {"registry": registry} if registry is not None else {}
        self.messages = Counter("waku_rln_messages", "Messages RLN validation looked at", **kw)  # type: ignore[arg-type]
        self.invalid = Counter("waku_rln_invalid_messages", "Messages RLN refused, by reason", ["type"],
                               **kw)  # type: ignore[arg-type]
        self.spam = Counter("waku_rln_spam_messages", "Messages over their membership's rate limit",
                            **kw)  # type: ignore[arg-type]
        self.valid = Counter("waku_rln_valid_messages", "Messages with a valid RLN proof, by pubsub topic",
                             ["shard"], **kw)  # type: ignore[arg-type]
        self.verify_s = Histogram("waku_rln_proof_verification_duration_seconds", "zkSNARK verification time",
                                  buckets=(0.001, 0.002, 0.004, 0.008, 0.016, 0.05, 0.1, 0.5),
                                  **kw)  # type: ignore[arg-type]
        self.prove_s = Histogram("waku_rln_proof_generation_duration_seconds", "RLN proof generation time",
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8), **kw)  # type: ignore[arg-type]
        self.generated = Counter("waku_rln_total_generated_proofs", "Proofs this node made",
                                 **kw)  # type: ignore[arg-type]
        self.remaining = Gauge("waku_rln_remaining_proofs_per_epoch", "Proofs left to our membership this epoch",
                               **kw)  # type: ignore[arg-type]
        self.members = Gauge("waku_rln_number_registered_memberships", "Memberships in the group",
                             **kw)  # type: ignore[arg-type]


class _RateLimitedLog:
    """One line per reason at most every LOG_EVERY_S, with how many it stood for."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, reason: RlnReject, topic: str, detail: str) -> None:
        now = time.monotonic()
        held = self._held.get(reason, 0)
        if now - self._last.get(reason, -1e9) < LOG_EVERY_S:
            self._held[reason] = held + 1
            return
        self._last[reason], self._held[reason] = now, 0
        more = f" (and {held} more since the last line)" if held else ""
        log.info("rln: rejected a message on %s: %s%s%s", topic, reason.value, f": {detail}" if detail else "", more)


class ExternalNullifiers:
    """The external nullifier of each (epoch, rln_identifier), computed once: every message of
    an epoch shares it (two keccaks and a Poseidon hash under the "hashed" rule)."""

    KEEP = 8  # the current epoch, its neighbours and a few identifiers

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self._known: dict[tuple[bytes, bytes], bytes] = {}

    def __call__(self, epoch: bytes, rln_identifier: bytes) -> bytes:
        key = (epoch, rln_identifier)
        en = self._known.get(key)
        if en is None:
            en = external_nullifier(epoch, rln_identifier, self.rule, zk.poseidon, zk.hash_to_field)
            if len(self._known) >= self.KEEP:
                self._known.clear()
            self._known[key] = en
        return en


class Prover:
    """Proofs from our membership: a message id per proof, 0..limit-1 per epoch (nwaku's nonce
    manager), the path from the membership at the time."""

    def __init__(self, credential: MembershipCredential, path: Callable[[], OwnPath | None], rules: Rules,
                 metrics: RlnMetrics, nullifiers: ExternalNullifiers | None = None) -> None:
        self.credential = credential
        self.external_nullifier = nullifiers or ExternalNullifiers(rules.nullifier_rule)
        self.path = path
        self.rules = rules
        self.metrics = metrics
        self._epoch = -1
        self._next_id = 0
        self._lock = trio.Lock()

    @property
    def limit(self) -> int:
        return self.credential.user_message_limit

    def remaining(self, epoch: int) -> int:
        return self.limit if epoch != self._epoch else max(0, self.limit - self._next_id)

    def _take_id(self, epoch: int) -> int:
        if epoch != self._epoch:
            self._epoch, self._next_id = epoch, 0
        if self._next_id >= self.limit:
            raise OutOfProofs(f"the {self.limit} messages of this epoch are spent")
        mid = self._next_id
        self._next_id += 1
        self.metrics.remaining.set(self.limit - self._next_id)
        return mid

    async def attach(self, msg: WakuMessage) -> WakuMessage:
        """A copy of `msg` with a proof for its timestamp's epoch (OutOfProofs when spent)."""
        path = self.path()
        if path is None:
            raise OutOfProofs("no Merkle path for our membership yet")
        r = self.rules
        epoch = epoch_of(msg.timestamp, r.epoch_s)
        raw_epoch = epoch_bytes(epoch)
        en = self.external_nullifier(raw_epoch, r.rln_identifier)
        x = zk.hash_to_field(signal(msg))
        async with self._lock:  # ids in order; one proof at a time (two cores)
            mid = self._take_id(epoch)
            started = time.perf_counter()
            proof, root, share_x, share_y, nullifier = await trio.to_thread.run_sync(
                zk.prove, self.credential.id_secret_hash, self.limit, mid, path.elements, path.bits, x, en)
            self.metrics.prove_s.observe(time.perf_counter() - started)
        self.metrics.generated.inc()
        out = WakuMessage()
        out.CopyFrom(msg)
        out.rate_limit_proof = encode_proof(proof, root, raw_epoch, share_x, share_y, nullifier, r.rln_identifier)
        return out


class RlnRelay:
    def __init__(self, settings: RlnSettings, membership: StaticMembership | ChainMembership,
                 credential: MembershipCredential | None = None, *, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.rules = settings.rules
        self.membership = membership
        self.credential = credential
        self.clock = clock
        self.metrics = RlnMetrics(registry)
        self.nullifiers = NullifierLog(max_epoch_gap(self.rules))
        self.external_nullifier = ExternalNullifiers(self.rules.nullifier_rule)
        self.verifier = zk.verifier(settings.verify_threads)
        self._log = _RateLimitedLog()
        self.prover: Prover | None = None
        if credential is not None:
            self.prover = Prover(credential, self._own_path, self.rules, self.metrics, self.external_nullifier)
            self.metrics.remaining.set(credential.user_message_limit)
        if isinstance(membership, ChainMembership):
            membership.on_change = lambda n: self.metrics.members.set(n)
            self.metrics.members.set(membership.members)
        else:
            self.metrics.members.set(len(membership.leaves))

    # -- set-up ----------------------------------------------------------------------------

    @classmethod
    def open(cls, settings: RlnSettings, *, registry: CollectorRegistry | None = None,
             clock: Callable[[], float] = time.time) -> RlnRelay:
        """Everything RLN needs, checked now: the zk library and key, the keystore (path,
        password, credential), the membership (the chain reachable, our membership on it; a
        static group holding our leaf). Any failure is an RlnError in one line."""
        try:
            zk.warm_up()
        except zk.ZkUnavailable as exc:
            raise RlnError(str(exc)) from None
        credential = None
        s = settings
        if s.keystore_path:
            try:
                credential = keystore.load(
                    s.keystore_path, s.keystore_password,
                    chain_id=s.chain_id or None if s.membership == "chain" else None,
                    contract_address=s.eth_contract_address or None if s.membership == "chain" else None,
                    tree_index=s.membership_index if s.membership_index >= 0 else None)
            except KeystoreError as exc:
                raise RlnError(f"rln: {exc}") from None
        membership: StaticMembership | ChainMembership
        try:
            if s.membership == "static":
                membership = StaticMembership(s.static_rate_commitments)
                if credential is not None:
                    leaf = zk.rate_commitment(credential.id_commitment, credential.user_message_limit)
                    if membership.leaf(credential.tree_index) != leaf:
                        raise RlnError(f"rln: the keystore's membership (index {credential.tree_index}) is not "
                                       "in rln.static_rate_commitments at that index")
            else:
                chain = first_chain(s.eth_client_addresses, s.eth_contract_address, chain_id=s.chain_id or None,
                                    timeout_s=s.rpc_timeout_s)
                if credential is not None and not chain.is_member(credential.id_commitment):
                    raise RlnError(f"rln: the keystore's membership (index {credential.tree_index}) is not registered "
                                   f"on the contract {s.eth_contract_address}")
                membership = ChainMembership(chain, s.acceptable_root_window, s.root_poll_s,
                                             credential.tree_index if credential is not None else None)
                membership.start()
        except (MembershipError, ChainError) as exc:
            raise RlnError(str(exc) if str(exc).startswith("rln:") else f"rln: {exc}") from None
        relay = cls(settings, membership, credential, registry=registry, clock=clock)
        group = s.eth_contract_address or f"{len(s.static_rate_commitments)} members"
        proving = (f"proving as member {credential.tree_index} ({credential.user_message_limit} messages an epoch)"
                   if credential is not None else "no credentials: validating only")
        log.info("rln: on for %s; membership %s (%s), %d root(s) acceptable; %s",
                 ", ".join(s.pubsub_topics) or "every relayed topic", s.membership, group, len(membership.roots),
                 proving)
        return relay

    def _own_path(self) -> OwnPath | None:
        m = self.membership
        if isinstance(m, StaticMembership):
            return m.own_path(self.credential.tree_index) if self.credential is not None else None
        return m.path

    async def run(self) -> None:
        await self.membership.run()

    # -- validation ------------------------------------------------------------------------

    def applies(self, topic: str) -> bool:
        return self.settings.applies_to(topic)

    async def validate(self, topic: str, msg: WakuMessage) -> RlnReject | None:
        """nwaku's validateMessageAndUpdateLog: None when valid (its nullifier then recorded),
        else the reason (every reason is a REJECT)."""
        self.metrics.messages.inc()
        now = self.clock()
        r = self.rules
        proof, reason = precheck(msg, now, self.membership.roots, r)
        if reason is not None:
            return self._reject(reason, topic, msg)
        assert proof is not None
        x = zk.hash_to_field(signal(msg))
        en = self.external_nullifier(proof.epoch, proof.rln_identifier)
        started = time.perf_counter()
        verdict = await self.verifier.verify(proof.proof, proof.merkle_root, en, x, proof.share_x, proof.share_y,
                                             proof.nullifier)
        self.metrics.verify_s.observe(time.perf_counter() - started)
        if verdict != "valid":
            return self._reject(RlnReject.PROOF, topic, msg, verdict)
        epoch = epoch_value(proof.epoch)
        self.nullifiers.clear_old(epoch_of(int(now * 1e9), r.epoch_s))
        if self.nullifiers.seen(epoch, proof.nullifier):
            self.metrics.spam.inc()
            return self._reject(RlnReject.SPAM, topic, msg)
        self.nullifiers.record(epoch, proof.nullifier)
        self.metrics.valid.labels(topic).inc()
        return None

    def forget(self, msg: WakuMessage) -> None:
        """Take a validated message's nullifier back out of the log: a message of our own or a
        light client's that Kafka did not take (503) was never relayed, and its sender may send
        the same proof again."""
        proof = decode_proof(msg.rate_limit_proof) if msg.rate_limit_proof else None
        if proof is not None:
            self.nullifiers.discard(epoch_value(proof.epoch), proof.nullifier)

    def _reject(self, reason: RlnReject, topic: str, msg: WakuMessage, detail: str = "") -> RlnReject:
        if reason is not RlnReject.SPAM:
            self.metrics.invalid.labels(reason.value.removeprefix("rln_")).inc()
        if reason is RlnReject.CLOCK:
            detail = f"timestamp {msg.timestamp / 1e9 - self.clock():+.1f} s from now"
        elif reason is RlnReject.PROOF and detail and detail != "proof":
            detail = {"signal": "share_x is not the message's signal", "root": "root"}.get(detail, detail)
        elif reason is RlnReject.PROOF:
            detail = ""
        self._log(reason, topic, detail)
        return reason

    # -- proving ---------------------------------------------------------------------------

    @property
    def can_prove(self) -> bool:
        return self.prover is not None

    async def attach(self, msg: WakuMessage) -> WakuMessage:
        if self.prover is None:
            raise OutOfProofs("this node has no RLN membership (rln.keystore_path)")
        return await self.prover.attach(msg)

