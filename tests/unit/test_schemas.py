"""Protobuf round trips for every message type, both legacy ContentFilter shapes, and the
stale-generated-code check."""
import math
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2

from schemas import DESCRIPTOR_SET_PATH, generate
from schemas import (filter_v00_pb2, filter_v2_pb2, pipeline_records_pb2, relay_pb2,
                     store_beta2_pb2, waku_message_pb2)

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
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    data = msg.SerializeToString()
    back = type(msg).FromString(data)
    assert back == msg
    assert back.SerializeToString() == data


def test_optional_fields_keep_presence():
    zero = W(version=0, timestamp=0, ephemeral=False, meta=b"")
    back = W.FromString(zero.SerializeToString())
    assert back.HasField("version") and back.HasField("timestamp") and back.HasField("meta")
    assert not W.FromString(W().SerializeToString()).HasField("timestamp")


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
    assert list(filter_v00_pb2.FilterRequest.ContentFilter.FromString(two.SerializeToString()).contentTopics) == ["a", "b"]


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
