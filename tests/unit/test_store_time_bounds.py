"""Store v3 time bounds from js-waku: it encodes a Date as `BigInt(getTime() * 1e6)` in float64,
which is not the millisecond's exact nanoseconds unless the millisecond is divisible by 4. The
server reads exactly such a rounding as the whole millisecond (a window bounded by a message's
timestamp finds it); any other bound is taken as sent."""
from __future__ import annotations

import random

from core.store_page import StoredMessage, StoreLimits, StoreQuery, in_window
from ingest.store.codec_v3 import decode_request, request
from ingest.store.protocol import plan_v3, whole_millisecond

SEED = 20261126


def js_nanos(ms: int) -> int:
    """What js-waku sends for a Date of `ms`: IEEE double multiply (as JavaScript does), then BigInt."""
    return int(float(ms) * 1e6)


def test_js_rounded_bounds_find_messages_at_those_milliseconds():
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    base = 1_764_000_000_000
    found_before = found = 0
    for i in range(60):
        ms = base + i * rng.randrange(1, 1000)
        ts = ms * 1_000_000  # the message's timestamp: a whole millisecond, exact
        m = StoredMessage(1.0, b"d" * 32, "/waku/2/rs/1/0", "/a/1/b/proto", timestamp=ts)
        raw = StoreQuery(time_start=js_nanos(ms), time_end=js_nanos(ms))
        found_before += in_window(m, raw)
        req = decode_request(request("r", time_start=js_nanos(ms), time_end=js_nanos(ms)))
        plan, refusal = plan_v3(req, StoreLimits())
        assert refusal is None and plan is not None
        found += in_window(m, plan.query)
    assert found == 60
    assert found_before < 30  # about a quarter of whole milliseconds survive the rounding


def test_other_bounds_are_taken_as_sent():
    for bound in (0, 1, 1_764_000_000_123_456_789, 1_764_000_000_001_000_000, -5, 2**63 - 1,
                  js_nanos(1_764_000_000_001) + 1):
        assert whole_millisecond(bound) == bound
    assert whole_millisecond(js_nanos(1_764_000_000_001)) == 1_764_000_000_001_000_000
