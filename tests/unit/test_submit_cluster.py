"""The spark-submit glue for cluster masters (docs/cluster.md), without Spark: what a submission
ships, and that a driver importing the packages from the shipped zip still finds the checkout."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from core.config import REPO_ROOT, REPO_ROOT_ENV
from tools import submit


def test_the_python_zip_is_named_by_its_content_and_complete():
    first = submit.python_zip()
    assert submit.python_zip() == first  # same code, same zip: never rewritten under a driver
    names = set(zipfile.ZipFile(first).namelist())
    assert {"core/config.py", "pipeline/spark/protobuf.py", "schemas/waku.desc"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert not any(n.startswith(("ingest/", "tools/", "jobs/")) for n in names)


def test_cluster_masters_get_the_jars_and_the_zip():
    cmd = submit.command("store", ["--master", "spark://127.0.0.1:7077", "--executor-memory", "512m"])
    jars = cmd[cmd.index("--jars") + 1].split(",")
    assert any(j.endswith("waku-proto-decode.jar") for j in jars)
    assert any(os.path.basename(j).startswith("delta-spark") for j in jars)
    assert cmd[cmd.index("--py-files") + 1] == str(submit.python_zip())
    assert cmd[cmd.index("--master") + 1] == "spark://127.0.0.1:7077"
    assert cmd[-1].endswith("jobs/store.py")
    local = submit.command("store", ["--master", "local[2]"])
    assert "--py-files" not in local
    # On a few local cores: Delta's snapshot state in 2 tasks (not 50), VACUUM's listing in 4 (not 10,000).
    assert "spark.databricks.delta.snapshotPartitions=2" in local
    assert "spark.sql.sources.parallelPartitionDiscovery.parallelism=4" in local
    assert "spark.sql.sources.parallelPartitionDiscovery.parallelism=4" not in cmd


def test_a_driver_importing_from_the_zip_finds_the_checkout(tmp_path):
    """spark-submit puts the --py-files zip first on the driver's sys.path: the configuration and
    the protobuf descriptor set must still load."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "import core.config as c; assert '.zip' in c.__file__, c.__file__;"
            "print(c.REPO_ROOT); print(c.load_config([]).get('spark.master'));"
            "from pipeline.spark import protobuf;"
            "print(protobuf.spark_schema('waku.pipeline.v1.IngestRecord') is not None)")
    env = {"PATH": os.environ.get("PATH", ""), REPO_ROOT_ENV: str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", code, str(submit.python_zip())], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    root, master, schema = out.stdout.split()
    assert (root, master, schema) == (str(REPO_ROOT), "local[2]", "True")


def test_store_job_on_a_local_master_gets_its_driver_memory():
    """The store job's local driver holds a whole micro-batch (store.local_driver_memory); the
    user's own --driver-memory or spark.driver.memory wins; other jobs and masters keep Spark's."""
    def memory(job: str, *args: str) -> list[str]:
        cmd = submit.command(job, list(args))
        return [cmd[i + 1] for i, a in enumerate(cmd) if a == "--driver-memory"]

    assert memory("store", "--set", "spark.master=local[2]") == ["4g"]
    assert memory("store", "--set", "store.local_driver_memory=6g") == ["6g"]
    assert memory("store", "--set", "store.local_driver_memory=") == []
    assert memory("store", "--driver-memory", "2g") == ["2g"]
    assert memory("store", "--set", "spark.options=spark.driver.memory=3g") == []
    assert memory("store", "--master", "spark://m:7077") == []
    assert memory("filter") == []


def test_live_job_gets_the_filter_slots_and_two_more_and_the_store_memory():
    """jobs/live.py runs the filter's real-time tasks (one per messages partition) beside the store's
    and subscriptions' batches, and holds the store's micro-batches."""
    def master(job: str, *args: str) -> str:
        cmd = submit.command(job, list(args))
        return cmd[cmd.index("--master") + 1]

    assert master("filter") == "local[4]"
    assert master("live") == f"local[{4 + submit.LIVE_BATCH_SLOTS}]"
    assert master("live", "--set", "spark.master=local[8]") == "local[8]"
    assert master("live", "--set", "filter.trigger=microbatch") == "local[2]"
    cmd = submit.command("live", [])
    assert cmd[cmd.index("--driver-memory") + 1] == "4g"
    assert cmd[-1].endswith("jobs/live.py")


def test_the_store_and_subscriptions_drivers_get_their_jvm_options_on_top_of_the_defaults():
    def java_options(cmd):
        values = [cmd[i + 1] for i, a in enumerate(cmd[:-1])
                  if a == "--conf" and cmd[i + 1].startswith("spark.driver.extraJavaOptions=")]
        return values[-1].split("=", 1)[1] if values else None  # the last --conf wins

    subs = java_options(submit.command("subscriptions", ["--master", "local[2]"]))
    assert subs is not None and "-XX:TieredStopAtLevel=1" in subs and "-Xss4m" in subs
    store = java_options(submit.command("store", ["--master", "local[2]"]))
    assert store is not None and "-XX:CompileThresholdScaling=10" in store and "-Xss4m" in store
    assert "TieredStopAtLevel" not in store
    assert java_options(submit.command(
        "store", ["--master", "local[2]", "--set", "store.driver_java_options="])) is None
    assert java_options(submit.command("filter", ["--master", "local[4]"])) is None
    assert java_options(submit.command(
        "subscriptions", ["--master", "local[2]", "--set", "filter.subscriptions_driver_java_options="])) is None


def test_maintain_runs_at_its_niceness_and_a_bad_one_is_refused():
    """store.maintain_nice (10): the maintain job's process, and the JVM it execs into, yield
    the CPU to the store service's queries; other jobs run as started; out of 0-19 is refused."""
    probe = ("import os, sys; from tools import submit; submit.lower_priority(sys.argv[1], sys.argv[2:]); "
             "print(os.getpriority(os.PRIO_PROCESS, 0))")
    start = os.getpriority(os.PRIO_PROCESS, 0)

    def niceness(*args: str) -> int:
        done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                              cwd=REPO_ROOT, check=True)
        return int(done.stdout)
    assert niceness("maintain") == max(start, 10)
    assert niceness("maintain", "--set", "store.maintain_nice=15") == max(start, 15)
    assert niceness("store") == start
    assert submit.job_nice("filter", []) == 0
    for bad in ("20", "-1", "true"):
        try:
            submit.job_nice("maintain", ["--set", f"store.maintain_nice={bad}"])
        except submit.ConfigError as exc:
            assert "store.maintain_nice" in str(exc)
        else:
            raise AssertionError(f"maintain_nice={bad} accepted")
