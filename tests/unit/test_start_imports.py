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


def test_the_store_readers_arrow_set_up_runs_off_the_starting_thread(tmp_path):
    """Arrow's one-time NumPy/pandas set-up (0.5-1 s) is done by the store reader ahead of the
    first query, on a thread of its own so that the node's start (a ready /health) does not wait
    for it."""
    code = f"""
import sys, threading
names = []
class Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            names.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, Finder())
from ingest.store.reader import ReaderSettings, StoreReader
StoreReader(ReaderSettings({str(tmp_path / 'messages')!r}))
for t in threading.enumerate():
    if t.name == "store-reader-arrow-set-up":
        t.join()
print(names)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['store-reader-arrow-set-up']"
