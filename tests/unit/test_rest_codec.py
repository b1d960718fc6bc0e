"""The REST API's pure parts (ingest/rest/codec.py, cache.py, app.origin_regex): nwaku's defaults,
caps, encodings and error texts, without a bridge."""
from __future__ import annotations

import re

import pytest

from ingest.rest import codec
from ingest.rest.app import origin_regex
from ingest.rest.cache import MessageCache
from schemas import store_v3_pb2 as pb3
from schemas.waku_message_pb2 import WakuMessage

H = "ab" * 32


def test_store_request_defaults_and_caps():
    req = codec.store_request({}, "r")
    assert (req.include_data, req.pagination_forward, req.pagination_limit) == (False, True, 20)
    assert not req.HasField("pubsub_topic") and not req.HasField("time_start") and not req.HasField("pagination_cursor")
    assert codec.store_request({"pageSize": "1000"}).pagination_limit == 100
    assert codec.store_request({"pageSize": "-1"}).pagination_limit == 100  # nwaku reads it unsigned
    assert codec.store_request({"pageSize": ""}).pagination_limit == 20
    assert codec.store_request({"ascending": "false"}).pagination_forward is False
    assert codec.store_request({"ascending": "yes"}).pagination_forward is False  # only "true" is forward
    assert codec.store_request({"includeData": "TRUE"}).include_data is True
    assert codec.store_request({"startTime": "0", "endTime": "-5"}).HasField("time_start") is False
    req = codec.store_request({"contentTopics": "/a/1/b/proto,/c/1/d/proto", "pubsubTopic": "%2Fwaku%2F2%2Frs%2F1%2F0",
                               "hashes": f"0x{H},{H}", "cursor": "0x" + H, "startTime": "5", "endTime": "9"})
    assert list(req.content_topics) == ["/a/1/b/proto", "/c/1/d/proto"] and req.pubsub_topic == "/waku/2/rs/1/0"
    assert list(req.message_hashes) == [bytes.fromhex(H)] * 2 and req.pagination_cursor == bytes.fromhex(H)
    assert (req.time_start, req.time_end) == (5, 9)


@pytest.mark.parametrize("params, text", [
    ({"cursor": "0x12"}, "waku message hash parsing error: invalid hash length: 1"),
    ({"hashes": "xyz"}, "Exception converting hex string to bytes"),
    ({"startTime": "1.5"}, "time parsing error"),
    ({"endTime": str(2**64)}, "time parsing error"),
    ({"pageSize": "ten"}, "page size parsing error"),
    ({"includeData": "maybe"}, "include data parsing error"),
])
def test_store_request_refusals(params, text):
    with pytest.raises(codec.BadRequest) as err:
        codec.store_request(params)
    assert str(err.value).startswith(text) and err.value.status == 400


def test_store_response_json_as_nwaku():
    resp = pb3.StoreQueryResponse(request_id="r", status_code=200, status_desc="OK",
                                  pagination_cursor=bytes.fromhex(H))
    kv = resp.messages.add(message_hash=bytes.fromhex(H), pubsub_topic="/waku/2/rs/1/0")
    kv.message.CopyFrom(WakuMessage(payload=b"hi", content_topic="/a/1/b/proto", timestamp=7, meta=b"m"))
    resp.messages.add(message_hash=bytes(32), pubsub_topic="/waku/2/rs/1/0")  # no data: no topic either
    assert codec.store_response_json(resp) == {
        "requestId": "r", "statusCode": 200, "statusDesc": "OK", "paginationCursor": "0x" + H,
        "messages": [{"messageHash": "0x" + H, "pubsubTopic": "/waku/2/rs/1/0",
                      "message": {"payload": "aGk=", "contentTopic": "/a/1/b/proto", "meta": "bQ==", "version": 0,
                                  "timestamp": 7, "ephemeral": False}},
                     {"messageHash": "0x" + "00" * 32}]}


def test_relay_message_parsing():
    m = codec.relay_message({"payload": "aGk=", "contentTopic": "/a/1/b/proto", "timestamp": 5, "meta": "bQ==",
                             "ephemeral": True})
    msg = codec.to_waku_message(m)
    assert (msg.payload, msg.timestamp, msg.meta, msg.ephemeral, msg.version) == (b"hi", 5, b"m", True, 0)
    plain = codec.relay_message({"payload": "aGk=", "contentTopic": "c"})
    assert codec.to_waku_message(plain, now_ns=42).timestamp == 42
    for body, words in [({"contentTopic": "c"}, "Field `payload` is missing or empty"),
                        ({"payload": " ", "contentTopic": "c"}, "Field `payload` is missing or empty"),
                        ({"payload": "aGk="}, "Field `contentTopic` is missing or empty"),
                        ({"payload": "aGk=", "contentTopic": "c", "version": True}, "`version`"),
                        ({"payload": "aGk=", "contentTopic": "c", "ephemeral": "yes"}, "`ephemeral`"),
                        ("text", "expected an object")]:
        with pytest.raises(codec.BadRequest, match=re.escape(words)):
            codec.relay_message(body)
    with pytest.raises(codec.BadRequest, match="Incorrect base64 string"):
        codec.to_waku_message(codec.relay_message({"payload": "a", "contentTopic": "c"}))
    out = codec.relay_message_json(WakuMessage(payload=b"hi", content_topic="c", timestamp=1))
    assert out == {"payload": "aGk=", "contentTopic": "c", "version": 0, "timestamp": 1, "ephemeral": False,
                   "proof": ""}


def test_unknown_fields_and_nulls_are_refused_as_nwaku():
    """nwaku's readValue does not read an unknown field's value and its JSON reader fails on it,
    as on a null (`"timestamp": null`): 400 with the reader's empty message."""
    unreadable = "Invalid content body, could not decode: Unable to deserialize data: "
    ok = {"payload": "aGk=", "contentTopic": "c"}
    for extra in ({"extraField": "extraValue"}, {"timestamp": None}, {"version": None}, {"meta": None},
                  {"ephemeral": None}, {"proof": None}, {"payload": None}):
        with pytest.raises(codec.BadRequest) as err:
            codec.relay_message({**ok, **extra})
        assert (str(err.value), err.value.status) == (unreadable, 400), extra
        with pytest.raises(codec.BadRequest) as err:
            codec.push_request({"pubsubTopic": "/waku/2/rs/1/0", "message": {**ok, **extra}})
        assert str(err.value) == unreadable, extra
    for body in ({"pubsubTopic": "/waku/2/rs/1/0", "message": ok, "extraField": 1},
                 {"pubsubTopic": None, "message": ok}):
        with pytest.raises(codec.BadRequest) as err:
            codec.push_request(body)
        assert str(err.value) == unreadable, body


def test_bodies():
    assert codec.decode_body("application/json; charset=utf-8", b'["a"]') == ["a"]
    assert codec.decode_body("text/plain", b"{}") == {}
    for ctype, body, words in [("application/json", b"", "Missing content body"),
                               ("image/png", b"{}", "Wrong Content-Type"),
                               (None, b"{}", "Wrong Content-Type"),
                               ("application/json", b"\xff", "Invalid content body, could not decode"),
                               ("application/json", b'{"a":1,"a":2}', "Multiple `a` fields found")]:
        with pytest.raises(codec.BadRequest, match=re.escape(words)):
            codec.decode_body(ctype, body)
    push = codec.push_request({"pubsubTopic": "", "message": {"payload": "aGk=", "contentTopic": "c"}})
    assert push.pubsub_topic is None
    with pytest.raises(codec.BadRequest, match="Field `message` is missing"):
        codec.push_request({"pubsubTopic": "/waku/2/rs/1/0"})


def test_health_report():
    ok = codec.health_report(3, 4, {"Relay": True, "Filter": False}, [])
    assert ok == {"nodeHealth": "READY", "connectionStatus": "PartiallyConnected",
                  "protocolsHealth": [{"Relay": "READY"}, {"Filter": "NOT_MOUNTED"}]}
    bad = codec.health_report(0, 4, {"Relay": True}, ["thread store-tail is not running"])
    assert bad["nodeHealth"] == "NOT_READY" and bad["connectionStatus"] == "Disconnected"
    assert bad["protocolsHealth"] == [{"Relay": "NOT_READY", "desc": "No connected peers"},
                                      {"Bridge": "NOT_READY", "desc": "thread store-tail is not running"}]
    assert codec.health_report(4, 4, {}, [])["connectionStatus"] == "Connected"
    starting = codec.health_report(4, 4, {"Filter": True}, [], starting=["Filter"])
    assert starting["protocolsHealth"] == [{"Filter": "NOT_READY", "desc": "Starting"}]


def test_cache_keeps_subscribed_topics_and_capacity():
    cache = MessageCache(3, ("/t/a",))
    for i in range(5):
        cache.add("/t/a", WakuMessage(payload=b"%d" % i, content_topic="c"))
    cache.add("/t/b", WakuMessage(payload=b"x", content_topic="c"))  # not subscribed
    assert [m.payload for m in cache.take(pubsub_topic="/t/a") or []] == [b"2", b"3", b"4"]
    assert cache.take(pubsub_topic="/t/a") == [] and cache.take(pubsub_topic="/t/b") is None
    cache.content_topics.add("c")
    cache.add("/t/b", WakuMessage(payload=b"y", content_topic="c"))
    assert [m.payload for m in cache.take(content_topic="c") or []] == [b"y"]
    cache.unsubscribe(pubsub_topic="/t/a")
    assert cache.take(pubsub_topic="/t/a") is None


def test_origin_regex():
    assert origin_regex(()) is None
    rx = re.compile(origin_regex(("localhost:*", "https://app.example")) or "")
    assert rx.fullmatch("http://localhost:3000") and rx.fullmatch("https://app.example")
    assert not rx.fullmatch("http://evil.example") and not rx.fullmatch("http://app.example")


def test_filter_bodies_and_messages():
    req = codec.filter_request({"requestId": "1", "contentFilters": ["/a/1/b/proto"], "pubsubTopic": ""})
    assert req == codec.FilterRequest("1", None, ("/a/1/b/proto",))
    assert codec.filter_request({"requestId": "2"}, topics=False) == codec.FilterRequest("2")
    for body, words in [({"contentFilters": []}, "Field `requestId` is missing"),
                        ({"requestId": "1"}, "Field `contentFilters` is missing"),
                        ({"requestId": "1", "contentFilters": [1]}, "Field `contentFilters` is missing"),
                        ([], "expected an object")]:
        with pytest.raises(codec.BadRequest, match=re.escape("Failed to decode request: " + words)):
            codec.filter_request(body)
    msg = WakuMessage(payload=b"hi", content_topic="c", timestamp=3, rate_limit_proof=b"p")
    assert codec.filter_message_json(msg) == {"payload": "aGk=", "contentTopic": "c", "version": 0, "timestamp": 3,
                                              "ephemeral": False}


def test_hex_errors_are_nwaku_texts():
    """nim-stew's hexToSeqByte words (nwaku's parseHash), not Python's."""
    prefix = "Exception converting hex string to bytes: "
    for value, why in [("0xtest", "t is not a hexadecimal character"), ("test", "t is not a hexadecimal character"),
                       ("ab#d", "# is not a hexadecimal character"), ("abc", "hex string must have even length"),
                       ("0x" + "a" * 63, "hex string must have even length")]:
        for name in ("cursor", "hashes"):
            with pytest.raises(codec.BadRequest) as err:
                codec.store_request({name: value})
            assert str(err.value) == prefix + why, (name, value)
    with pytest.raises(codec.BadRequest, match="invalid hash length: 2"):
        codec.store_request({"cursor": "0x1234"})
    assert codec.hex_to_bytes("0XaB") == b"\xab"


def test_multiaddr_error_is_nim_libp2p_multiaddress_init():
    """nim-libp2p's MultiAddress.init(string) refusals, in its order (nwaku's store peerAddr)."""
    pid = "16Uiu2HAm1ojMrvoe9h7KYcbRQvDvz4UoVWwLjzrYGtKKaxVrxZbp"
    m = codec.multiaddr_error
    assert m(f"/ip4/127.0.0.1/tcp/1/p2p/{pid}") is None
    assert m(f"/ip4/127.0.0.1/tcp/1/ws/p2p/{pid}/") is None
    assert m("/ip4/1.2.3.4") is None  # a multiaddr: refused later, without /p2p
    assert m("") == m("/") == "multiaddress: Address must not be empty!"
    assert m(f"ip4/127.0.0.1/tcp/1/p2p/{pid}") == "multiaddress: Invalid MultiAddress, must start with `/`"
    assert m(f"/ip4/127.0.0.1/25211/p2p/{pid}") == "multiaddress: Unsupported protocol '25211'"
    assert m("/ip4/1.2.3.4/tcp") == "multiaddress: Missing protocol 'tcp' argument"
    assert m("/ip4/1.2.3.x/tcp/1") == "multiaddress: Error encoding `ip4/1.2.3.x`"
    assert m(f"/ip4/127.0.0.1/tcp/1/p2p/{pid[:-1]}") == f"multiaddress: Error encoding `p2p/{pid[:-1]}`"
