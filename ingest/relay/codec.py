"""Relay wire facts: protocol ids, the message id, StrictNoSign and WakuMessage validation.

Facts from 11/WAKU2-RELAY and the reference nodes (shared/specs/14-WAKU2-MESSAGE-facts.md):
the relay message id is sha256 of the pubsub ``Message.data`` (the encoded WakuMessage); the
signing policy is StrictNoSign (``from``, ``seqno``, ``signature`` and ``key`` are empty);
messages above 150 KiB, without content topic or with more than 64 bytes of meta are invalid.
"""
from __future__ import annotations

import enum
import hashlib

# Re-exported (`x as x`): the limits and the topic rules are part of the relay API.
from core.message import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES
from core.message import MAX_META_BYTES as MAX_META_BYTES
from core.message import Limits as Limits
from core.message import check_message
from core.topics import DEFAULT_PUBSUB_TOPIC as DEFAULT_PUBSUB_TOPIC
from core.topics import check_pubsub_topic as check_pubsub_topic
from schemas.waku_message_pb2 import WakuMessage

RELAY_CODEC = "/vac/waku/relay/2.0.0"
RELAY_CODEC_BETA2 = "/vac/waku/relay/2.0.0-beta2"
# Offered in this order: today's id first, the seed's beta2 id for older peers.
RELAY_CODECS = (RELAY_CODEC, RELAY_CODEC_BETA2)




class Reject(enum.StrEnum):
    """Why a relay message was rejected; the values are the metrics' `reason` labels."""

    SIGNED = "signed"                            # signature or key present
    AUTHORED = "authored"                        # from or seqno present
    OVERSIZED = "oversized"                      # encoded WakuMessage above the limit
    UNDECODABLE = "undecodable"                  # data is not a WakuMessage
    EMPTY_CONTENT_TOPIC = "empty_content_topic"
    META_TOO_LONG = "meta_too_long"
    MALFORMED_RPC = "malformed_rpc"              # the pubsub RPC frame itself did not parse
    # RLN-v2 (ingest/rln/rules.RlnReject: the same values, tests/unit/test_rln_rules.py)
    RLN_MISSING = "rln_missing"
    RLN_DECODE = "rln_decode"
    RLN_CLOCK = "rln_clock"
    RLN_EPOCH = "rln_epoch"
    RLN_ROOT = "rln_root"
    RLN_PROOF = "rln_proof"
    RLN_SPAM = "rln_spam"


def relay_message_id(data: bytes) -> bytes:
    """The gossipsub message id of nwaku / go-waku: sha256(Message.data), 32 raw bytes."""
    return hashlib.sha256(data).digest()


def check_no_sign(from_id: bytes, seqno: bytes, signature: bytes, key: bytes) -> Reject | None:
    """StrictNoSign: a message carrying a signature/key is `signed`; one naming an author or a
    sequence number is `authored`."""
    if signature or key:
        return Reject.SIGNED
    if from_id or seqno:
        return Reject.AUTHORED
    return None


def decode_waku_message(data: bytes, limits: Limits = Limits()) -> tuple[WakuMessage | None, Reject | None]:
    """Decode and validate a relayed WakuMessage: (message, None) or (None, reason) (the rules
    are the message model's, core/message.check_message)."""
    msg, reason = check_message(data, limits)
    return msg, None if reason is None else Reject(reason)
