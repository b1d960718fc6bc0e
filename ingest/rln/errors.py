"""The RLN relay's exceptions, apart from ingest/rln/service.py so that the bridge's start path
(node, REST) catches them without importing the service and its chain client (eth_abi and the
rest: ~0.2 s at every start of a node without RLN)."""
from __future__ import annotations


class RlnError(Exception):
    """RLN cannot run as configured; one line for the operator (the node does not start)."""


class RlnRefused(Exception):
    """A message of our own RLN cannot send: `status` 500 when no proof could be made (nwaku's
    REST: "error appending RLN proof to message"), 400 when the message failed validation."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class OutOfProofs(Exception):
    """Our membership's messages for this epoch are spent (nwaku: OUT_OF_RLN_PROOF)."""
