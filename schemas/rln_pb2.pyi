from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RateLimitProof(_message.Message):
    __slots__ = ("proof", "merkle_root", "epoch", "share_x", "share_y", "nullifier", "rln_identifier")
    PROOF_FIELD_NUMBER: _ClassVar[int]
    MERKLE_ROOT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARE_X_FIELD_NUMBER: _ClassVar[int]
    SHARE_Y_FIELD_NUMBER: _ClassVar[int]
    NULLIFIER_FIELD_NUMBER: _ClassVar[int]
    RLN_IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    proof: bytes
    merkle_root: bytes
    epoch: bytes
    share_x: bytes
    share_y: bytes
    nullifier: bytes
    rln_identifier: bytes
    def __init__(self, proof: _Optional[bytes] = ..., merkle_root: _Optional[bytes] = ..., epoch: _Optional[bytes] = ..., share_x: _Optional[bytes] = ..., share_y: _Optional[bytes] = ..., nullifier: _Optional[bytes] = ..., rln_identifier: _Optional[bytes] = ...) -> None: ...
