"""tests/benchmarks/store_vs_postgres.py --quick still runs (issue 71): it writes a small table,
loads the same rows into nwaku's archive on a private PostgreSQL, pages the same store v3 plan
with go-waku clients against our store service and with nwaku's SQL against PostgreSQL, measures
nwaku's InsertRow, and prints its JSON line. (Our ingest is store_ingest.py's own benchmark, and
retention runs the maintain job: both left out here, as the figures come from full runs.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.config import REPO_ROOT

pytestmark = pytest.mark.integration


def test_store_vs_postgres_quick_runs_both_sides():
    from tools.nwaku_postgres import PostgresMissing, postgres_bindir

    try:
        postgres_bindir()
    except PostgresMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL's server is missing on CI: {exc}")
        pytest.skip(f"PostgreSQL's server is not installed: {exc}")
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tests/benchmarks/store_vs_postgres.py"), "--quick",
                           "--rows", "20000", "--seconds", "4", "--skip", "ours-ingest", "--skip", "retention"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["delta_rows"] == result["postgres_rows"] == 20_000
    for side in ("ours", "postgres"):
        run = result["query"][side][0]
        assert run["pages"] > 0 and run["errors"] == 0, (side, run)
        assert run["messages"] > 0, (side, run)
    assert result["ours_pages_per_s"] > 0 and result["postgres_pages_per_s"] > 0
    assert result["ours_p99_ms"] is not None and result["postgres_p99_ms"] is not None
    assert result["postgres_ingest_per_s"] > 0
    for key in ("ours_ingest_per_s", "ours_retention_p99_ratio", "postgres_retention_p99_ratio"):
        assert key in result
