"""The Hadoop checksum sidecars the delta-rs checkpointer keeps in step with the Delta log
(pipeline/spark/log_checkpoints.py)."""
from __future__ import annotations

import os
import time

from core.settings import local_path
from pipeline.spark.log_checkpoints import LAST_CHECKPOINT_SIDECAR, remove_stale_sidecars


def touch(path, age_s: float = 0.0) -> None:
    with open(path, "w") as f:
        f.write("x")
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_stale_and_orphaned_sidecars_go_and_the_others_stay(tmp_path):
    for name in ("00000000000000000007.json", "00000000000000000008.json", "_last_checkpoint",
                 "00000000000000000008.checkpoint.parquet"):
        touch(tmp_path / name)
    for name in (".00000000000000000007.json.crc", ".00000000000000000008.json.crc", LAST_CHECKPOINT_SIDECAR,
                 ".00000000000000000008.checkpoint.parquet.crc"):
        touch(tmp_path / name, age_s=120)
    touch(tmp_path / ".00000000000000000001.json.crc", age_s=120)   # its log file deleted by cleanup
    touch(tmp_path / ".00000000000000000009.json.tmp.crc")           # a file being renamed: too young
    # After a checkpoint: the sidecars delta-rs made stale.
    assert remove_stale_sidecars(str(tmp_path), 8) == 2
    assert not (tmp_path / LAST_CHECKPOINT_SIDECAR).exists()
    assert not (tmp_path / ".00000000000000000008.checkpoint.parquet.crc").exists()
    # After a cleanup: orphans older than a minute.
    assert remove_stale_sidecars(str(tmp_path), orphans=True) == 1
    assert sorted(os.listdir(tmp_path)) == sorted([
        "00000000000000000007.json", "00000000000000000008.json", "_last_checkpoint",
        "00000000000000000008.checkpoint.parquet", ".00000000000000000007.json.crc",
        ".00000000000000000008.json.crc", ".00000000000000000009.json.tmp.crc"])


def test_local_paths_and_object_stores():
    assert local_path("/w/messages") == "/w/messages"
    assert local_path("file:/w/messages") == "/w/messages"
    assert local_path("file:///w/messages") == "/w/messages"
    assert local_path("s3a://bucket/w/messages") is None
