"""The JVM tests' protobuf vectors: real encodings by Python's protobuf (the bridge's encoder) of
WakuMessages, IngestRecords with the PushRecords PushEncode must make of them (without and with
the source record's Kafka coordinates), IngestRecords with what FilterKeys must read of them (the
message hash of every input form, nwaku's own hash vectors among them: the Spark store's decoding
is checked against the same records in tests/integration/test_store_path.py), and a
SubscriptionEvent, with the values each holds; written to jvm/test/vectors.json.

    python jvm/test/make_vectors.py           # rewrite jvm/test/vectors.json
    python jvm/test/make_vectors.py --check   # exit 1 if it differs from what the schemas give

Bytes are hex in the file; doubles are written as Python's repr, which Java parses to the same value.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
OUT = Path(__file__).resolve().parent / "vectors.json"
sys.path.insert(0, str(REPO))

from core.message import hash_of  # noqa: E402  (the repo root is put on the path first)
from schemas import pipeline_records_pb2 as records  # noqa: E402
from schemas import waku_message_pb2 as wm  # noqa: E402

# An unknown field (number 99, a varint): a newer peer's addition, kept by decoders that copy.
UNKNOWN_FIELD = bytes([0x98, 0x06, 0x2A])
# The source coordinates of the `push_with_source` vectors (an offset past 32 bits).
SOURCE_PARTITION = 3
SOURCE_OFFSET = 2**33 + 5


def message_fields(m: wm.WakuMessage) -> dict[str, Any]:
    """The values ProtoDecode gives, by field name; null for absent fields with presence."""

    def opt(name: str) -> Any:
        return getattr(m, name) if m.HasField(name) else None

    return {
        "payload": m.payload.hex(),
        "content_topic": m.content_topic,
        "version": opt("version"),
        "legacy_timestamp": opt("legacy_timestamp"),
        "timestamp": opt("timestamp"),
        "meta": m.meta.hex() if m.HasField("meta") else None,
        "rate_limit_proof": m.rate_limit_proof.hex() if m.HasField("rate_limit_proof") else None,
        "ephemeral": opt("ephemeral"),
    }


def messages() -> list[dict[str, Any]]:
    cases = [
        ("empty", wm.WakuMessage()),
        ("minimal", wm.WakuMessage(payload=b"hello", content_topic="/app/1/chat/proto")),
        ("every_field", wm.WakuMessage(
            payload=bytes(range(256)), content_topic="/waku/2/default-content/proto", version=1,
            timestamp=1_732_615_200_123_456_789, meta=b"\x01\x02", rate_limit_proof=b"\xff" * 32,
            ephemeral=True)),
        ("unsigned_and_negative", wm.WakuMessage(
            content_topic="/t/1/unicode-\u00e9\u4e2d\U0001f600/proto", version=4_294_967_295,
            timestamp=-1, ephemeral=False)),
        ("legacy_timestamp", wm.WakuMessage(payload=b"old", content_topic="/t/1/a/b", legacy_timestamp=1.5e9)),
        ("explicit_zeros", wm.WakuMessage(version=0, timestamp=0, meta=b"", rate_limit_proof=b"")),
    ]
    out = []
    for name, m in cases:
        out.append({"name": name, "hex": m.SerializeToString().hex(), "fields": message_fields(m)})
    m = wm.WakuMessage(payload=b"x", content_topic="/t/1/u/proto")
    out.append({"name": "unknown_field", "hex": (m.SerializeToString() + UNKNOWN_FIELD).hex(),
                "fields": message_fields(m)})
    return out


def ingests() -> list[dict[str, Any]]:
    """IngestRecords and the PushRecord of each for peer "16Uiu2peer", hash 0xab*32, "v2", "req-1":
    `push` without source coordinates, `push_with_source` from partition SOURCE_PARTITION at
    offset SOURCE_OFFSET, `push_fanout` the same as a fan-out to that peer and to "16Uiu2other"
    (no protocol, no request id)."""
    message = wm.WakuMessage(payload=b"push me", content_topic="/app/1/push/proto", timestamp=42).SerializeToString()
    odd_message = message + UNKNOWN_FIELD  # copied byte for byte, never re-encoded
    cases = [
        ("full", records.IngestRecord(
            pubsub_topic="/waku/2/rs/1/0", received_time=1732615200.25, source=records.RELAY, bridge_id="b1"),
         message),
        ("no_topic_no_time", records.IngestRecord(source=records.LIGHTPUSH), message),
        ("message_with_unknown_field", records.IngestRecord(pubsub_topic="/waku/2/rs/1/7"), odd_message),
        ("empty_message", records.IngestRecord(pubsub_topic="/waku/2/rs/1/0", received_time=1.0), b""),
    ]
    out = []
    for name, ingest, raw in cases:
        ingest.message.SetInParent()
        ingest.message.ParseFromString(raw)
        push = records.PushRecord(peer_id="16Uiu2peer", pubsub_topic=ingest.pubsub_topic, message_hash=b"\xab" * 32,
                                  protocol="v2", request_id="req-1", received_time=ingest.received_time)
        push.message.CopyFrom(ingest.message)
        assert push.message.SerializeToString() == raw  # unknown fields kept, in place
        with_source = records.PushRecord()
        with_source.CopyFrom(push)
        with_source.source_partition, with_source.source_offset = SOURCE_PARTITION, SOURCE_OFFSET
        fanout = records.PushRecord()
        fanout.CopyFrom(with_source)
        fanout.ClearField("peer_id")
        fanout.ClearField("protocol")
        fanout.ClearField("request_id")
        fanout.targets.add(peer_id="16Uiu2peer", protocol="v2", request_id="req-1")
        fanout.targets.add(peer_id="16Uiu2other")
        out.append({"name": name, "hex": ingest.SerializeToString().hex(), "message": raw.hex(),
                    "push": push.SerializeToString().hex(), "push_with_source": with_source.SerializeToString().hex(),
                    "push_fanout": fanout.SerializeToString().hex()})
    return out


# nwaku's deterministic message hash vectors (tests/waku_core/test_message_digest.nim, v0.38.1):
# (name, payload, meta, the hash nwaku computes) on /waku/2/rs/0/0, its default content topic and
# timestamp getNanosecondTime(1681964442).
NWAKU_PUBSUB = "/waku/2/rs/0/0"
NWAKU_CONTENT = "/waku/2/default-content/proto"
NWAKU_PAYLOAD = bytes.fromhex("010203045445535405060708")
NWAKU_TIMESTAMP = 0x175789BFA23F8400
NWAKU_SECRET = bytes.fromhex("73757065722d736563726574")
NWAKU_HASHES = [
    ("nwaku_meta_empty", NWAKU_PAYLOAD, b"", "cccab07fed94181c83937c8ca8340c9108492b7ede354a6d95421ad34141fd37"),
    ("nwaku_meta_12_bytes", NWAKU_PAYLOAD, NWAKU_SECRET,
     "b9b4852f9d8c489846e8bfc6c5ca6a1a8d460a40d28832a966e029eb39619199"),
    ("nwaku_meta_64_bytes", NWAKU_PAYLOAD, bytes(range(64)),
     "653460d04f66c5b11814d235152f4f246e6f03ef80a305a825913636fbafd0ba"),
    ("nwaku_zero_length_payload", b"", NWAKU_SECRET,
     "0f6448cc23b2db6c696aa6ab4b693eff4cf3549ff346fe1dbeb281697396a09f"),
]


def hash_cases() -> list[tuple[str, str, wm.WakuMessage, str | None]]:
    """(name, pubsub topic, message, the hash it must have or None) for every input of the hash:
    nwaku's vectors; meta absent / empty / present, timestamp absent / zero / negative / the int64
    bounds, ephemeral either way (not hashed), pubsub topic empty or not ASCII."""
    cases: list[tuple[str, str, wm.WakuMessage, str | None]] = []
    for name, payload, meta, want in NWAKU_HASHES:
        m = wm.WakuMessage(payload=payload, content_topic=NWAKU_CONTENT, meta=meta, timestamp=NWAKU_TIMESTAMP)
        cases.append((name, NWAKU_PUBSUB, m, want))
    eph = wm.WakuMessage(payload=NWAKU_PAYLOAD, content_topic=NWAKU_CONTENT, meta=NWAKU_SECRET,
                         timestamp=NWAKU_TIMESTAMP, ephemeral=True)
    cases.append(("nwaku_meta_12_bytes_ephemeral", NWAKU_PUBSUB, eph, NWAKU_HASHES[1][3]))
    eph_false = wm.WakuMessage(payload=NWAKU_PAYLOAD, content_topic=NWAKU_CONTENT, meta=NWAKU_SECRET,
                               timestamp=NWAKU_TIMESTAMP, ephemeral=False)
    cases.append(("nwaku_meta_12_bytes_ephemeral_false", NWAKU_PUBSUB, eph_false, NWAKU_HASHES[1][3]))
    no_meta = wm.WakuMessage(payload=NWAKU_PAYLOAD, content_topic=NWAKU_CONTENT, timestamp=NWAKU_TIMESTAMP)
    cases.append(("nwaku_meta_absent", NWAKU_PUBSUB, no_meta, NWAKU_HASHES[0][3]))  # absent = empty
    plain = {"payload": b"ts", "content_topic": "/t/1/ts/proto"}
    absent = hash_of("/waku/2/rs/1/0", wm.WakuMessage(**plain)).hex()
    cases.append(("timestamp_absent", "/waku/2/rs/1/0", wm.WakuMessage(**plain), absent))
    cases.append(("timestamp_zero", "/waku/2/rs/1/0", wm.WakuMessage(**plain, timestamp=0), absent))  # 0 = absent
    for name, ts in (("timestamp_minus_one", -1), ("timestamp_int64_max", 2**63 - 1),
                     ("timestamp_int64_min", -(2**63))):
        cases.append((name, "/waku/2/rs/1/0", wm.WakuMessage(**plain, timestamp=ts), None))
    cases.append(("pubsub_empty", "", wm.WakuMessage(**plain, timestamp=5), None))
    cases.append(("pubsub_not_ascii", "/waku/2/\u00e9\u4e2d/\U0001f600", wm.WakuMessage(**plain, timestamp=5), None))
    return cases


def filter_keys() -> list[dict[str, Any]]:
    """IngestRecords and what FilterKeys (and the Spark store's decoding,
    tests/integration/test_store_path.py) must read of each: [pubsub topic, content topic, the
    message hash (hex) as core.message.hash_of computes it], or null (no message, no content
    topic, not an IngestRecord)."""
    pubsub = "/waku/2/rs/1/0"
    nan_legacy = wm.WakuMessage(payload=b"n", content_topic="/t/1/n/proto", legacy_timestamp=float("nan"))
    cases: list[tuple[str, bytes, wm.WakuMessage | None, str]] = []
    for v in messages():
        m = wm.WakuMessage.FromString(bytes.fromhex(v["hex"]))
        rec = records.IngestRecord(pubsub_topic=pubsub, received_time=1.5, bridge_id="b1")
        rec.message.ParseFromString(bytes.fromhex(v["hex"]))
        cases.append((v["name"], rec.SerializeToString(), m, pubsub))
    for name, m in (("legacy_nan", nan_legacy),
                    ("legacy_huge", wm.WakuMessage(content_topic="/t/1/h/proto", legacy_timestamp=1e300)),
                    ("both_timestamps", wm.WakuMessage(content_topic="/t/1/b/proto", timestamp=-7,
                                                       legacy_timestamp=2.5))):
        rec = records.IngestRecord(pubsub_topic=pubsub)
        rec.message.CopyFrom(m)
        cases.append((name, rec.SerializeToString(), m, pubsub))
    for name, topic, m, want in hash_cases():
        assert want is None or hash_of(topic, m).hex() == want, name
        rec = records.IngestRecord(pubsub_topic=topic, received_time=2.5, bridge_id="b1")
        rec.message.CopyFrom(m)
        cases.append((name, rec.SerializeToString(), m, topic))
    # the message field twice: protobuf merges the two (content topic of the first, payload of the second)
    first = wm.WakuMessage(content_topic="/t/1/m/proto", payload=b"one").SerializeToString()
    second = wm.WakuMessage(payload=b"two", timestamp=9).SerializeToString()
    merged = wm.WakuMessage.FromString(first + second)
    split = records.IngestRecord(pubsub_topic=pubsub).SerializeToString()
    for part in (first, second):
        split += bytes([0x12, len(part)]) + part
    cases.append(("message_twice", split, merged, pubsub))
    cases.append(("no_message", records.IngestRecord(pubsub_topic=pubsub).SerializeToString(), None, pubsub))
    bad_bridge = records.IngestRecord(pubsub_topic=pubsub).SerializeToString() + bytes([0x2A, 2, 0xC3, 0x28])
    cases.append(("bridge_id_not_utf8", bad_bridge + bytes([0x12, len(first)]) + first, None, pubsub))
    cases.append(("truncated", bytes([0x0A, 5, 0x61]), None, pubsub))
    out = []
    for name, data, m, topic in cases:
        keys = [topic, m.content_topic, hash_of(topic, m).hex()] if m is not None and m.content_topic else None
        out.append({"name": name, "hex": data.hex(), "keys": keys})
    return out


def events() -> list[dict[str, Any]]:
    e = records.SubscriptionEvent(
        peer_id="16Uiu2peer", bridge_id="bridge-a", op=records.SUBSCRIBE, pubsub_topic="/waku/2/rs/1/0",
        content_topics=["/a/1/x/proto", "/a/1/y/proto"], event_time=1732615200.5, request_id="r1", protocol="v2")
    return [{"name": "subscribe", "hex": e.SerializeToString().hex()}]


def vectors() -> str:
    data = {"waku_message": messages(), "ingest": ingests(), "subscription_event": events(),
            "filter_keys": filter_keys()}
    return json.dumps(data, indent=1, ensure_ascii=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="write the JVM tests' protobuf vectors")
    parser.add_argument("--check", action="store_true", help="exit 1 if jvm/test/vectors.json is stale")
    args = parser.parse_args()
    text = vectors()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"error: {OUT.relative_to(REPO)} is stale: run python jvm/test/make_vectors.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
