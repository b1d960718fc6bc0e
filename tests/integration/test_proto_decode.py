"""ProtoDecode (jvm/) + pipeline.spark.protobuf: protobuf bytes decoded in the JVM round-trip exactly."""
from __future__ import annotations

import math
import struct

import pytest
from pyspark.sql import types as T

from pipeline.spark.protobuf import from_protobuf, register, spark_schema, udf_name
from schemas import pipeline_records_pb2 as pr
from schemas import waku_message_pb2 as wm

INGEST = "waku.pipeline.v1.IngestRecord"
SUBSCRIPTION = "waku.pipeline.v1.SubscriptionEvent"
PUSH = "waku.pipeline.v1.PushRecord"


# --- fast: no Spark -------------------------------------------------------------------------


def test_spark_schema_ingest_record():
    waku_message = T.StructType(
        [
            T.StructField("payload", T.BinaryType()),
            T.StructField("content_topic", T.StringType()),
            T.StructField("version", T.LongType()),  # uint32: unsigned-safe
            T.StructField("legacy_timestamp", T.DoubleType()),
            T.StructField("timestamp", T.LongType()),  # sint64
            T.StructField("meta", T.BinaryType()),
            T.StructField("rate_limit_proof", T.BinaryType()),
            T.StructField("ephemeral", T.BooleanType()),
        ]
    )
    assert spark_schema(INGEST) == T.StructType(
        [
            T.StructField("pubsub_topic", T.StringType()),
            T.StructField("message", waku_message),
            T.StructField("received_time", T.DoubleType()),
            T.StructField("source", T.StringType()),  # enum → name
            T.StructField("bridge_id", T.StringType()),
        ]
    )
    sub = spark_schema(SUBSCRIPTION)
    assert sub["content_topics"].dataType == T.ArrayType(T.StringType(), True)
    assert sub["op"].dataType == T.StringType()
    assert spark_schema(PUSH)["message_hash"].dataType == T.BinaryType()
    assert udf_name(INGEST) == "waku_decode_waku_pipeline_v1_IngestRecord"
    with pytest.raises(ValueError, match="unknown protobuf message"):
        spark_schema("waku.pipeline.v1.NoSuchRecord")


# --- Spark ----------------------------------------------------------------------------------


# `spark` is the shared session of tests/conftest.py: its jars are the set-up's cache, which
# holds the decoder jar built by jvm/build.sh.


def _decode(spark, values: list[bytes | None], message_name: str) -> list:
    df = spark.createDataFrame(list(enumerate(values)), "id int, value binary")
    rows = df.select("id", from_protobuf("value", message_name).alias("r")).orderBy("id").collect()
    return [row.r for row in rows]


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _b(x) -> bytes | None:
    return None if x is None else bytes(x)


def _expected_waku(m: wm.WakuMessage) -> dict:
    """What the decoder must produce, computed independently from the Python message."""

    def opt(name):
        return getattr(m, name) if m.HasField(name) else None

    return {
        "payload": m.payload,
        "content_topic": m.content_topic,
        "version": opt("version"),
        "legacy_timestamp": opt("legacy_timestamp"),
        "timestamp": opt("timestamp"),
        "meta": opt("meta"),
        "rate_limit_proof": opt("rate_limit_proof"),
        "ephemeral": opt("ephemeral"),
    }


def _row_waku(r) -> dict | None:
    if r is None:
        return None
    d = r.asDict()
    for k in ("payload", "meta", "rate_limit_proof"):
        d[k] = _b(d[k])
    return d


NASTY_BYTES = bytes([0x00, 0xFF, 0x00, 0x80, 0x7F, 0xFF, 0x00])
TIMES = [1712345678.123456789, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, -1.5, math.inf]


def _ingest_records() -> list[pr.IngestRecord]:
    full = wm.WakuMessage(
        payload=NASTY_BYTES,
        content_topic="/waku/2/default-content/proto",
        version=4294967295,  # uint32 max stays positive
        legacy_timestamp=1712345678.5,
        timestamp=-1712345678123456789,  # negative sint64
        meta=b"\x00",
        rate_limit_proof=b"\xff" * 3,
        ephemeral=True,
    )
    zeros = wm.WakuMessage(version=0, timestamp=0, ephemeral=False, meta=b"", legacy_timestamp=0.0)
    bare = wm.WakuMessage(content_topic="/t/1/x/proto")
    return [
        pr.IngestRecord(
            pubsub_topic="/waku/2/rs/0/0",
            message=full,
            received_time=TIMES[0],
            source=pr.RELAY,
            bridge_id="bridge-ü-1",
        ),
        pr.IngestRecord(pubsub_topic="p", message=zeros, received_time=TIMES[1], source=pr.LIGHTPUSH),
        pr.IngestRecord(message=bare, received_time=TIMES[2]),
        pr.IngestRecord(message=wm.WakuMessage(timestamp=-1), received_time=TIMES[3]),
        pr.IngestRecord(message=wm.WakuMessage(timestamp=-(2**63)), received_time=TIMES[4]),
        pr.IngestRecord(message=wm.WakuMessage(timestamp=2**63 - 1), received_time=TIMES[5]),
        pr.IngestRecord(pubsub_topic="no message"),
    ]


def test_ingest_records_round_trip(spark):
    records = _ingest_records()
    rows = _decode(spark, [r.SerializeToString() for r in records], INGEST)
    assert len(rows) == len(records)
    for rec, row in zip(records, rows, strict=True):
        assert row is not None
        assert row.pubsub_topic == rec.pubsub_topic
        assert _bits(row.received_time) == _bits(rec.received_time)
        assert row.source == pr.Source.Name(rec.source)
        assert row.bridge_id == rec.bridge_id
        if rec.HasField("message"):
            assert _row_waku(row.message) == _expected_waku(rec.message)
        else:
            assert row.message is None

    # The cases spelled out.
    full, zeros, bare = rows[0].message, rows[1].message, rows[2].message
    assert bytes(full.payload) == NASTY_BYTES
    assert full.version == 4294967295
    assert full.timestamp == -1712345678123456789
    assert full.ephemeral is True
    assert rows[0].source == "RELAY" and rows[1].source == "LIGHTPUSH"
    assert rows[2].source == "SOURCE_UNSPECIFIED"
    # Present-but-zero optional fields are 0 / False / b"", not null.
    assert zeros.version == 0 and zeros.timestamp == 0 and zeros.ephemeral is False
    assert bytes(zeros.meta) == b"" and zeros.legacy_timestamp == 0.0
    # Absent optional fields are null; absent implicit fields are their defaults.
    assert bare.version is None and bare.timestamp is None and bare.ephemeral is None
    assert bare.meta is None and bare.legacy_timestamp is None and bare.rate_limit_proof is None
    assert bytes(bare.payload) == b""
    assert rows[3].message.timestamp == -1
    assert rows[4].message.timestamp == -(2**63)
    assert rows[5].message.timestamp == 2**63 - 1
    assert rows[6].message is None and rows[6].bridge_id == ""


def test_subscription_events_round_trip(spark):
    events = [
        pr.SubscriptionEvent(
            peer_id="16Uiu2HAm",
            bridge_id="b1",
            op=pr.SUBSCRIBE,
            pubsub_topic="/waku/2/rs/0/1",
            content_topics=["/a/1/x/proto", "", "/b/1/ü/proto", "/a/1/x/proto"],
            event_time=1712345678.987654321,
            request_id="req-1",
            protocol="v2",
        ),
        pr.SubscriptionEvent(peer_id="p2", op=pr.UNSUBSCRIBE_ALL, content_topics=[]),
        pr.SubscriptionEvent(peer_id="p3", op=pr.REFRESH, content_topics=["only"], protocol="v00"),
        pr.SubscriptionEvent(op=pr.EXPIRE),
    ]
    rows = _decode(spark, [e.SerializeToString() for e in events], SUBSCRIPTION)
    for ev, row in zip(events, rows, strict=True):
        assert row.asDict() == {
            "peer_id": ev.peer_id,
            "bridge_id": ev.bridge_id,
            "op": pr.SubscriptionOp.Name(ev.op),
            "pubsub_topic": ev.pubsub_topic,
            "content_topics": list(ev.content_topics),
            "event_time": ev.event_time,
            "request_id": ev.request_id,
            "protocol": ev.protocol,
        }
        assert _bits(row.event_time) == _bits(ev.event_time)
    assert rows[0].content_topics == ["/a/1/x/proto", "", "/b/1/ü/proto", "/a/1/x/proto"]
    assert rows[1].content_topics == []  # absent repeated → empty array, not null
    assert [r.op for r in rows] == ["SUBSCRIBE", "UNSUBSCRIBE_ALL", "REFRESH", "EXPIRE"]


def test_push_records_round_trip(spark):
    pushes = [
        pr.PushRecord(
            peer_id="peer",
            pubsub_topic="/waku/2/rs/0/0",
            message=wm.WakuMessage(payload=b"\x00" * 5 + b"\xff" * 5, content_topic="/c/1/d/proto",
                                   timestamp=-42, meta=b"\xff\x00"),
            message_hash=bytes(range(256))[::-1][:32] + b"\x00",
            protocol="v00",
            request_id="r-9",
        ),
        pr.PushRecord(peer_id="peer2", message_hash=b"\x00" * 32),
    ]
    rows = _decode(spark, [p.SerializeToString() for p in pushes], PUSH)
    for p, row in zip(pushes, rows, strict=True):
        assert row.peer_id == p.peer_id
        assert row.pubsub_topic == p.pubsub_topic
        assert bytes(row.message_hash) == p.message_hash
        assert row.protocol == p.protocol and row.request_id == p.request_id
        expected = _expected_waku(p.message) if p.HasField("message") else None
        assert _row_waku(row.message) == expected
    assert rows[0].message.timestamp == -42 and rows[0].message.version is None
    assert rows[1].message is None


def test_permissive_nulls_and_defaults(spark):
    good = pr.IngestRecord(pubsub_topic="ok").SerializeToString()
    values = [
        b"\xff\xff\xff",  # truncated varint tag
        b"\x0a\x05ab",  # length-delimited field longer than the buffer
        b"\x0a\x02\xff\xfe",  # proto3 string that is not UTF-8
        b"\x12\x03\x0a\x05x",  # nested message truncated
        None,  # null input
        b"",  # empty: every field at its default
        good,
    ]
    rows = _decode(spark, values, INGEST)
    assert rows[:5] == [None] * 5
    assert rows[5].asDict() == {
        "pubsub_topic": "",
        "message": None,
        "received_time": 0.0,
        "source": "SOURCE_UNSPECIFIED",
        "bridge_id": "",
    }
    assert rows[6].pubsub_topic == "ok"
    # A proto3 enum number without a name still decodes (open enum), to a placeholder name.
    unknown_enum = b"\x20\x07"  # field 4 (source) = 7
    [row] = _decode(spark, [unknown_enum], INGEST)
    assert row is not None and row.source == "UNKNOWN_ENUM_VALUE_Source_7"


def test_register_is_idempotent_and_sql_callable(spark):
    name = register(spark, INGEST)
    assert register(spark, INGEST) == name
    rec = pr.IngestRecord(pubsub_topic="sql", source=pr.RELAY).SerializeToString()
    spark.createDataFrame([(rec,)], "value binary").createOrReplaceTempView("proto_decode_t")
    [row] = spark.sql(f"SELECT {name}(value, '{INGEST}') AS r FROM proto_decode_t").collect()
    assert row.r.pubsub_topic == "sql" and row.r.source == "RELAY"


def test_unknown_message_name_fails_clearly(spark):
    # The Python side refuses before Spark runs anything ...
    with pytest.raises(ValueError, match="unknown protobuf message"):
        from_protobuf("value", "waku.pipeline.v1.Nope")
    # ... and the JVM side throws IllegalArgumentException when called with a bad name directly.
    spark.udf.registerJavaFunction("waku_decode_test_bad", "waku.pipeline.ProtoDecode",
                                   spark_schema(INGEST))
    df = spark.createDataFrame([(b"",)], "value binary")
    with pytest.raises(Exception, match="IllegalArgumentException.*unknown protobuf message 'x.Nope'"):
        df.selectExpr("waku_decode_test_bad(value, 'x.Nope')").collect()
