"""Resolve the JVM jars from Maven Central into the git-ignored cache (.cache/jars/).

    python scripts/resolve_jars.py [--force]

- spark: conf/jvm/spark-deps.pom.xml and its transitive dependencies, minus every artifact
  pyspark already ships in pyspark/jars (matched by artifact name, whatever the version), so
  the driver and executors never see two versions of one library.
- kafka: conf/jvm/kafka-broker.pom.xml (the embedded broker), on a classpath of its own.
- junit: conf/jvm/junit.pom.xml (JUnit 5's standalone console launcher, for jvm/test.sh).

Idempotent: a stamp file records the hash of the pom; nothing is downloaded when it matches.
After this, no run downloads anything (no --packages).
"""
from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JVM_CONF = REPO / "conf" / "jvm"
CACHE = REPO / ".cache" / "jars"
SETTINGS = JVM_CONF / "maven-settings.xml"
SETS = {
    "spark": JVM_CONF / "spark-deps.pom.xml",
    "kafka": JVM_CONF / "kafka-broker.pom.xml",
    "junit": JVM_CONF / "junit.pom.xml",
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
VERSIONED_JAR = re.compile(r"^(?P<name>.+?)-\d[\w.\-]*\.jar$")


class SetupError(Exception):
    pass


def artifact_name(jar: str) -> str:
    m = VERSIONED_JAR.match(jar)
    return m.group("name") if m else jar


def pyspark_jar_names() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {artifact_name(j.name) for j in jars.glob("*.jar")}


def mvn_copy(pom: Path, out: Path) -> None:
    if shutil.which("mvn") is None:
        raise SetupError("Maven (mvn) not found: the set-up installs it with apt-get; install maven and retry")
    cmd = [
        "mvn", "-B", "-q", "-s", str(SETTINGS), "-f", str(pom),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={out}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log = proc.stdout + proc.stderr
        if re.search(r"Unknown host|transfer failed|Connection refused|timed out|Network is unreachable|"
                     r"Could not transfer", log):
            raise SetupError("cannot download JVM jars from Maven Central (network unreachable?); "
                             f"retry when it is reachable ({pom.name})")
        first = next((line for line in log.splitlines() if "ERROR" in line), log.strip()[-300:])
        first = ANSI.sub("", first)[:300]
        raise SetupError(f"Maven could not resolve {pom.name}: {first}")


def resolve(name: str, force: bool) -> None:
    pom = SETS[name]
    target = CACHE / name
    stamp = target / ".stamp"
    digest = hashlib.sha256(pom.read_bytes() + SETTINGS.read_bytes()).hexdigest()
    if not force and stamp.exists() and stamp.read_text() == digest:
        print(f"jars/{name}: up to date ({len(list(target.glob('*.jar')))} jars)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        mvn_copy(pom, Path(tmp))
        jars = sorted(Path(tmp).glob("*.jar"))
        if name == "spark":
            shipped = pyspark_jar_names()
            jars = [j for j in jars if artifact_name(j.name) not in shipped]
        target.mkdir(parents=True, exist_ok=True)
        for old in target.glob("*.jar"):
            if not old.name.startswith("waku-"):  # the project's own decoder jar is built separately
                old.unlink()
        for jar in jars:
            shutil.copy2(jar, target / jar.name)
    stamp.write_text(digest)
    print(f"jars/{name}: {len(jars)} jars resolved into {target}")


def main() -> int:
    parser = argparse.ArgumentParser(description="resolve JVM jars into .cache/jars")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    try:
        for name in SETS:
            resolve(name, args.force)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
