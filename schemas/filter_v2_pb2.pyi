from schemas import waku_message_pb2 as _waku_message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FilterSubscribeRequest(_message.Message):
    __slots__ = ("request_id", "filter_subscribe_type", "pubsub_topic", "content_topics")
    class FilterSubscribeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SUBSCRIBER_PING: _ClassVar[FilterSubscribeRequest.FilterSubscribeType]
        SUBSCRIBE: _ClassVar[FilterSubscribeRequest.FilterSubscribeType]
        UNSUBSCRIBE: _ClassVar[FilterSubscribeRequest.FilterSubscribeType]
        UNSUBSCRIBE_ALL: _ClassVar[FilterSubscribeRequest.FilterSubscribeType]
    SUBSCRIBER_PING: FilterSubscribeRequest.FilterSubscribeType
    SUBSCRIBE: FilterSubscribeRequest.FilterSubscribeType
    UNSUBSCRIBE: FilterSubscribeRequest.FilterSubscribeType
    UNSUBSCRIBE_ALL: FilterSubscribeRequest.FilterSubscribeType
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FILTER_SUBSCRIBE_TYPE_FIELD_NUMBER: _ClassVar[int]
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TOPICS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    filter_subscribe_type: FilterSubscribeRequest.FilterSubscribeType
    pubsub_topic: str
    content_topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., filter_subscribe_type: _Optional[_Union[FilterSubscribeRequest.FilterSubscribeType, str]] = ..., pubsub_topic: _Optional[str] = ..., content_topics: _Optional[_Iterable[str]] = ...) -> None: ...

class FilterSubscribeResponse(_message.Message):
    __slots__ = ("request_id", "status_code", "status_desc")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_DESC_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status_code: int
    status_desc: str
    def __init__(self, request_id: _Optional[str] = ..., status_code: _Optional[int] = ..., status_desc: _Optional[str] = ...) -> None: ...

class MessagePush(_message.Message):
    __slots__ = ("waku_message", "pubsub_topic")
    WAKU_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    waku_message: _waku_message_pb2.WakuMessage
    pubsub_topic: str
    def __init__(self, waku_message: _Optional[_Union[_waku_message_pb2.WakuMessage, _Mapping]] = ..., pubsub_topic: _Optional[str] = ...) -> None: ...
