"""One set of [warehouse] s3_* settings feeds Spark (spark.hadoop.fs.s3a.*, Delta's log store),
delta-rs (storage options) and the environment of a job's driver; spark.options win."""
from __future__ import annotations

from core.config import load_config
from core.settings import ObjectStoreSettings, is_s3
from core.spark_conf import SparkSettings
from ingest.store.reader import ReaderSettings
from ingest.store.tail import TailSettings

S3 = ["warehouse.root=s3a://b/w", "warehouse.checkpoints=s3a://b/c", "warehouse.s3_endpoint=http://127.0.0.1:8333",
      "warehouse.s3_access_key=AK", "warehouse.s3_secret_key=SK", "warehouse.s3_path_style=true"]


def test_is_s3():
    assert is_s3("s3a://b/k") and is_s3("s3://b/k")
    assert not is_s3("/var/w") and not is_s3("file:///var/w") and not is_s3("gs://b/k")


def test_one_set_of_settings_reaches_spark_delta_rs_and_the_service():
    cfg = load_config(S3 + ["spark.options=spark.hadoop.fs.s3a.path.style.access=false"])
    opts = SparkSettings.from_config(cfg).options
    assert opts["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert opts["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert opts["spark.hadoop.fs.s3a.access.key"] == "AK" and opts["spark.hadoop.fs.s3a.secret.key"] == "SK"
    assert opts["spark.delta.logStore.s3a.impl"] == "waku.pipeline.S3ConditionalLogStore"
    assert opts["spark.hadoop.fs.s3a.path.style.access"] == "false"  # spark.options win
    reader = ReaderSettings.from_config(cfg)
    assert reader.storage_options() == {
        "AWS_REGION": "us-east-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8333", "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}
    assert TailSettings.from_config(cfg).object_store == reader.object_store
    assert ObjectStoreSettings.from_config(cfg).environment() == reader.storage_options()


def test_a_local_warehouse_gets_no_s3_settings():
    cfg = load_config([])
    assert not any("s3a" in k for k in SparkSettings.from_config(cfg).options)
    assert ReaderSettings.from_config(cfg).storage_options() is None


def test_empty_credentials_leave_the_default_chain():
    s = ObjectStoreSettings(region="eu-central-1")
    assert "spark.hadoop.fs.s3a.access.key" not in s.spark_options()
    assert "spark.hadoop.fs.s3a.endpoint" not in s.spark_options()
    assert s.storage_options() == {"AWS_REGION": "eu-central-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"}


def test_the_local_s3_server_takes_as_many_volumes_as_the_disk_holds(tmp_path):
    # A fixed volume count capped the server: 16 volumes of 64 MiB stalled every write after
    # ~1 GiB (the store ingest benchmark on S3 hung on "No writable volumes").
    from tools.object_store import SeaweedS3

    argv = SeaweedS3(tmp_path).command()
    assert "-volume.max=0" in argv  # SeaweedFS: free disk space / volume size
    assert "-master.volumeSizeLimitMB=256" in argv
