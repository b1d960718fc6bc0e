"""The store's validation rules, declared once for both sides.

A record of `waku.messages` is stored only if it breaks none of these rules (and is not
ephemeral); otherwise it is refused with the name of the first rule it breaks (rules run in
declaration order). Here is each rule's name, meaning, limits and the plain-Python check. Two
sides apply them:

- the Spark store job (`pipeline/store/validation.py`): one Spark predicate per rule name,
  evaluated in the JVM, plus the great-expectations expectation for the stored table; it
  refuses to import when its predicates and this list differ;
- the store service's fresh tail (`ingest/store/tail.py`): `decode_ingest` + `rejection_reason`
  on every record it follows from Kafka, so that store queries see a not yet committed message
  only when the store job will store it.

`decode_ingest` reads an IngestRecord as the job's JVM decoder does
(`pipeline/spark/records.py`): implicit-presence proto3 fields that are absent are their
default value, absent optional fields are None, the sender timestamp is field 10 or an old
peer's seconds double (field 4) in nanoseconds. `tests/integration/test_store_freshness.py`
proves both sides give the same reason on every kind of invalid record the load generator
makes (`tools/loadgen.py` INVALID_KINDS).

The rules' `now` (how far in the future a receive time may lie) is the record's own Kafka
timestamp, in Unix seconds: a record is judged the same by both sides, and by every run of the
job over it (a batch run again, a reset checkpoint, a replay a month later). The topics the node
creates stamp records with the broker's clock (`message.timestamp.type=LogAppendTime`,
`core/kafka.py`), so a bridge whose clock runs ahead is caught; on a topic with CreateTime it is
the producing bridge's clock. It was the micro-batch's timestamp until session 18: a literal
that made Spark generate and compile the decoding stage's code again every batch
(docs/decisions.md). A record without a Kafka timestamp (`now` None; Kafka 4 always has one)
breaks `bad_received_time`.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from core.message import Limits as Limits  # re-exported: the limits the rules apply
from core.message import message_hash, store_digest, timestamp_ns

# The earliest receivedTime accepted: 2020-01-01 (Waku v2 did not exist before).
MIN_RECEIVED_TIME = 1_577_836_800.0


@dataclass
class IngestFields:
    """An ingest record's columns, as the store job decodes them (None: null)."""
    decoded: bool
    has_message: bool = False
    pubsub_topic: str | None = None
    received_time: float | None = None
    content_topic: str | None = None
    payload: bytes | None = None
    version: int | None = None
    timestamp: int | None = None
    meta: bytes | None = None
    rate_limit_proof: bytes | None = None
    ephemeral: bool = False
    bridge_id: str | None = None

    @property
    def message_size(self) -> int:
        """The WakuMessage's variable parts: what the reference nodes' 150 KiB limit bounds."""
        return (len(self.payload or b"") + len(self.meta or b"") + len((self.content_topic or "").encode())
                + len(self.rate_limit_proof or b""))

    @property
    def digest(self) -> bytes:
        return store_digest(self.content_topic or "", self.payload or b"")

    @property
    def message_hash(self) -> bytes:
        return message_hash(self.pubsub_topic or "", self.payload or b"", self.content_topic or "", self.meta,
                            self.timestamp)


def decode_ingest(value: bytes | None) -> IngestFields:
    """The columns of one `waku.messages` value (not an IngestRecord: decoded False)."""
    from google.protobuf.message import DecodeError

    from schemas import pipeline_records_pb2 as pr

    if value is None:
        return IngestFields(False)
    rec = pr.IngestRecord()
    try:
        rec.ParseFromString(value)
    except (DecodeError, ValueError):
        return IngestFields(False)
    f = IngestFields(True, rec.HasField("message"), rec.pubsub_topic, rec.received_time, bridge_id=rec.bridge_id)
    if not f.has_message:
        return f
    m = rec.message
    f.content_topic, f.payload = m.content_topic, m.payload
    f.version = m.version if m.HasField("version") else 0
    f.timestamp = timestamp_ns(m)  # NaN, infinite or beyond int64: None, as Spark's try_cast
    f.meta = m.meta if m.HasField("meta") else None
    f.rate_limit_proof = m.rate_limit_proof if m.HasField("rate_limit_proof") else None
    f.ephemeral = m.ephemeral if m.HasField("ephemeral") else False
    return f


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    # Whether a decoded record satisfies the rule (limits, the record's Kafka timestamp in Unix
    # seconds or None).
    valid: Callable[[IngestFields, Limits, float | None], bool]


def _received_time_ok(f: IngestFields, lim: Limits, now: float | None) -> bool:
    t = f.received_time
    return (t is not None and now is not None and math.isfinite(t)
            and MIN_RECEIVED_TIME <= t <= now + lim.max_future_received_s)


def _timestamp_ok(f: IngestFields, lim: Limits, now: float | None) -> bool:
    if not f.timestamp:
        return True
    if f.received_time is None or math.isnan(f.received_time):
        return False
    return abs(f.timestamp / 1e9 - f.received_time) <= lim.max_clock_skew_s


RULES: tuple[Rule, ...] = (
    Rule("undecodable", "the Kafka value is an IngestRecord",
         lambda f, lim, now: f.decoded),
    Rule("missing_message", "the record carries a WakuMessage",
         lambda f, lim, now: f.has_message),
    Rule("empty_pubsub_topic", "pubsub topic is not empty",
         lambda f, lim, now: bool(f.pubsub_topic)),
    Rule("empty_content_topic", "content topic is not empty",
         lambda f, lim, now: bool(f.content_topic)),
    Rule("oversized_message", "payload + meta + content topic + proof fit the message size limit",
         lambda f, lim, now: f.message_size <= lim.max_message_bytes),
    Rule("oversized_meta", "meta is at most max_meta_bytes",
         lambda f, lim, now: f.meta is None or len(f.meta) <= lim.max_meta_bytes),
    Rule("bad_received_time", "received time is present, finite, after 2020 and not later than the "
         "record's Kafka timestamp by more than max_future_received_s",
         _received_time_ok),
    Rule("timestamp_skew", "sender timestamp, when present, is within max_clock_skew_s of received time",
         _timestamp_ok),
)

RULE_NAMES: tuple[str, ...] = tuple(r.name for r in RULES)


def rejection_reason(f: IngestFields, limits: Limits, now: float | None) -> str | None:
    """The name of the first rule the record breaks, or None when it is valid. `now`: the
    record's Kafka timestamp in Unix seconds (None: it has none)."""
    for rule in RULES:
        if not rule.valid(f, limits, now):
            return rule.name
    return None
