"""The bridge's start path loads only what every node needs: the suite (logos-delivery-interop-
tests) gives a restarted node 10 s to answer /health, on a loaded machine. Discovery v5 and the
RLN service (its chain client, eth_abi) are imported where a node turns them on, and nothing
of the Spark side (pyspark, delta-spark, great-expectations) is ever on it."""
from __future__ import annotations

import subprocess
import sys

from core.config import REPO_ROOT

NOT_AT_START = ("ingest.discv5.service", "ingest.rln.service", "ingest.rln.chain", "eth_abi",
                "pyspark", "delta", "great_expectations")


def test_the_start_path_does_not_import_optional_or_spark_modules():
    code = ("import sys, ingest.cli, ingest.node, ingest.rest.server, ingest.rest.app; "
            f"print(','.join(m for m in {NOT_AT_START!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
