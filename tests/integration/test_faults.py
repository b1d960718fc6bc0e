"""The fault-injection benchmark's quick mode (tests/benchmarks/faults.py --quick) as a test:
kill -9 of the broker, each Spark job's driver, the bridge and the store service under load,
each restarted; nothing the bridge acknowledged may be lost or stored twice, the subscriptions
table must equal what the bridge answered, and store walks must stay exact.

Its own broker, jobs and bridges (it kills them), on free ports in a temporary directory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = 20261123


def test_kill_minus_nine_everything_under_load_loses_nothing(tmp_path):
    print(f"seed {SEED}")
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests/benchmarks/faults.py"), "--quick", "--seed", str(SEED),
         "--keep", str(tmp_path / "run")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=1200)
    print(proc.stderr[-4000:])
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    assert lines, (f"faults.py exited {proc.returncode} without its JSON line; stderr's end:\n"
                   f"{proc.stderr[-4000:]}")
    result = json.loads(lines[-1])
    result.pop("fault_log", None)
    print(result)
    assert result["faults"] == 6
    assert result["accepted"] > 500
    assert result["lost"] == 0 and result["lost_in_kafka"] == 0
    assert result["duplicated"] == 0
    assert result["subscriptions_match"], (result["subscriptions_expected"], result["subscriptions_in_table"])
    assert result["walks"] > 0 and result["walks_inexact"] == 0
    assert result["final_walk_exact"]
    assert proc.returncode == 0
