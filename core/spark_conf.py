"""How a Spark application of the pipeline is configured, as plain data: the master, the jars
resolved at set-up, conf/spark-defaults.conf and the settings that depend on the master.

No Spark here: pipeline/spark/session.py builds sessions from it, and the spark-submit glue
(tools/submit.py) builds the `spark-submit` command line from the same facts, so a job behaves
the same whether it is started from Python or submitted to a cluster.
"""
from __future__ import annotations

import glob
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.config import REPO_ROOT, Config, ConfigError
from core.settings import ObjectStoreSettings, is_s3

SPARK_DEFAULTS = REPO_ROOT / "conf" / "spark-defaults.conf"
# Set by spark-submit.sh: master, jars and defaults already came in on the command line.
SUBMITTED_ENV = "WAKU_SPARK_SUBMITTED"


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[2]"
    app_name_prefix: str = "waku"
    shuffle_partitions: int = 4
    jar_dir: str = str(REPO_ROOT / ".cache" / "jars" / "spark")
    options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Config) -> SparkSettings:
        s = config["spark"]
        # An s3a:// warehouse: its [warehouse] s3_* settings as spark.hadoop.fs.s3a.*, under
        # spark.options (which win).
        store: dict[str, str] = {}
        if is_s3(config.path("warehouse.root")) or is_s3(config.path("warehouse.checkpoints")):
            store = ObjectStoreSettings.from_config(config).spark_options()
        return cls(s["master"], s["app_name_prefix"], s["shuffle_partitions"], config.path("spark.jar_dir"),
                   {**store, **config.spark_options()})

    def jars(self) -> list[str]:
        """The jars resolved at set-up (Delta, Kafka source and sink, the protobuf decoder)."""
        jars = sorted(glob.glob(str(Path(self.jar_dir) / "*.jar")))
        if not any(Path(j).name.startswith("delta-spark") for j in jars):
            raise ConfigError(f"no Spark jars in {self.jar_dir}: run the set-up first (make setup)")
        return jars


def spark_defaults() -> dict[str, str]:
    """Key/values of conf/spark-defaults.conf (Spark's whitespace-separated properties format)."""
    out: dict[str, str] = {}
    for line in SPARK_DEFAULTS.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        out[key] = value.strip()
    return out


def master_defaults(master: str) -> dict[str, str]:
    """Settings that depend on the master. In local mode, Delta's snapshot state reconstruction
    runs on a few cores: its default of 50 partitions makes every commit several times slower.
    VACUUM lists a table's files in `spark.sql.sources.parallelPartitionDiscovery.parallelism`
    tasks, 10,000 by default: ~35 s of task overhead a table on two cores for a table of a few
    files (the maintain job vacuums up to five)."""
    if master.startswith("local"):
        return {"spark.databricks.delta.snapshotPartitions": "2",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4"}
    return {}
