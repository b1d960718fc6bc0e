#!/usr/bin/env bash
# Build the project's binding of zerokit's RLN (native/waku_rln: PyO3, the crates.io `rln` 3.0.0
# with its embedded depth-20 proving key) into a wheel and install it into .venv. Cargo's
# downloads and the build are cached (~/.cargo, .cache/rln-target); a stamp of the sources skips
# the whole step when nothing changed. Offline after the first run. Failures end with "error:".
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "error: $*" >&2; exit 2; }
PY=.venv/bin/python
MATURIN_VERSION=1.16.0
stamp=.cache/rln-wheel/.stamp
want=$(cat native/waku_rln/Cargo.toml native/waku_rln/Cargo.lock native/waku_rln/pyproject.toml \
  native/waku_rln/src/*.rs 2>/dev/null | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$PY" -c 'import waku_rln' 2>/dev/null; then
  exit 0
fi
command -v cargo >/dev/null || die "cargo not found: the RLN library is built from crates.io with Rust (install rustup's stable toolchain)"
"$PY" -m pip show maturin 2>/dev/null | grep -q "^Version: $MATURIN_VERSION\$" \
  || "$PY" -m pip install -q "maturin==$MATURIN_VERSION" >/dev/null 2>&1 \
  || die "pip could not install maturin $MATURIN_VERSION (is PyPI reachable?)"
echo "setup: building the RLN library (native/waku_rln, zerokit rln 3.0.0; ~5 min of two cores the first time)"
mkdir -p .cache/rln-wheel
rm -f .cache/rln-wheel/*.whl
CARGO_TARGET_DIR="$PWD/.cache/rln-target" .venv/bin/maturin build --release --locked \
  -m native/waku_rln/Cargo.toml -o .cache/rln-wheel -i "$PY" >/tmp/waku-rln-build.log 2>&1 \
  || die "building native/waku_rln failed (crates.io unreachable or a compile error): see /tmp/waku-rln-build.log"
"$PY" -m pip install -q --force-reinstall --no-deps .cache/rln-wheel/waku_rln-*.whl >/dev/null 2>&1 \
  || die "pip could not install the RLN wheel from .cache/rln-wheel"
"$PY" -c 'import waku_rln' || die "the RLN library does not import after its build"
echo "$want" > "$stamp"
