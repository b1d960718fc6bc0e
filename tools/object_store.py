"""A real S3 object store on this machine: SeaweedFS (`weed server -s3`: master, volume server,
filer and S3 gateway in one process), built from the Go module proxy by
scripts/build_seaweedfs.sh into `.cache/bin/weed`.

    with SeaweedS3(data_dir) as s3:          # free ports on 127.0.0.1, one access key
        s3.create_bucket("waku")
        s3.settings                          # core.settings.ObjectStoreSettings for the warehouse
        s3.overrides("waku")                 # --set items: warehouse on s3a://waku/..., s3_* keys

All its state (volumes, filer metadata, the identities file, its log) lives under `data_dir`.
The process runs in its own process group and is stopped with it.
Command line: ``python -m tools.object_store [--data-dir DIR] [--port N] [--bucket NAME]``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from core.settings import ObjectStoreSettings
from tools.processes import free_port, stop_process

log = logging.getLogger("tools.object_store")

REPO_ROOT = Path(__file__).resolve().parent.parent
WEED = REPO_ROOT / ".cache" / "bin" / "weed"
ACCESS_KEY = "waku-access"
SECRET_KEY = "waku-secret-key"


class ObjectStoreError(Exception):
    pass


def weed_binary() -> Path:
    if not WEED.exists():
        raise ObjectStoreError(f"{WEED} missing: build it with scripts/build_seaweedfs.sh")
    return WEED


class SeaweedS3:
    """One `weed server -s3` process on free loopback ports, with one admin identity."""

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0,
                 access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.access_key, self.secret_key = access_key, secret_key
        self.proc: subprocess.Popen[bytes] | None = None
        # The internal ports (master, volume, filer), picked once: a restart on the same data dir
        # must find its master where its volumes and filer recorded it.
        self._ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> ObjectStoreSettings:
        return ObjectStoreSettings(self.endpoint, "us-east-1", True, self.access_key, self.secret_key)

    def overrides(self, bucket: str, prefix: str = "waku") -> list[str]:
        """`--set` items that put the warehouse on this store (tables and checkpoints)."""
        s = self.settings
        return [f"warehouse.root=s3a://{bucket}/{prefix}/warehouse",
                f"warehouse.checkpoints=s3a://{bucket}/{prefix}/checkpoints",
                f"warehouse.s3_endpoint={s.endpoint}", f"warehouse.s3_region={s.region}",
                "warehouse.s3_path_style=true", f"warehouse.s3_access_key={s.access_key}",
                f"warehouse.s3_secret_key={s.secret_key}"]

    def command(self) -> list[str]:
        ports = self._ports = self._ports or {name: free_port() for name in (
            "master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3.grpc")}
        identities = self.data_dir / "s3-identities.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "waku", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        return [str(weed_binary()), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                # Volumes of 256 MiB (written as they fill, not preallocated), as many as the disk
                # holds (-volume.max=0: free space / volume size). A fixed count caps the store:
                # 16 of 64 MiB stalled every S3 write after ~1 GiB ("No writable volumes").
                f"-dir={self.data_dir / 'data'}", "-master.telemetry=false", "-master.volumeSizeLimitMB=256",
                "-volume.max=0", "-filer", "-s3", f"-s3.port={self.port}", f"-s3.config={identities}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
                f"-s3.localSocket={self.data_dir / 's3.sock'}",
                *(f"-{name.replace('.grpc', '.port.grpc') if name.endswith('.grpc') else name + '.port'}={port}"
                  for name, port in ports.items())]

    def start(self, timeout_s: float = 180.0) -> SeaweedS3:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        logfile = open(self.data_dir / "weed.log", "ab")
        self.proc = subprocess.Popen(self.command(), stdout=logfile, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.data_dir)
        logfile.close()
        deadline = time.monotonic() + timeout_s
        s3 = self.settings.arrow_filesystem()
        while True:
            if self.proc.poll() is not None:
                raise ObjectStoreError(f"weed exited with {self.proc.returncode}: see {self.data_dir / 'weed.log'}")
            try:
                s3.get_file_info("waku-probe-bucket")  # a signed request: the gateway and its filer answer
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise ObjectStoreError(
                        f"SeaweedFS S3 not ready on {self.endpoint} in {timeout_s:g} s: {exc}") from None
                time.sleep(0.2)
        log.info("SeaweedFS S3 gateway on %s (data in %s)", self.endpoint, self.data_dir)
        return self

    def create_bucket(self, bucket: str, timeout_s: float = 60.0) -> None:
        """Create `bucket` (the volume servers may take a moment to register: retried)."""
        s3 = self.settings.arrow_filesystem(allow_bucket_creation=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                s3.create_dir(bucket)
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_process(self.proc, 5, group=True)  # weed takes its time over a graceful stop
        self.proc = None

    def __enter__(self) -> SeaweedS3:
        return self.start() if self.proc is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.object_store", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(REPO_ROOT / "var" / "s3"))
    p.add_argument("--port", type=int, default=8333)
    p.add_argument("--bucket", default="waku")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        with SeaweedS3(args.data_dir, args.port) as s3:
            s3.create_bucket(args.bucket)
            print("settings for the warehouse (conf file or --set):")
            for item in s3.overrides(args.bucket):
                print(f"  --set {item}")
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except ObjectStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
