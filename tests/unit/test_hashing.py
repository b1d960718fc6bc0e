"""Message hash and store digest against the 14/WAKU2-MESSAGE test vectors."""
import hashlib

import pytest

from core.message import message_hash, store_digest

PUBSUB = "/waku/2/default-waku/proto"
CONTENT = "/waku/2/default-content/proto"
PAYLOAD = bytes.fromhex("010203045445535405060708")
TIMESTAMP = 0x175789BFA23F8400


@pytest.mark.parametrize(
    "meta,payload,expected",
    [
        (bytes.fromhex("73757065722d736563726574"), PAYLOAD,
         "64cce733fed134e83da02b02c6f689814872b1a0ac97ea56b76095c3c72bfe05"),
        (bytes(range(64)), PAYLOAD,
         "7158b6498753313368b9af8f6e0a0a05104f68f972981da42a43bc53fb0c1b27"),
        (None, PAYLOAD,
         "a2554498b31f5bcdfcbf7fa58ad1c2d45f0254f3f8110a85588ec3cf10720fd8"),
        (bytes.fromhex("73757065722d736563726574"), b"",
         "483ea950cb63f9b9d6926b262bb36194d3f40a0463ce8446228350bd44e96de4"),
    ],
)
def test_message_hash_vectors(meta, payload, expected):
    assert message_hash(PUBSUB, payload, CONTENT, meta, TIMESTAMP).hex() == expected


def test_absent_timestamp_hashes_eight_zero_bytes():
    expected = hashlib.sha256(PUBSUB.encode() + PAYLOAD + CONTENT.encode() + bytes(8)).digest()
    assert message_hash(PUBSUB, PAYLOAD, CONTENT, None, None) == expected


def test_negative_timestamp_is_twos_complement_big_endian():
    expected = hashlib.sha256(PUBSUB.encode() + b"" + CONTENT.encode() + b"\xff" * 8).digest()
    assert message_hash(PUBSUB, b"", CONTENT, None, -1) == expected


def test_store_digest_is_sha256_of_content_topic_then_payload():
    assert store_digest(CONTENT, PAYLOAD) == hashlib.sha256(CONTENT.encode() + PAYLOAD).digest()
    # plain concatenation, as the spec defines it (no length prefix)
    assert store_digest("a", b"b") == store_digest("ab", b"")


def test_unrepresentable_legacy_timestamps_hash_as_no_timestamp():
    """An old peer's seconds timestamp (field 4) that is NaN, infinite or beyond int64 in ns is no
    timestamp (as Spark's try_cast), never an exception in the bridge's relay sink."""
    from core.message import hash_of, timestamp_ns
    from schemas.waku_message_pb2 import WakuMessage

    plain = hash_of("/waku/2/rs/1/0", WakuMessage(payload=b"p", content_topic="/a/1/b/proto"))
    for bad in (float("nan"), float("inf"), float("-inf"), 1e300, -1e300, 9.3e9):
        m = WakuMessage(payload=b"p", content_topic="/a/1/b/proto", legacy_timestamp=bad)
        assert timestamp_ns(m) is None, bad
        assert hash_of("/waku/2/rs/1/0", m) == plain
    assert timestamp_ns(WakuMessage(legacy_timestamp=1.5)) == 1_500_000_000
