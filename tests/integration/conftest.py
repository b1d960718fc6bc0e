"""Fixtures of the integration tests that run against SeaweedFS's S3 gateway (test_store_on_s3.py,
test_jobs_on_s3.py): one server for the whole run, created on first use."""
from __future__ import annotations

import pytest

from tools.object_store import WEED, SeaweedS3

S3_BUCKET = "waku"


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    if not WEED.exists():
        pytest.fail(f"{WEED} missing: the set-up builds it (bash scripts/build_seaweedfs.sh)")
    with SeaweedS3(tmp_path_factory.mktemp("seaweedfs")) as server:
        server.create_bucket(S3_BUCKET)
        yield server


@pytest.fixture
def spark_on_s3(spark, s3, monkeypatch):
    """The shared session reaching the S3 server: its fs.s3a.* settings in the Hadoop
    configuration and in the context's conf (as spark-submit gives them: executors and the
    criteria index build their Hadoop configuration from it), Delta's log store for s3a:// (read
    from the context's conf when a table is first opened), and the AWS_* environment the entry
    point sets for delta-rs."""
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    conf = spark.sparkContext._jsc.sc().conf()
    for key, value in s3.settings.spark_options().items():
        if key.startswith("spark.hadoop."):
            hconf.set(key[len("spark.hadoop."):], value)
        conf.set(key, value)
    for key, value in s3.settings.environment().items():
        monkeypatch.setenv(key, value)
    return spark
