"""tools/processes.py's CPU accounting of a JVM by thread kind, on the shared Spark session's
real JVM (the benchmarks report where a Spark job's CPU goes with it)."""
from __future__ import annotations

import os
import subprocess

from tools.processes import JVM_THREAD_KINDS, jvm_threads_cpu_s


def test_a_running_jvms_cpu_is_split_by_thread_kind_and_a_group_without_java_counts_nothing(spark):
    spark.range(1000).selectExpr("sum(id)").collect()  # tasks ran, the JIT compiled
    pid = spark.sparkContext._gateway.proc.pid
    kinds = {k for k, _ in JVM_THREAD_KINDS} | {"other"}

    cpu = jvm_threads_cpu_s(os.getpgid(pid))

    assert set(cpu) == kinds
    assert cpu["jit"] > 0 and cpu["other"] > 0 and all(v >= 0 for v in cpu.values())
    with subprocess.Popen(["sleep", "5"], start_new_session=True) as other:
        try:
            assert jvm_threads_cpu_s(other.pid) == {k: 0.0 for k in kinds}
        finally:
            other.kill()
