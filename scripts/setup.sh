#!/usr/bin/env bash
# Set everything up from nothing, idempotently: system packages, .venv, JVM jars, the JVM
# protobuf decoder, the RLN library (Rust, crates.io); with --with-interop also the reference Waku clients the interop tests run
# (go-waku from the Go module proxy, js-waku from npm) and SeaweedFS, the S3 server of the object
# storage tests (Go module proxy). Safe to run again; it only does what is
# missing or changed. Every failure ends with one line starting "error:".
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3.11}

die() { echo "error: $*" >&2; exit 2; }
say() { echo "setup: $*"; }

apt_install() {  # apt_install PKG... : install Debian packages when we may (root + apt-get)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing $* with apt-get"
    if [ ! -f /tmp/.waku-apt-updated ]; then
      apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed: cannot reach Debian's package archive"
      touch /tmp/.waku-apt-updated
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
      || die "apt-get could not install $*"
  else
    die "$* missing and cannot be installed automatically here (needs root and apt-get)"
  fi
}

# 1. System packages: Java 17 (javac too: the protobuf decoder is compiled here), Maven,
#    libgmp headers for py-libp2p's fastecdsa, PostgreSQL's server, a Python 3.11 with venv.
if ! command -v java >/dev/null || ! command -v javac >/dev/null; then
  apt_install openjdk-17-jdk-headless || true
fi
command -v java >/dev/null || die "Java not found: install a Java 17 JDK (openjdk-17-jdk-headless) or put it on PATH"
jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${jv:-0}" -ge 17 ] || die "Java ${jv:-?} found, Java 17 or newer needed (set JAVA_HOME / PATH)"
command -v mvn >/dev/null || apt_install maven
[ -f /usr/include/gmp.h ] || [ -f /usr/include/x86_64-linux-gnu/gmp.h ] || apt_install libgmp-dev
# PostgreSQL's server (Debian's postgresql: 15 on bookworm, the major version nwaku-compose runs)
# for nwaku's archive beside our store (tools/nwaku_postgres.py, its integration test, the
# issue-71 benchmark). Always, not only --with-interop: once there it is one glob, and
# tools/nwaku_postgres.py's "run make setup" then holds. Only the binaries under
# /usr/lib/postgresql/<ver>/bin are used (private clusters in the callers' directories), never
# the package's own cluster. Not root: a warning, the test skips.
if ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt_install postgresql
  else
    say "warning: PostgreSQL's server missing (apt-get install postgresql): tests/integration/test_nwaku_postgres.py will skip"
  fi
fi
command -v "$PY" >/dev/null || die "$PY not found: install Python 3.11 (or set PYTHON=/path/to/python3.11)"

# 2. Python virtual environment with the pinned dependencies.
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv || die "could not create .venv with $PY (is the venv module installed?)"
fi
stamp=.venv/.waku-installed
want=$(cat pyproject.toml conf/constraints.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing Python dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip setuptools wheel >/dev/null \
    || die "pip could not upgrade itself: is PyPI reachable?"
  .venv/bin/python -m pip install -q -c conf/constraints.txt -e ".[dev]" >/tmp/waku-pip.log 2>&1 \
    || die "pip install failed (PyPI unreachable or a build failed): see /tmp/waku-pip.log"
  echo "$want" > "$stamp"
else
  say ".venv up to date"
fi

# 3. JVM jars from Maven Central into .cache/jars (no download at run time; JUnit's for jvm/test.sh too).
.venv/bin/python scripts/resolve_jars.py || exit 2

# 4. The JVM protobuf decoder (stands in for spark-protobuf, see docs/decisions.md).
PYTHON=.venv/bin/python bash jvm/build.sh "$REPO/.cache/jars/spark" || exit 2

# 5. The RLN library (native/waku_rln: zerokit's rln crate from crates.io, built with cargo and
#    maturin into .venv; the bridge validates and makes RLN-v2 proofs with it, docs/rln.md).
bash scripts/build_rln.sh || exit 2

# 6. Reference clients for tests/interop (make test): go-waku v0.10.0 built with Go (cgo), and
#    js-waku (@waku/sdk, with its own Node 22 from npm); and Debian's chromium, in which
#    tests/integration/test_dashboard.py opens the ops dashboard headless.
if [ "${1:-}" = "--with-interop" ]; then
  command -v chromium >/dev/null || apt_install chromium
  # Go: the machine's, else Go 1.26 from the Go module proxy (golang.org/toolchain) into .cache/go.
  go_bin=$(bash scripts/go_toolchain.sh) || exit 2
  export PATH="$go_bin:$PATH"
  command -v gcc >/dev/null || apt_install gcc
  command -v npm >/dev/null || apt_install npm
  # Anvil and our WakuRlnV2Local contract (npm): the local chain of the RLN tests (docs/rln.md).
  bash scripts/build_rln_chain.sh || exit 2
  say "reference clients for the interop tests (go-waku, js-waku)"
  bash tests/interop/go/build.sh >/dev/null || exit 2
  # go-waku's own node (cmd/waku) for tests/interop/test_rest_gowaku.py: a first build takes
  # ~4 min of two cores (217 s on a busy machine), then it is a stamp check.
  node_out=$(bash tests/interop/gowaku-node/build.sh) || die "go-waku's node: ${node_out#error: }"
  # SeaweedFS's S3 gateway, the object store of tests/integration/test_store_on_s3.py.
  bash scripts/build_seaweedfs.sh || exit 2
  bash tests/interop/js/install.sh || exit 2
fi

say "ready"
