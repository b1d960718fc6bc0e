#!/usr/bin/env bash
# Builds waku-proto-decode.jar: the ProtoDecode Spark UDF, the filter job's PushEncode, CriteriaMatch and
# CriteriaIndex (resident criteria: needs kafka-clients at compile time), LocalDirLogStore (Delta's
# log store for the local file system, listing without a stat per entry: needs delta-storage) (our stand-in for spark-protobuf's
# from_protobuf, see pipeline/spark/protobuf.py) plus schemas/waku.desc as the classpath resource
# /waku.desc. Plain javac + jar, no Maven.
#
# Usage: jvm/build.sh [OUT_DIR]     (default: <repo>/.cache/jars/spark)
# Env:   PYTHON         python whose pyspark jars to compile against (default: <repo>/.venv/bin/python)
#        PROTOBUF_JAR   protobuf-java jar (default: the protobuf-java jar resolved into <repo>/.cache/jars/spark)
#        KAFKA_JAR      kafka-clients jar (default: the one resolved into <repo>/.cache/jars/spark)
#        DELTA_STORAGE_JAR  delta-storage jar (default: the one resolved into <repo>/.cache/jars/spark)
# Prints the jar's path. Skips the build when the jar is newer than every source and waku.desc.
set -euo pipefail

JVM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$JVM_DIR")"
OUT_DIR="${1:-$REPO/.cache/jars/spark}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
PROTOBUF_JAR="${PROTOBUF_JAR:-$(ls "$REPO"/.cache/jars/spark/protobuf-java-*.jar 2>/dev/null | head -1)}"
KAFKA_JAR="${KAFKA_JAR:-$(ls "$REPO"/.cache/jars/spark/kafka-clients-*.jar 2>/dev/null | head -1)}"
DELTA_STORAGE_JAR="${DELTA_STORAGE_JAR:-$(ls "$REPO"/.cache/jars/spark/delta-storage-*.jar 2>/dev/null | head -1)}"
DESC="$REPO/schemas/waku.desc"
JAR="$OUT_DIR/waku-proto-decode.jar"

command -v javac >/dev/null 2>&1 || { echo "jvm/build.sh: javac not found; install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)" >&2; exit 1; }
command -v jar >/dev/null 2>&1 || { echo "jvm/build.sh: jar tool not found; install a full JDK 17+" >&2; exit 1; }
[ -f "$DESC" ] || { echo "jvm/build.sh: $DESC missing; run: python -m schemas.generate" >&2; exit 1; }
[ -f "$PROTOBUF_JAR" ] || { echo "error: protobuf-java jar not found in .cache/jars/spark: run scripts/resolve_jars.py (make setup)" >&2; exit 1; }
[ -f "$KAFKA_JAR" ] || { echo "error: kafka-clients jar not found in .cache/jars/spark: run scripts/resolve_jars.py (make setup)" >&2; exit 1; }
[ -f "$DELTA_STORAGE_JAR" ] || { echo "error: delta-storage jar not found in .cache/jars/spark: run scripts/resolve_jars.py (make setup)" >&2; exit 1; }

mapfile -t SOURCES < <(find "$JVM_DIR/src" -name '*.java' | sort)

if [ -f "$JAR" ]; then
  stale=0
  for f in "${SOURCES[@]}" "$DESC" "$JVM_DIR/build.sh"; do
    if [ "$f" -nt "$JAR" ]; then stale=1; break; fi
  done
  if [ "$stale" = 0 ]; then
    echo "$JAR"
    exit 0
  fi
fi

PYSPARK_DIR="$("$PYTHON" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" \
  || { echo "jvm/build.sh: cannot import pyspark with $PYTHON (set PYTHON)" >&2; exit 1; }
[ -d "$PYSPARK_DIR/jars" ] || { echo "jvm/build.sh: no jars dir under $PYSPARK_DIR" >&2; exit 1; }

mkdir -p "$OUT_DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/waku-proto-decode.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/classes"

javac --release 17 -nowarn -encoding UTF-8 \
  -cp "$PYSPARK_DIR/jars/*:$PROTOBUF_JAR:$KAFKA_JAR:$DELTA_STORAGE_JAR" \
  -d "$WORK/classes" "${SOURCES[@]}"
cp "$DESC" "$WORK/classes/waku.desc"
jar --create --file "$WORK/waku-proto-decode.jar" -C "$WORK/classes" .
# Atomic replace: a concurrent reader never sees a half-written jar.
mv -f "$WORK/waku-proto-decode.jar" "$JAR"
echo "$JAR"
