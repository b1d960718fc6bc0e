"""tests/benchmarks/capacity.py --quick still runs (issue 70): both nodes (go-waku v0.10.0's own
node, then our whole stack started by tools.local_run), each service's ladder on one step with
go-waku's clients in their own processes, and the JSON line with every flat key. The figures
are the full run's (docs/benchmarks.md); here a step must serve what it was offered."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("relay", "filter", "store", "lightpush")


def test_capacity_quick_runs_every_service_on_both_nodes():
    for binary in ("wakuinterop", "gowaku-node"):
        if not (REPO_ROOT / ".cache" / "interop" / binary).exists():
            pytest.fail(f".cache/interop/{binary} missing: the set-up builds it (bash scripts/setup.sh --with-interop)")
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tests/benchmarks/capacity.py"), "--quick", "--relay-rates", "50",
         "--filter-rates", "40", "--store-rates", "20", "--lightpush-rates", "2", "--lightpush-clients", "4",
         "--store-clients", "4", "--warm", "3", "--window", "6", "--settle", "2", "--p99-ms", "100000",
         # the store job commits a trickle every 3 s, not 30: the lightpush step's settling waits are short
         "--set", "store.max_trigger_delay_s=3"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for side in ("gowaku", "ours"):
        for service in SERVICES:
            for key in (f"{side}_{service}_capacity", f"{side}_{service}_cpu_per_unit_ms"):
                assert key in result, key
            steps = result[side][service]["steps"]
            assert len(steps) == 1 and "error" not in steps[0], (side, service, steps)
            # a p99 bound no machine misses: held means every unit offered in the window was served
            assert steps[0]["held"], (side, service, steps[0])
            assert result[f"{side}_{service}_capacity"] > 0, (side, service)
