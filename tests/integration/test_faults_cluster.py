"""The fault run in the production topology (tests/benchmarks/faults.py --topology cluster --quick)
as a test: SeaweedFS's S3 gateway holding the tables and checkpoints, a 3-broker Kafka cluster
(replication 3, min.insync.replicas 2), a Spark master and 2 workers running the store,
subscriptions and filter jobs, bridge A and the store service B on S3, under relay, lightpush,
filter and store-walk load. kill -9 in turn of the Kafka node leading waku.messages-0, a Spark
worker (with its executors), the S3 server and bridge A, each restarted:
nothing acknowledged may be lost or stored twice, the subscriptions table must equal what A
answered, store walks through B (reading the S3 table) must stay exact, and pushes must resume.

Its own S3 server, Kafka cluster, Spark cluster, jobs and bridges (it kills them), on free ports in
a temporary directory; it waits on progress, not on fixed deadlines."""
from __future__ import annotations

import pytest

from tests.integration.test_faults import run_faults
from tools.object_store import WEED

pytestmark = pytest.mark.integration

SEED = 20261126


# ~7 min alone on the 2-core machine (start-up ~3 min); the timeout leaves room for a busy one.
@pytest.mark.timeout(2700)
def test_kill_minus_nine_each_piece_of_the_cluster_topology_loses_nothing(tmp_path):
    if not WEED.exists():
        pytest.fail(f"{WEED} missing: the set-up builds it (bash scripts/build_seaweedfs.sh)")
    print(f"seed {SEED}")
    code, result = run_faults(["--topology", "cluster", "--quick", "--seed", str(SEED)], tmp_path, 2400)
    faults = result.pop("fault_log", [])
    print(result)
    assert result["topology"] == "cluster"
    assert result["faults"] == 5
    assert [f["kind"] for f in faults] == ["store job", "kafka broker", "spark worker", "s3", "bridge"]
    # The broker: the other two kept serving (relay into A went on: acks=all needs 2 of 3) while it was down.
    assert "relay published" in faults[1]["kept_going"], faults[1]
    assert all(not f["not_recovered"] for f in faults), faults
    assert result["accepted"] > 300
    assert result["lost"] == 0 and result["lost_in_kafka"] == 0
    assert result["duplicated"] == 0
    assert result["subscriptions_match"], (result["subscriptions_expected"], result["subscriptions_in_table"])
    assert result["walks"] > 0 and result["walks_inexact"] == 0
    assert result["final_walk_exact"] and result["final_walk_rows"] > 0
    assert result["pushes_resumed"]
    assert code == 0
