from schemas import waku_message_pb2 as _waku_message_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Index(_message.Message):
    __slots__ = ("digest", "receivedTime")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    RECEIVEDTIME_FIELD_NUMBER: _ClassVar[int]
    digest: bytes
    receivedTime: float
    def __init__(self, digest: _Optional[bytes] = ..., receivedTime: _Optional[float] = ...) -> None: ...

class PagingInfo(_message.Message):
    __slots__ = ("pageSize", "cursor", "direction")
    class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        BACKWARD: _ClassVar[PagingInfo.Direction]
        FORWARD: _ClassVar[PagingInfo.Direction]
    BACKWARD: PagingInfo.Direction
    FORWARD: PagingInfo.Direction
    PAGESIZE_FIELD_NUMBER: _ClassVar[int]
    CURSOR_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    pageSize: int
    cursor: Index
    direction: PagingInfo.Direction
    def __init__(self, pageSize: _Optional[int] = ..., cursor: _Optional[_Union[Index, _Mapping]] = ..., direction: _Optional[_Union[PagingInfo.Direction, str]] = ...) -> None: ...

class ContentFilter(_message.Message):
    __slots__ = ("contentTopic",)
    CONTENTTOPIC_FIELD_NUMBER: _ClassVar[int]
    contentTopic: str
    def __init__(self, contentTopic: _Optional[str] = ...) -> None: ...

class HistoryQuery(_message.Message):
    __slots__ = ("contentFilters", "pubsubtopic", "pagingInfo")
    CONTENTFILTERS_FIELD_NUMBER: _ClassVar[int]
    PUBSUBTOPIC_FIELD_NUMBER: _ClassVar[int]
    PAGINGINFO_FIELD_NUMBER: _ClassVar[int]
    contentFilters: _containers.RepeatedCompositeFieldContainer[ContentFilter]
    pubsubtopic: str
    pagingInfo: PagingInfo
    def __init__(self, contentFilters: _Optional[_Iterable[_Union[ContentFilter, _Mapping]]] = ..., pubsubtopic: _Optional[str] = ..., pagingInfo: _Optional[_Union[PagingInfo, _Mapping]] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("messages", "pagingInfo")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PAGINGINFO_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_waku_message_pb2.WakuMessage]
    pagingInfo: PagingInfo
    def __init__(self, messages: _Optional[_Iterable[_Union[_waku_message_pb2.WakuMessage, _Mapping]]] = ..., pagingInfo: _Optional[_Union[PagingInfo, _Mapping]] = ...) -> None: ...

class HistoryRPC(_message.Message):
    __slots__ = ("request_id", "query", "response")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    query: HistoryQuery
    response: HistoryResponse
    def __init__(self, request_id: _Optional[str] = ..., query: _Optional[_Union[HistoryQuery, _Mapping]] = ..., response: _Optional[_Union[HistoryResponse, _Mapping]] = ...) -> None: ...
