from schemas import waku_message_pb2 as _waku_message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FilterRequest(_message.Message):
    __slots__ = ("subscribe", "topic", "contentFilters")
    class ContentFilter(_message.Message):
        __slots__ = ("contentTopics",)
        CONTENTTOPICS_FIELD_NUMBER: _ClassVar[int]
        contentTopics: _containers.RepeatedScalarFieldContainer[str]
        def __init__(self, contentTopics: _Optional[_Iterable[str]] = ...) -> None: ...
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONTENTFILTERS_FIELD_NUMBER: _ClassVar[int]
    subscribe: bool
    topic: str
    contentFilters: _containers.RepeatedCompositeFieldContainer[FilterRequest.ContentFilter]
    def __init__(self, subscribe: bool = ..., topic: _Optional[str] = ..., contentFilters: _Optional[_Iterable[_Union[FilterRequest.ContentFilter, _Mapping]]] = ...) -> None: ...

class MessagePush(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_waku_message_pb2.WakuMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[_waku_message_pb2.WakuMessage, _Mapping]]] = ...) -> None: ...

class FilterRPC(_message.Message):
    __slots__ = ("requestId", "request", "push")
    REQUESTID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    requestId: str
    request: FilterRequest
    push: MessagePush
    def __init__(self, requestId: _Optional[str] = ..., request: _Optional[_Union[FilterRequest, _Mapping]] = ..., push: _Optional[_Union[MessagePush, _Mapping]] = ...) -> None: ...
