#!/usr/bin/env bash
# The JVM side's tests (part of `make test`): compiles jvm/src and the JUnit 5 tests of jvm/test
# into a temporary directory, against the same jars as jvm/build.sh (pyspark's, protobuf-java,
# kafka-clients, delta-storage) plus JUnit's standalone console launcher resolved by
# scripts/resolve_jars.py into .cache/jars/junit, and runs them. The tests' protobuf vectors
# (jvm/test/vectors.json, encoded by Python's protobuf) are checked against the schemas first, and
# the subscription sequence (jvm/test/subscription_vectors.json) against tests/filter_twins.py.
# Builds and replaces no jar. Prints each failure and a closing "N passed, N failed" line; exits
# non-zero on any failure.
#
# Usage: jvm/test.sh [JUnit console options, e.g. --select-class waku.pipeline.WireReaderTest]
# Env:   PYTHON         python with pyspark (default: <repo>/.venv/bin/python)
#        JVM_TEST_KEEP  a directory to copy JUnit's XML reports to (each test's time)
set -euo pipefail

JVM_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$JVM_DIR")"
JUNIT_JAR="$(ls "$REPO"/.cache/jars/junit/junit-platform-console-standalone-*.jar 2>/dev/null | head -1)"
[ -f "$JUNIT_JAR" ] || { echo "error: JUnit's console launcher is missing from .cache/jars/junit: run scripts/resolve_jars.py (make setup)" >&2; exit 2; }
# shellcheck source=jvm/classpath.sh
source "$JVM_DIR/classpath.sh"

"$PYTHON" "$JVM_DIR/test/make_vectors.py" --check
"$PYTHON" "$JVM_DIR/test/make_subscription_vectors.py" --check

WORK="$(mktemp -d "${TMPDIR:-/tmp}/waku-jvm-test.XXXXXX")"
trap 'if [ -n "${JVM_TEST_KEEP:-}" ]; then cp -r "$WORK/reports" "$JVM_TEST_KEEP"; fi; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/classes"
CP="$JVM_CP"

# One javac for the product and the tests (a short-lived compiler: C1 only, serial GC).
mapfile -t SOURCES < <(find "$JVM_DIR/src" "$JVM_DIR/test" -name '*.java' | sort)
javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC --release 17 -nowarn -XDsuppressNotes -encoding UTF-8 \
  -cp "$CP:$JUNIT_JAR" -d "$WORK/classes" "${SOURCES[@]}"
cp "$REPO/schemas/waku.desc" "$WORK/classes/waku.desc"

# Quiet logging for the Hadoop and Spark classes some tests touch.
cat > "$WORK/classes/log4j2.properties" <<'EOF'
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c: %m%n
EOF

# Every test class of jvm/test, or those the arguments select.
select=(--scan-class-path "$WORK/classes" --include-package waku.pipeline)
[ "$#" -gt 0 ] && select=("$@")
set +e
# On java's own class path: the launcher's --class-path would not expand pyspark's jars/* (a class
# that cannot load is left out of discovery without a word).
java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dwaku.test.vectors="$JVM_DIR/test/vectors.json" \
  -Dwaku.test.subscription_vectors="$JVM_DIR/test/subscription_vectors.json" \
  -cp "$JUNIT_JAR:$WORK/classes:$CP" org.junit.platform.console.ConsoleLauncher execute \
  "${select[@]}" --include-engine junit-jupiter \
  --disable-banner --details=summary --disable-ansi-colors \
  --reports-dir "$WORK/reports" >"$WORK/out.txt" 2>&1
status=$?
set -e
# The console's report of each failure, then one closing line.
grep -v '^\s*$' "$WORK/out.txt" | grep -v -E '^\[ +[0-9]+ (containers|tests) ' | grep -v '^Test run finished' || true
summary="$(sed -n 's/^\[ *\([0-9]*\) tests \(successful\|failed\|skipped\|aborted\) *\]$/\2 \1/p' "$WORK/out.txt")"
count() { echo "$summary" | sed -n "s/^$1 //p" | head -1; }
passed="$(count successful)"; failed="$(count failed)"; aborted="$(count aborted)"; skipped="$(count skipped)"
failed=$(( ${failed:-0} + ${aborted:-0} ))
if [ -z "$passed" ]; then
  head -20 "$WORK/out.txt"
  echo "jvm tests: the JUnit console gave no summary (exit $status)"
  exit 1
fi
echo "jvm: ${passed} passed, ${failed} failed, ${skipped:-0} skipped"
if [ "$status" != 0 ] || [ "$failed" != 0 ]; then
  exit 1
fi
