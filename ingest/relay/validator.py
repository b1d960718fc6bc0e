"""The WakuMessage topic validator registered on every relay pubsub topic.

It is a plain py-libp2p synchronous validator (``validator(forwarder, msg) -> bool``) so any
Pubsub can use it; the relay pubsub calls :meth:`check` instead, which also returns the decoded
WakuMessage and the rejection reason, so each message is decoded once and counted by reason.
"""
from __future__ import annotations

from collections.abc import Callable

from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2

from core.message import Limits
from ingest.relay.codec import Reject, check_no_sign, decode_waku_message
from schemas.waku_message_pb2 import WakuMessage


class WakuMessageValidator:
    """StrictNoSign plus 14/WAKU2-MESSAGE validation of a pubsub message."""

    def __init__(self, limits: Limits = Limits(), on_reject: Callable[[Reject], None] | None = None) -> None:
        self.limits = limits
        self.on_reject = on_reject

    def check(self, msg: rpc_pb2.Message) -> tuple[WakuMessage | None, Reject | None]:
        """(decoded message, None) when valid, else (None, reason)."""
        reason = check_no_sign(msg.from_id, msg.seqno, msg.signature, msg.key)
        if reason is not None:
            return None, reason
        return decode_waku_message(msg.data, self.limits)

    def __call__(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:  # py-libp2p's SyncValidatorFn
        _, reason = self.check(msg)
        if reason is not None and self.on_reject is not None:
            self.on_reject(reason)
        return reason is None
