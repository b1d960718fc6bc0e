"""The filter path as deployed, end to end, in a small run of tests/benchmarks/filter_match.py:
the subscriptions and filter jobs through ./spark-submit.sh (real-time mode and the resident
criteria: the defaults), a bridge process, libp2p filter clients in another process subscribing
while messages flow, producers in their own processes. Every push a client was owed arrives,
every subscription made during the run is pushed to, and every synthetic match (criteria in Delta
before the job started, including a fan-out topic) becomes a push record; SIGTERM stops the job's
real-time query before its SparkContext.

Timing goals are the benchmark's business (docs/benchmarks.md): here the figures are printed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_realtime_filter_pushes_everything_owed_including_new_subscriptions():
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests/benchmarks/filter_match.py"), "--peers", "1000", "--rate", "300",
         "--seconds", "35", "--clients", "10", "--client-procs", "1", "--producers", "1", "--fanout", "100"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    print(proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The result is the last JSON line (a child's stray console output may follow it).
    lines = proc.stdout.strip().splitlines()
    at = max(i for i, line in enumerate(lines) if line.startswith("{"))
    if lines[at + 1:]:
        print("after the result on stdout:", lines[at + 1:][:5])
    result = json.loads(lines[at])
    print(result)
    assert result["trigger"] == "realtime"
    assert result["client_pushes_expected"] > 100
    assert result["client_missing"] == 0, result
    assert result["new_subscriptions"] == 10 and result["new_subscriptions_never_pushed"] == 0, result
    assert result["synthetic_missing"] == 0, result
    assert result["fanout_records"] >= result["fanout_expected"] > 0, result
    assert result["missing"] == 0
    # SIGTERM stopped the job's real-time query before its SparkContext (jvm/ StopQueriesFirst).
    assert result["filter_job_stop"] == "stopped", result
