from schemas import waku_message_pb2 as _waku_message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Source(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOURCE_UNSPECIFIED: _ClassVar[Source]
    RELAY: _ClassVar[Source]
    LIGHTPUSH: _ClassVar[Source]

class SubscriptionOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_UNSPECIFIED: _ClassVar[SubscriptionOp]
    SUBSCRIBE: _ClassVar[SubscriptionOp]
    UNSUBSCRIBE: _ClassVar[SubscriptionOp]
    UNSUBSCRIBE_ALL: _ClassVar[SubscriptionOp]
    EXPIRE: _ClassVar[SubscriptionOp]
    REFRESH: _ClassVar[SubscriptionOp]
    BRIDGE_RESTART: _ClassVar[SubscriptionOp]
SOURCE_UNSPECIFIED: Source
RELAY: Source
LIGHTPUSH: Source
OP_UNSPECIFIED: SubscriptionOp
SUBSCRIBE: SubscriptionOp
UNSUBSCRIBE: SubscriptionOp
UNSUBSCRIBE_ALL: SubscriptionOp
EXPIRE: SubscriptionOp
REFRESH: SubscriptionOp
BRIDGE_RESTART: SubscriptionOp

class IngestRecord(_message.Message):
    __slots__ = ("pubsub_topic", "message", "received_time", "source", "bridge_id")
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    BRIDGE_ID_FIELD_NUMBER: _ClassVar[int]
    pubsub_topic: str
    message: _waku_message_pb2.WakuMessage
    received_time: float
    source: Source
    bridge_id: str
    def __init__(self, pubsub_topic: _Optional[str] = ..., message: _Optional[_Union[_waku_message_pb2.WakuMessage, _Mapping]] = ..., received_time: _Optional[float] = ..., source: _Optional[_Union[Source, str]] = ..., bridge_id: _Optional[str] = ...) -> None: ...

class SubscriptionEvent(_message.Message):
    __slots__ = ("peer_id", "bridge_id", "op", "pubsub_topic", "content_topics", "event_time", "request_id", "protocol")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    BRIDGE_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TOPICS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    bridge_id: str
    op: SubscriptionOp
    pubsub_topic: str
    content_topics: _containers.RepeatedScalarFieldContainer[str]
    event_time: float
    request_id: str
    protocol: str
    def __init__(self, peer_id: _Optional[str] = ..., bridge_id: _Optional[str] = ..., op: _Optional[_Union[SubscriptionOp, str]] = ..., pubsub_topic: _Optional[str] = ..., content_topics: _Optional[_Iterable[str]] = ..., event_time: _Optional[float] = ..., request_id: _Optional[str] = ..., protocol: _Optional[str] = ...) -> None: ...

class PushTarget(_message.Message):
    __slots__ = ("peer_id", "protocol", "request_id")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    protocol: str
    request_id: str
    def __init__(self, peer_id: _Optional[str] = ..., protocol: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class PushRecord(_message.Message):
    __slots__ = ("peer_id", "pubsub_topic", "message", "message_hash", "protocol", "request_id", "received_time", "source_partition", "source_offset", "targets")
    PEER_ID_FIELD_NUMBER: _ClassVar[int]
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_HASH_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_TIME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_PARTITION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    peer_id: str
    pubsub_topic: str
    message: _waku_message_pb2.WakuMessage
    message_hash: bytes
    protocol: str
    request_id: str
    received_time: float
    source_partition: int
    source_offset: int
    targets: _containers.RepeatedCompositeFieldContainer[PushTarget]
    def __init__(self, peer_id: _Optional[str] = ..., pubsub_topic: _Optional[str] = ..., message: _Optional[_Union[_waku_message_pb2.WakuMessage, _Mapping]] = ..., message_hash: _Optional[bytes] = ..., protocol: _Optional[str] = ..., request_id: _Optional[str] = ..., received_time: _Optional[float] = ..., source_partition: _Optional[int] = ..., source_offset: _Optional[int] = ..., targets: _Optional[_Iterable[_Union[PushTarget, _Mapping]]] = ...) -> None: ...
