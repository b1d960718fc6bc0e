"""`python -m tools.local_run` (make run) with `spark.one_driver = true`: the store, subscriptions
and filter queries in one Spark application (jobs/live.py) beside the embedded broker, the
bridge and the demo publisher; the demo's messages reach the Delta store, and SIGTERM stops
everything cleanly (exit 0, the queries stopped before the SparkContext).

Its own broker, jobs and bridge on free ports in a temporary directory."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTED = ("store query started", "subscriptions query started", "filter query started")


def overrides(tmp: Path) -> list[str]:
    return [
        f"embedded_kafka.port={free_port()}", f"embedded_kafka.controller_port={free_port()}",
        f"embedded_kafka.data_dir={tmp / 'kafka'}",
        f"warehouse.root={tmp / 'warehouse'}", f"warehouse.checkpoints={tmp / 'var' / 'checkpoints'}",
        f"bridge.key_file={tmp / 'bridge.key'}", "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0",
        "bridge.ws_port=-1", f"bridge.metrics_port={free_port()}",
        f"job_metrics.store_port={free_port()}", f"job_metrics.subscriptions_port={free_port()}",
        f"job_metrics.filter_port={free_port()}", f"rest.port={free_port()}",
        "spark.one_driver=true",
    ]


def test_make_run_with_the_live_queries_in_one_driver(tmp_path):
    log = tmp_path / "local_run.log"
    argv = [sys.executable, "-m", "tools.local_run", "--no-dashboard", "--demo-rate", "20"]
    for item in overrides(tmp_path):
        argv += ["--set", item]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    job_log = tmp_path / "var" / "live-job.log"
    rows = 0
    try:
        # Waits on progress: the run must keep going, and the rows it reports must grow.
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and proc.poll() is None:
            counts = [int(n) for n in re.findall(r"rows in the Delta store: (\d+)", log.read_text())]
            rows = max(counts, default=0)
            started = job_log.exists() and all(s in job_log.read_text(errors="replace") for s in STARTED)
            if started and rows > 0:
                break
            time.sleep(2)
        assert proc.poll() is None, f"local_run exited {proc.returncode}:\n{log.read_text()[-3000:]}"
        assert rows > 0, f"no rows stored:\n{log.read_text()[-3000:]}"
        text = log.read_text()
        assert "starting the live job" in text
        assert not any(f"starting the {job} job" in text for job in ("store", "subscriptions", "filter"))
        assert all(s in job_log.read_text(errors="replace") for s in STARTED)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(180)
    assert code == 0, log.read_text()[-3000:]
    assert "stopping the live job" in log.read_text()
    # The driver's queries were stopped before its SparkContext (jvm/ StopQueriesFirst).
    assert "before the SparkContext" in job_log.read_text(errors="replace")
