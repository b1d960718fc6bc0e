from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class WakuMessage(_message.Message):
    __slots__ = ("payload", "content_topic", "version", "legacy_timestamp", "timestamp", "meta", "rate_limit_proof", "ephemeral")
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TOPIC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LEGACY_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_PROOF_FIELD_NUMBER: _ClassVar[int]
    EPHEMERAL_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    content_topic: str
    version: int
    legacy_timestamp: float
    timestamp: int
    meta: bytes
    rate_limit_proof: bytes
    ephemeral: bool
    def __init__(self, payload: _Optional[bytes] = ..., content_topic: _Optional[str] = ..., version: _Optional[int] = ..., legacy_timestamp: _Optional[float] = ..., timestamp: _Optional[int] = ..., meta: _Optional[bytes] = ..., rate_limit_proof: _Optional[bytes] = ..., ephemeral: bool = ...) -> None: ...
