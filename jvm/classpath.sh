# Sourced by jvm/build.sh and jvm/test.sh: the class path the JVM side compiles against.
# Needs REPO; honours PYTHON, PROTOBUF_JAR, KAFKA_JAR, DELTA_STORAGE_JAR (defaults: <repo>/.venv's
# python, the jars scripts/resolve_jars.py put in <repo>/.cache/jars/spark). Sets PYSPARK_DIR and
# JVM_CP (pyspark's jars, protobuf-java, kafka-clients, delta-storage); exits 2 naming what is missing.
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
PROTOBUF_JAR="${PROTOBUF_JAR:-$(ls "$REPO"/.cache/jars/spark/protobuf-java-*.jar 2>/dev/null | head -1)}"
KAFKA_JAR="${KAFKA_JAR:-$(ls "$REPO"/.cache/jars/spark/kafka-clients-*.jar 2>/dev/null | head -1)}"
DELTA_STORAGE_JAR="${DELTA_STORAGE_JAR:-$(ls "$REPO"/.cache/jars/spark/delta-storage-*.jar 2>/dev/null | head -1)}"

command -v javac >/dev/null 2>&1 || { echo "error: javac not found; install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless; make setup)" >&2; exit 2; }
command -v jar >/dev/null 2>&1 || { echo "error: jar tool not found; install a full JDK 17+" >&2; exit 2; }
for j in "$PROTOBUF_JAR:protobuf-java" "$KAFKA_JAR:kafka-clients" "$DELTA_STORAGE_JAR:delta-storage"; do
  [ -f "${j%:*}" ] || { echo "error: ${j##*:} jar not found in .cache/jars/spark: run scripts/resolve_jars.py (make setup)" >&2; exit 2; }
done
PYSPARK_DIR="$("$PYTHON" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" \
  || { echo "error: cannot import pyspark with $PYTHON (set PYTHON)" >&2; exit 2; }
[ -d "$PYSPARK_DIR/jars" ] || { echo "error: no jars dir under $PYSPARK_DIR" >&2; exit 2; }
JVM_CP="$PYSPARK_DIR/jars/*:$PROTOBUF_JAR:$KAFKA_JAR:$DELTA_STORAGE_JAR"
