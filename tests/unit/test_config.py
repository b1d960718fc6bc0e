"""Configuration: defaults, site file, environment and --set, with one-line errors."""
import subprocess
import sys

import pytest

from core.config import REPO_ROOT, ConfigError, load_config


def test_defaults_use_embedded_kafka():
    cfg = load_config(environ={})
    assert cfg.uses_embedded_kafka()
    assert cfg.bootstrap_servers() == "127.0.0.1:9092"
    assert cfg.table_path("messages") == str(REPO_ROOT / "var/warehouse/messages")


def test_environment_then_command_line_override():
    env = {"WAKU_EMBEDDED_KAFKA__PORT": "19092", "WAKU_SPARK__MASTER": "local[1]"}
    cfg = load_config(["embedded_kafka.port=29092"], environ=env)
    assert cfg.get("embedded_kafka.port") == 29092
    assert cfg.get("spark.master") == "local[1]"


def test_external_bootstrap_servers_disable_embedded_broker():
    cfg = load_config(["kafka.bootstrap_servers=k1:9092,k2:9092"], environ={})
    assert not cfg.uses_embedded_kafka()
    assert cfg.bootstrap_servers() == "k1:9092,k2:9092"


def test_site_file_layers_over_defaults(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text('[warehouse]\nroot = "s3a://bucket/waku"\n[topics]\nmessages_partitions = 12\n')
    cfg = load_config(config_file=str(site), environ={})
    assert cfg.table_path("messages") == "s3a://bucket/waku/messages"
    assert cfg.get("topics.messages_partitions") == 12


def test_list_values_and_key_value_options():
    cfg = load_config(["spark.options=spark.executor.memory=4g, spark.executor.cores=2"], environ={})
    assert cfg.spark_options() == {"spark.executor.memory": "4g", "spark.executor.cores": "2"}


@pytest.mark.parametrize(
    "override,message",
    [
        ("embedded_kafka.port=abc", "embedded_kafka.port: expected an integer, got 'abc'"),
        ("embedded_kafka.port=70000", "expected a port 1-65535"),
        ("embedded_kafka.startup_timeout_s=nan", "expected a finite number"),
        ("nope.key=1", "unknown config key 'nope.key'"),
        ("spark.master", "expects section.key=value"),
        ("topics.push_partitions=0", "expected at least 1"),
    ],
)
def test_malformed_values_raise_one_line_errors(override, message):
    with pytest.raises(ConfigError) as info:
        load_config([override], environ={})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_malformed_environment_value_names_its_origin():
    with pytest.raises(ConfigError, match="from environment WAKU_EMBEDDED_KAFKA__PORT"):
        load_config(environ={"WAKU_EMBEDDED_KAFKA__PORT": "ninety"})


def test_site_file_type_mismatch(tmp_path):
    site = tmp_path / "bad.toml"
    site.write_text('[embedded_kafka]\nport = "9092"\n')
    with pytest.raises(ConfigError, match="embedded_kafka.port: expected int"):
        load_config(config_file=str(site), environ={})


def test_job_entry_point_prints_one_line_error_for_bad_config():
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "jobs/store.py"), "--set", "embedded_kafka.port=x"],
        capture_output=True, text=True, cwd=REPO_ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: embedded_kafka.port: expected an integer")
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
