"""Settings of the production topology: the dashboard reaches an s3a:// warehouse with the
`[warehouse]` S3 settings (no environment needed), and `local_run --topology cluster` gives each
job its share of the standalone cluster's cores."""
from __future__ import annotations

from core.config import load_config
from tools.dashboard import DashboardSettings
from tools.local_run import REPO_ROOT, cluster_job_args, local_logs

S3 = ["warehouse.root=s3a://b/w", "warehouse.checkpoints=s3a://b/c", "warehouse.s3_endpoint=http://127.0.0.1:9",
      "warehouse.s3_path_style=true", "warehouse.s3_access_key=k", "warehouse.s3_secret_key=s"]


def test_dashboard_reads_tables_on_s3_with_the_warehouse_settings():
    d = DashboardSettings.from_config(load_config(S3, environ={}))
    assert d.job_metrics == "s3a://b/w/job_metrics"
    options = d.storage_options(d.job_metrics)
    assert options is not None
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9" and options["AWS_ACCESS_KEY_ID"] == "k"
    assert options["AWS_ALLOW_HTTP"] == "true"
    local = DashboardSettings.from_config(load_config(["warehouse.root=/tmp/w"], environ={}))
    assert local.storage_options(local.messages) is None


def test_cluster_jobs_get_their_task_slots():
    config = load_config(["topics.messages_partitions=6"], environ={})
    filter_args = cluster_job_args("filter", "spark://h:7077", config)
    assert filter_args[:2] == ["--master", "spark://h:7077"]
    assert filter_args[filter_args.index("--total-executor-cores") + 1] == "6"  # real-time: a slot a partition
    store_args = cluster_job_args("store", "spark://h:7077", config)
    assert store_args[store_args.index("--total-executor-cores") + 1] == "1"
    assert "spark.scheduler.minRegisteredResourcesRatio=1.0" in store_args
    assert "spark.databricks.delta.snapshotPartitions=2" in store_args  # not Delta's 50 on one core
    assert "spark.databricks.delta.snapshotPartitions=6" in filter_args


def test_a_local_run_on_object_storage_logs_to_a_local_directory():
    """Beside the checkpoints on disk; never a directory named `s3a:` when they are on S3."""
    local = load_config(["warehouse.checkpoints=/tmp/x/var/checkpoints"])
    assert str(local_logs(local, None)) == "/tmp/x/var"
    s3 = load_config(["warehouse.checkpoints=s3a://waku/waku/checkpoints"])
    assert local_logs(s3, None) == REPO_ROOT / "var" / "logs"
    assert str(local_logs(s3, "/tmp/logs")) == "/tmp/logs"
