"""Relay codec and validator, ingest record encoding, identity file, bridge settings, CRC32C."""
from __future__ import annotations

import hashlib
import os
import stat

import pytest
from libp2p.pubsub.pb import rpc_pb2

from core.config import ConfigError, load_config
from core.message import message_hash
from core.records import ingest_key, ingest_value
from ingest.identity import IdentityError, load_or_create_key, peer_id_of
from ingest.relay.codec import (
    DEFAULT_PUBSUB_TOPIC,
    Limits,
    Reject,
    check_pubsub_topic,
    decode_waku_message,
    relay_message_id,
)
from ingest.relay.validator import WakuMessageValidator
from ingest.settings import BridgeSettings
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage

CT = "/waku/2/default-content/proto"


def test_relay_message_id_is_sha256_of_data():
    data = WakuMessage(payload=b"x", content_topic=CT).SerializeToString()
    assert relay_message_id(data) == hashlib.sha256(data).digest()


@pytest.mark.parametrize("topic,ok", [
    (DEFAULT_PUBSUB_TOPIC, True), ("/waku/2/rs/0/0", True), ("/waku/2/rs/1/1023", True),
    ("/waku/2/rs/65535/7", True), ("/waku/2/rs/1/1024", False), ("/waku/2/rs/70000/1", False),
    ("/waku/2/rs/a/1", False), ("/waku/2/other", False), ("", False),
])
def test_pubsub_topics(topic, ok):
    assert (check_pubsub_topic(topic) is None) == ok


def _pubsub(msg: WakuMessage | bytes, **fields) -> rpc_pb2.Message:
    data = msg if isinstance(msg, bytes) else msg.SerializeToString()
    return rpc_pb2.Message(data=data, topicIDs=[DEFAULT_PUBSUB_TOPIC], **fields)


GOOD = WakuMessage(payload=b"hello", content_topic=CT, timestamp=1, meta=b"m" * 64)


@pytest.mark.parametrize("msg,reason", [
    (_pubsub(GOOD), None),
    (_pubsub(GOOD, signature=b"sig"), Reject.SIGNED),
    (_pubsub(GOOD, key=b"key"), Reject.SIGNED),
    (_pubsub(GOOD, from_id=b"\x00\x01peer"), Reject.AUTHORED),
    (_pubsub(GOOD, seqno=b"\x00" * 8), Reject.AUTHORED),
    (_pubsub(WakuMessage(payload=b"x" * 153_600, content_topic=CT)), Reject.OVERSIZED),
    (_pubsub(b"\xff\xff\xff"), Reject.UNDECODABLE),
    (_pubsub(WakuMessage(payload=b"x")), Reject.EMPTY_CONTENT_TOPIC),
    (_pubsub(WakuMessage(payload=b"x", content_topic=CT, meta=b"m" * 65)), Reject.META_TOO_LONG),
])
def test_validator_reasons(msg, reason):
    rejected = []
    validator = WakuMessageValidator(Limits(), on_reject=rejected.append)
    decoded, why = validator.check(msg)
    assert why == reason
    assert (decoded is not None) == (reason is None)
    assert validator(None, msg) == (reason is None)
    assert rejected == ([] if reason is None else [reason])


def test_size_limit_is_on_the_encoded_message_and_configurable():
    msg = WakuMessage(payload=b"x" * 1000, content_topic=CT).SerializeToString()
    assert decode_waku_message(msg, Limits(max_message_bytes=len(msg)))[1] is None
    assert decode_waku_message(msg, Limits(max_message_bytes=len(msg) - 1))[1] == Reject.OVERSIZED


def test_ingest_record_embeds_the_message_as_received():
    msg = WakuMessage(payload=b"p" * 500, content_topic=CT, timestamp=1_700_000_000_000_000_000, meta=b"m",
                      ephemeral=True)
    data = msg.SerializeToString() + b"\xa8\x1f\x01"  # plus an unknown field, kept as is
    value = ingest_value(DEFAULT_PUBSUB_TOPIC, data, 1234.5678, "16Uiu2bridge")
    rec = pr.IngestRecord()
    rec.ParseFromString(value)
    assert rec.pubsub_topic == DEFAULT_PUBSUB_TOPIC
    assert rec.received_time == 1234.5678
    assert rec.source == pr.RELAY
    assert rec.bridge_id == "16Uiu2bridge"
    assert rec.message.SerializeToString() == data
    assert value.endswith(data)


def test_ingest_key_is_the_message_hash():
    msg = WakuMessage(payload=bytes.fromhex("010203045445535405060708"), content_topic=CT,
                      timestamp=0x175789BFA23F8400, meta=bytes.fromhex("73757065722d736563726574"))
    assert ingest_key(DEFAULT_PUBSUB_TOPIC, msg).hex() == \
        "64cce733fed134e83da02b02c6f689814872b1a0ac97ea56b76095c3c72bfe05"
    msg.ClearField("meta")
    assert ingest_key(DEFAULT_PUBSUB_TOPIC, msg).hex() == \
        "a2554498b31f5bcdfcbf7fa58ad1c2d45f0254f3f8110a85588ec3cf10720fd8"
    legacy = WakuMessage(payload=b"x", content_topic=CT, legacy_timestamp=2.5)
    assert ingest_key(DEFAULT_PUBSUB_TOPIC, legacy) == message_hash(DEFAULT_PUBSUB_TOPIC, b"x", CT, None, 2_500_000_000)


def test_key_file_created_once_and_reloaded(tmp_path):
    path = tmp_path / "sub" / "key"
    kp, created = load_or_create_key(path)
    assert created
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    kp2, created2 = load_or_create_key(path)
    assert not created2
    assert peer_id_of(kp) == peer_id_of(kp2)


def test_key_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a key")
    with pytest.raises(IdentityError, match="holds neither a hex node key nor a libp2p private key"):
        load_or_create_key(bad)
    with pytest.raises(IdentityError, match="is a directory"):
        load_or_create_key(tmp_path)
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked"
        locked.write_bytes(b"x")
        locked.chmod(0)
        with pytest.raises(IdentityError, match="cannot read key file"):
            load_or_create_key(locked)


def test_bridge_settings_defaults():
    s = BridgeSettings.from_config(load_config(environ={}))
    assert s.pubsub_topics == (DEFAULT_PUBSUB_TOPIC,)
    assert (s.tcp_port, s.ws_port) == (60000, 8000)
    assert s.key_file.endswith("var/bridge/key")
    assert s.limits == Limits(153_600, 64)
    assert s.messages_topic == "waku.messages"


@pytest.mark.parametrize("override,message", [
    ("bridge.pubsub_topics=/waku/2/rs/1/5000", "bridge.pubsub_topics"),
    ("bridge.pubsub_topics=", "at least one pubsub topic"),
    ("bridge.static_peers=/ip4/127.0.0.1/tcp/1", "bridge.static_peers"),
    ("bridge.tcp_port=70000", "bridge.tcp_port: expected a port"),
    ("bridge.ws_port=-2", "bridge.ws_port"),
    ("bridge.producer_max_outstanding=0", "bridge.producer_max_outstanding"),
    ("bridge.max_rpc_bytes=1000", "must exceed limits.max_message_bytes"),
])
def test_bridge_settings_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        BridgeSettings.from_config(load_config([override], environ={}))


def test_kafka_crc32c_is_fast_and_correct():
    from kafka.record import default_records
    from kafka.record._crc32c import crc as reference

    from ingest.kafka_producer import crc32c_implementation

    assert crc32c_implementation() == "crc32c package"
    assert default_records.calc_crc32c is not reference
    data = os.urandom(10_000)
    assert default_records.calc_crc32c(memoryview(data)) == reference(data)
