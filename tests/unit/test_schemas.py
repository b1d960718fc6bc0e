"""Protobuf round trips for every message type, both legacy ContentFilter shapes, and the
stale-generated-code check."""
import math
import struct
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2

from schemas import (
    DESCRIPTOR_SET_PATH,
    filter_v00_pb2,
    filter_v2_pb2,
    generate,
    pipeline_records_pb2,
    relay_pb2,
    store_beta2_pb2,
    waku_message_pb2,
)

W = waku_message_pb2.WakuMessage


def waku(**kw):
    base = dict(payload=b"\x00\x01\xff", content_topic="/app/1/chat/proto", version=1,
                timestamp=-(2**63), meta=b"m" * 64, rate_limit_proof=b"proof", ephemeral=True)
    base.update(kw)
    return W(**base)


MESSAGES = [
    waku(),
    W(),
    W(legacy_timestamp=1.5),
    relay_pb2.RPC(
        subscriptions=[relay_pb2.RPC.SubOpts(subscribe=True, topicid="/waku/2/rs/0/1")],
        publish=[relay_pb2.Message(data=waku().SerializeToString(), topicIDs=["/waku/2/rs/0/1"])],
        control=relay_pb2.ControlMessage(ihave=[relay_pb2.ControlIHave(topicID="t", messageIDs=["a"])]),
    ),
    filter_v2_pb2.FilterSubscribeRequest(
        request_id="r1", filter_subscribe_type=filter_v2_pb2.FilterSubscribeRequest.UNSUBSCRIBE_ALL,
        pubsub_topic="/waku/2/default-waku/proto", content_topics=["a", "b"]),
    filter_v2_pb2.FilterSubscribeResponse(request_id="r1", status_code=404, status_desc="NOT_FOUND"),
    filter_v2_pb2.MessagePush(waku_message=waku(), pubsub_topic="/waku/2/rs/1/4"),
    filter_v00_pb2.FilterRPC(requestId="x", request=filter_v00_pb2.FilterRequest(
        subscribe=True, topic="/waku/2/default-waku/proto",
        contentFilters=[filter_v00_pb2.FilterRequest.ContentFilter(contentTopics=["c1", "c2"])])),
    filter_v00_pb2.FilterRPC(requestId="x", push=filter_v00_pb2.MessagePush(messages=[waku(), W()])),
    store_beta2_pb2.HistoryRPC(request_id="q", query=store_beta2_pb2.HistoryQuery(
        contentFilters=[store_beta2_pb2.ContentFilter(contentTopic="c")], pubsubtopic="p",
        pagingInfo=store_beta2_pb2.PagingInfo(
            pageSize=2**64 - 1, direction=store_beta2_pb2.PagingInfo.FORWARD,
            cursor=store_beta2_pb2.Index(digest=b"\x01" * 32, receivedTime=1700000000.123456789)))),
    store_beta2_pb2.HistoryRPC(request_id="q", response=store_beta2_pb2.HistoryResponse(
        messages=[waku()], pagingInfo=store_beta2_pb2.PagingInfo(pageSize=1))),
    pipeline_records_pb2.IngestRecord(
        pubsub_topic="/waku/2/default-waku/proto", message=waku(), received_time=1700000000.000001,
        source=pipeline_records_pb2.RELAY, bridge_id="16Uiu2HAm"),
    pipeline_records_pb2.SubscriptionEvent(
        peer_id="peer", bridge_id="b", op=pipeline_records_pb2.UNSUBSCRIBE, pubsub_topic="p",
        content_topics=["a"], event_time=1.25, request_id="r", protocol="v2"),
    pipeline_records_pb2.PushRecord(peer_id="peer", pubsub_topic="p", message=waku(),
                                    message_hash=b"\x00" * 32, protocol="v00", request_id="r"),
    pipeline_records_pb2.PushRecord(peer_id="peer", pubsub_topic="p", message=waku(), message_hash=b"\x01" * 32,
                                    protocol="v2", received_time=1700000000.5, source_partition=0,
                                    source_offset=2**40 + 7),
]


# Field numbers and wire kinds as the specs state them (shared/specs: 11 relay and the libp2p
# pubsub RPC, 12 filter v00 and v01, 13 store beta2, 14 message facts; DESIGN.md's records),
# typed by hand, independent of the generated code.
SPEC: dict[str, dict[str, tuple[int, str]]] = {
    "waku.message.v1.WakuMessage": {"payload": (1, "bytes"), "content_topic": (2, "string"), "version": (3, "varint"),
                                    "legacy_timestamp": (4, "double"), "timestamp": (10, "sint64"),
                                    "meta": (11, "bytes"), "rate_limit_proof": (21, "bytes"),
                                    "ephemeral": (31, "varint")},
    "waku.relay.v2.RPC": {"subscriptions": (1, "msg"), "publish": (2, "msg"), "control": (3, "msg")},
    "waku.relay.v2.RPC.SubOpts": {"subscribe": (1, "varint"), "topicid": (2, "string")},
    "waku.relay.v2.Message": {"from": (1, "bytes"), "data": (2, "bytes"), "seqno": (3, "bytes"),
                               "topicIDs": (4, "string"), "signature": (5, "bytes"), "key": (6, "bytes")},
    "waku.relay.v2.ControlMessage": {"ihave": (1, "msg"), "iwant": (2, "msg"), "graft": (3, "msg"),
                                     "prune": (4, "msg")},
    "waku.relay.v2.ControlIHave": {"topicID": (1, "string"), "messageIDs": (2, "string")},
    "waku.filter.v2.FilterSubscribeRequest": {"request_id": (1, "string"), "filter_subscribe_type": (2, "varint"),
                                              "pubsub_topic": (10, "string"), "content_topics": (11, "string")},
    "waku.filter.v2.FilterSubscribeResponse": {"request_id": (1, "string"), "status_code": (10, "varint"),
                                               "status_desc": (11, "string")},
    "waku.filter.v2.MessagePush": {"waku_message": (1, "msg"), "pubsub_topic": (2, "string")},
    "waku.filter.v00.FilterRPC": {"requestId": (1, "string"), "request": (2, "msg"), "push": (3, "msg")},
    "waku.filter.v00.FilterRequest": {"subscribe": (1, "varint"), "topic": (2, "string"), "contentFilters": (3, "msg")},
    "waku.filter.v00.FilterRequest.ContentFilter": {"contentTopics": (1, "string")},
    "waku.filter.v00.MessagePush": {"messages": (1, "msg")},
    "waku.store.v2beta2.HistoryRPC": {"request_id": (1, "string"), "query": (2, "msg"), "response": (3, "msg")},
    "waku.store.v2beta2.HistoryQuery": {"contentFilters": (2, "msg"), "pubsubtopic": (3, "string"),
                                        "pagingInfo": (4, "msg")},
    "waku.store.v2beta2.HistoryResponse": {"messages": (2, "msg"), "pagingInfo": (3, "msg")},
    "waku.store.v2beta2.ContentFilter": {"contentTopic": (1, "string")},
    "waku.store.v2beta2.PagingInfo": {"pageSize": (1, "varint"), "cursor": (2, "msg"), "direction": (3, "varint")},
    "waku.store.v2beta2.Index": {"digest": (1, "bytes"), "receivedTime": (2, "double")},
    "waku.pipeline.v1.IngestRecord": {"pubsub_topic": (1, "string"), "message": (2, "msg"),
                                      "received_time": (3, "double"), "source": (4, "varint"),
                                      "bridge_id": (5, "string")},
    "waku.pipeline.v1.SubscriptionEvent": {"peer_id": (1, "string"), "bridge_id": (2, "string"), "op": (3, "varint"),
                                           "pubsub_topic": (4, "string"), "content_topics": (5, "string"),
                                           "event_time": (6, "double"), "request_id": (7, "string"),
                                           "protocol": (8, "string")},
    "waku.pipeline.v1.PushRecord": {"peer_id": (1, "string"), "pubsub_topic": (2, "string"), "message": (3, "msg"),
                                    "message_hash": (4, "bytes"), "protocol": (5, "string"),
                                    "request_id": (6, "string"), "received_time": (7, "double"),
                                    "source_partition": (8, "varint"), "source_offset": (9, "varint"),
                                    "targets": (10, "msg")},
    "waku.pipeline.v1.PushTarget": {"peer_id": (1, "string"), "protocol": (2, "string"), "request_id": (3, "string")},
}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def wire_fields(data: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, raw value) of each field on the wire: a protobuf reader
    written from the encoding spec, sharing nothing with the generated code."""
    out, i = [], 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i:i + n], i + n
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.append((number, wire, value))
    return out


def check_wire(msg, data: bytes) -> None:
    """Every set field of `msg` is on the wire under the spec's number, encoded as the spec's
    kind says, and nothing else is there."""
    spec = SPEC[msg.DESCRIPTOR.full_name]
    expected = []
    for field, value in msg.ListFields():
        number, kind = spec[field.name]
        for v in (value if field.is_repeated else [value]):
            expected.append((number, kind, v))
    got = wire_fields(data)
    assert sorted(n for n, _, _ in got) == sorted(n for n, _, _ in expected), msg.DESCRIPTOR.full_name
    for number, kind, value in expected:
        raw = [(w, r) for n, w, r in got if n == number]
        if kind == "msg":
            assert any(w == 2 and value.SerializeToString() == r for w, r in raw)
            check_wire(value, value.SerializeToString())
        elif kind == "varint":
            assert (0, int(value) % 2**64) in raw
        elif kind == "sint64":
            assert (0, (value << 1) ^ (value >> 63) if value < 0 else value << 1) in raw
        elif kind == "double":
            assert (1, struct.pack("<d", value)) in raw
        elif kind == "string":
            assert (2, value.encode()) in raw
        else:
            assert (2, bytes(value)) in raw


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    data = msg.SerializeToString()
    check_wire(msg, data)  # the bytes are the specs' encoding, read by an independent reader
    back = type(msg).FromString(data)
    assert back == msg
    assert back.SerializeToString() == data


def test_wire_check_catches_a_wrong_field_number():
    msg = filter_v2_pb2.FilterSubscribeResponse(request_id="r", status_code=200)
    data = msg.SerializeToString()
    wrong = data.replace(b"\x50", b"\x58", 1)  # status_code under field 11 instead of 10
    with pytest.raises(AssertionError):
        check_wire(msg, wrong)


def test_optional_fields_keep_presence():
    zero = W(version=0, timestamp=0, ephemeral=False, meta=b"")
    back = W.FromString(zero.SerializeToString())
    assert back.HasField("version") and back.HasField("timestamp") and back.HasField("meta")
    assert not W.FromString(W().SerializeToString()).HasField("timestamp")


def test_push_record_source_coordinates_keep_presence():
    """Partition 0 at offset 0 is a real source record; unset means unknown (the pusher falls
    back to hash de-duplication)."""
    P = pipeline_records_pb2.PushRecord
    zero = P.FromString(P(peer_id="p", source_partition=0, source_offset=0).SerializeToString())
    assert zero.HasField("source_partition") and zero.HasField("source_offset")
    unset = P.FromString(P(peer_id="p").SerializeToString())
    assert not unset.HasField("source_partition") and not unset.HasField("source_offset")


def test_store_cursor_double_is_bit_exact():
    t = math.nextafter(1700000000.5, math.inf)
    idx = store_beta2_pb2.Index(digest=b"d", receivedTime=t)
    assert store_beta2_pb2.Index.FromString(idx.SerializeToString()).receivedTime == t


def test_legacy_filter_content_filter_both_shapes_decode():
    # Text b of 12/WAKU2-FILTER v00: `string contentTopic = 1` - encode it by hand
    # (tag 0x0a, length, bytes) as such a peer would, inside FilterRequest.contentFilters (3).
    topic = b"/app/1/x/proto"
    content_filter = b"\x0a" + bytes([len(topic)]) + topic
    request = b"\x08\x01" + b"\x1a" + bytes([len(content_filter)]) + content_filter
    rpc = b"\x0a\x01r" + b"\x12" + bytes([len(request)]) + request
    decoded = filter_v00_pb2.FilterRPC.FromString(rpc)
    assert decoded.request.subscribe is True
    assert list(decoded.request.contentFilters[0].contentTopics) == ["/app/1/x/proto"]
    # Text a: `repeated string contentTopics = 1` with two topics.
    two = filter_v00_pb2.FilterRequest.ContentFilter(contentTopics=["a", "b"])
    decoded = filter_v00_pb2.FilterRequest.ContentFilter.FromString(two.SerializeToString())
    assert list(decoded.contentTopics) == ["a", "b"]


def test_descriptor_set_holds_every_message_type():
    fds = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET_PATH.read_bytes())
    names = {f"{f.package}.{m.name}" for f in fds.file for m in f.message_type}
    for msg in MESSAGES:
        assert msg.DESCRIPTOR.full_name in names


def test_generated_files_are_fresh():
    assert generate.stale_files() == []


def test_stale_check_detects_an_edit(tmp_path, monkeypatch):
    proto = tmp_path / "schemas"
    proto.mkdir()
    for p in generate.SCHEMAS_DIR.glob("*"):
        if p.is_file():
            (proto / p.name).write_bytes(p.read_bytes())
    edited = proto / "waku_message.proto"
    edited.write_text(edited.read_text().replace("optional bool ephemeral = 31;",
                                                 "optional bool ephemeral = 31;\n  string added = 40;"))
    monkeypatch.setattr(generate, "SCHEMAS_DIR", proto)
    monkeypatch.setattr(generate, "REPO_ROOT", tmp_path)
    assert "waku_message_pb2.py" in generate.stale_files()


def test_check_command_exit_code():
    proc = subprocess.run([sys.executable, "-m", "schemas.generate", "--check"], capture_output=True,
                          text=True, cwd=generate.REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
