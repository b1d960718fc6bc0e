#!/usr/bin/env bash
# Builds waku-proto-decode.jar: the ProtoDecode Spark UDF, the filter job's PushEncode, PushFanoutEncode, CriteriaFanout and
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
DESC="$REPO/schemas/waku.desc"
JAR="$OUT_DIR/waku-proto-decode.jar"
[ -f "$DESC" ] || { echo "jvm/build.sh: $DESC missing; run: python -m schemas.generate" >&2; exit 1; }
# shellcheck source=jvm/classpath.sh
source "$JVM_DIR/classpath.sh"

mapfile -t SOURCES < <(find "$JVM_DIR/src" -name '*.java' | sort)

if [ -f "$JAR" ]; then
  stale=0
  for f in "${SOURCES[@]}" "$DESC" "$JVM_DIR/build.sh" "$JVM_DIR/classpath.sh"; do
    if [ "$f" -nt "$JAR" ]; then stale=1; break; fi
  done
  if [ "$stale" = 0 ]; then
    echo "$JAR"
    exit 0
  fi
fi

mkdir -p "$OUT_DIR"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/waku-proto-decode.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/classes"

javac --release 17 -nowarn -encoding UTF-8 \
  -cp "$JVM_CP" \
  -d "$WORK/classes" "${SOURCES[@]}"
cp "$DESC" "$WORK/classes/waku.desc"
jar --create --file "$WORK/waku-proto-decode.jar" -C "$WORK/classes" .
# Atomic replace: a concurrent reader never sees a half-written jar.
mv -f "$WORK/waku-proto-decode.jar" "$JAR"
echo "$JAR"
