from schemas import waku_message_pb2 as _waku_message_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LightpushRequest(_message.Message):
    __slots__ = ("request_id", "pubsub_topic", "message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    pubsub_topic: str
    message: _waku_message_pb2.WakuMessage
    def __init__(self, request_id: _Optional[str] = ..., pubsub_topic: _Optional[str] = ..., message: _Optional[_Union[_waku_message_pb2.WakuMessage, _Mapping]] = ...) -> None: ...

class LightpushResponse(_message.Message):
    __slots__ = ("request_id", "status_code", "status_desc", "relay_peer_count")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_DESC_FIELD_NUMBER: _ClassVar[int]
    RELAY_PEER_COUNT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status_code: int
    status_desc: str
    relay_peer_count: int
    def __init__(self, request_id: _Optional[str] = ..., status_code: _Optional[int] = ..., status_desc: _Optional[str] = ..., relay_peer_count: _Optional[int] = ...) -> None: ...

class PushRequest(_message.Message):
    __slots__ = ("pubsub_topic", "message")
    PUBSUB_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    pubsub_topic: str
    message: _waku_message_pb2.WakuMessage
    def __init__(self, pubsub_topic: _Optional[str] = ..., message: _Optional[_Union[_waku_message_pb2.WakuMessage, _Mapping]] = ...) -> None: ...

class PushResponse(_message.Message):
    __slots__ = ("is_success", "info")
    IS_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    is_success: bool
    info: str
    def __init__(self, is_success: bool = ..., info: _Optional[str] = ...) -> None: ...

class PushRPC(_message.Message):
    __slots__ = ("request_id", "request", "response")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    request: PushRequest
    response: PushResponse
    def __init__(self, request_id: _Optional[str] = ..., request: _Optional[_Union[PushRequest, _Mapping]] = ..., response: _Optional[_Union[PushResponse, _Mapping]] = ...) -> None: ...
