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

from tools.processes import stop_process

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED = 20261123


def run_faults(args: list[str], work: Path, timeout_s: float) -> tuple[int, dict]:
    """faults.py with `args` to its JSON result, its output in work/out.txt and work/err.txt.
    However the test ends (its timeout, a failure, Ctrl-C), faults.py gets SIGTERM and up to
    180 s to stop every process it started (they run in sessions of their own: a SIGKILL of
    faults.py alone would leave them running under the rest of the suite)."""
    work.mkdir(parents=True, exist_ok=True)
    out, err = work / "out.txt", work / "err.txt"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen([sys.executable, str(REPO_ROOT / "tests/benchmarks/faults.py"), *args,
                                 "--keep", str(work / "run")], cwd=REPO_ROOT, stdout=o, stderr=e)
        try:
            code = proc.wait(timeout_s)
        finally:
            stop_process(proc, 180)
    stderr = err.read_text()
    print(stderr[-6000:])
    lines = [ln for ln in out.read_text().strip().splitlines() if ln.startswith("{")]
    assert lines, f"faults.py exited {code} without its JSON line; stderr's end:\n{stderr[-4000:]}"
    return code, json.loads(lines[-1])


@pytest.mark.timeout(1500)
def test_kill_minus_nine_everything_under_load_loses_nothing(tmp_path):
    print(f"seed {SEED}")
    code, result = run_faults(["--quick", "--seed", str(SEED)], tmp_path, 1200)
    result.pop("fault_log", None)
    print(result)
    assert result["faults"] == 6
    assert result["accepted"] > 500
    assert result["lost"] == 0 and result["lost_in_kafka"] == 0
    assert result["duplicated"] == 0
    assert result["subscriptions_match"], (result["subscriptions_expected"], result["subscriptions_in_table"])
    assert result["walks"] > 0 and result["walks_inexact"] == 0
    assert result["final_walk_exact"]
    assert code == 0
