"""js-waku filter push latency through the whole path: relay -> bridge -> Kafka -> filter job ->
push topic -> pusher -> js-waku (`@waku/sdk` 0.0.36).

    .venv/bin/python tests/benchmarks/js_push_latency.py [--rates 10,50,200] [--seconds 10]

Runs itself under pytest with the interop environment (tests/interop/conftest.py: embedded
Kafka, the store, subscriptions and filter jobs in one local[2] SparkSession with the filter
job's 0.2 s micro-batches, a `waku-bridge run` process, a py-libp2p relay peer). For each rate a
new js-waku subscriber (tests/interop/js `filter`) subscribes to a content topic of its own;
`rate x seconds` messages are relayed into the bridge on a fixed schedule; latency is js-waku's
arrival clock minus the message timestamp (same machine). Statistics: tests/benchmarks/stats.py
(nearest rank, over every message published; one not at js-waku `120 + seconds` s after the
last publish counts in `missing` and as +inf, a percentile falling on it is null). Reported per
rate: p50/p99/max over all messages and without the subscription's first second, the bridge's
part (`pusher_*`: arrival minus the push record's time in the push topic, i.e. after the filter
job), `missing`, the last arrival after the last publish, first-to-last publish and arrival
spans, the achieved rate, duplicates, and the load average before and after. The last line is
one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest

from tests.benchmarks.stats import INF, latency_summary
from tests.interop.conftest import Interop, interop  # noqa: F401 - the fixture, for pytest
from tests.interop.test_js_push_rate import publish_steady, push_latencies, stop, subscribe_js, topic

pytestmark = pytest.mark.integration


def test_js_push_latency(interop: Interop):  # noqa: F811 - the fixture
    if "JS_PUSH_BENCH_OUT" not in os.environ:
        pytest.skip("a benchmark: run this file as a script")
    rates = [float(r) for r in os.environ["JS_PUSH_BENCH_RATES"].split(",")]
    seconds = float(os.environ["JS_PUSH_BENCH_SECONDS"])
    runs = []
    for rate in rates:
        ct = topic(f"pushbench-{uuid.uuid4().hex[:6]}")
        client = subscribe_js(interop, ct)
        before = os.getloadavg()
        try:
            sent = publish_steady(interop, int(rate * seconds), rate, f"b{int(rate)}", ct)
            got = push_latencies(client, sent, timeout=120 + seconds, env=interop, allow_missing=True)
        finally:
            stop(client)
        after = os.getloadavg()
        first_ts = sent[0][1]
        steady = [lat for (_, ts), lat in zip(sent, got["latencies"], strict=True) if ts - first_ts >= 1e9]
        run = {k: v for k, v in got.items() if k != "latencies"}
        after_first = latency_summary([x for x in steady if x != INF], len(steady))
        run.update(offered_rate=rate, p99_after_first_s=after_first.p99, p50_after_first_s=after_first.p50,
                   load_before=[round(x, 2) for x in before], load_after=[round(x, 2) for x in after])
        print(json.dumps(run), flush=True)
        runs.append(run)
    Path(os.environ["JS_PUSH_BENCH_OUT"]).write_text(json.dumps({"seconds": seconds, "runs": runs}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="10,50,200")
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="js-push-bench-")) / "result.json"
    os.environ.update(JS_PUSH_BENCH_RATES=args.rates, JS_PUSH_BENCH_SECONDS=str(args.seconds),
                      JS_PUSH_BENCH_OUT=str(out))
    code = pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"])
    if code != 0 or not out.exists():
        print(json.dumps({"error": f"pytest exited {code}"}))
        return 1
    print(json.dumps(json.loads(out.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
