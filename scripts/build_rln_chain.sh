#!/usr/bin/env bash
# Build the local chain of the RLN tests from npm (tests/rln_chain/): Anvil 1.7.1 (the npm
# package @foundry-rs/anvil; its binary comes in the platform's optional dependency, e.g.
# @foundry-rs/anvil-linux-amd64), and our WakuRlnV2Local contract compiled by solc-js over
# zk-kit's LazyIMT and poseidon-solidity's PoseidonT3. Writes
#
#   .cache/rln-chain/WakuRlnV2Local.json   ABI, bytecode, the libraries to deploy and link first
#   .cache/rln-chain/anvil                 a link to the Anvil binary
#
# which tools/anvil_chain.py reads. Idempotent: skipped when a stamp says the inputs are unchanged
# and the outputs are there. Every failure ends with one line starting "error:" (exit 2); npm's
# own output is kept in a log file the line names. Needs npm (Debian's npm on Node 20 is fine).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
SRC=tests/rln_chain
OUT=.cache/rln-chain
STAMP=$OUT/.stamp

die() { echo "error: build_rln_chain: $*" >&2; exit 2; }

command -v npm >/dev/null 2>&1 || die "npm not found (Debian: apt-get install npm)"
command -v node >/dev/null 2>&1 || die "node not found (Debian: apt-get install nodejs)"
for f in package.json package-lock.json WakuRlnV2Local.sol compile.mjs; do
  [ -f "$SRC/$f" ] || die "$SRC/$f missing"
done

want=$(cat "$SRC/package.json" "$SRC/package-lock.json" "$SRC/WakuRlnV2Local.sol" "$SRC/compile.mjs" "$0" \
  | sha256sum | cut -c1-16)
up_to_date() {
  [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] && [ -s "$OUT/WakuRlnV2Local.json" ] && [ -x "$OUT/anvil" ]
}
up_to_date && exit 0

mkdir -p "$OUT" || die "cannot create $OUT"
# One builder at a time (the set-up and a developer may overlap).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$OUT/.lock" || die "cannot open $OUT/.lock"
  flock 9 || die "cannot lock $OUT/.lock"
  up_to_date && exit 0
fi

start=$(date +%s)
log=$(mktemp "${TMPDIR:-/tmp}/rln-chain-npm-ci.XXXXXX.log") || die "mktemp failed"
# --ignore-scripts: @foundry-rs/anvil's postinstall only fetches a binary when the platform's
# optional package is missing; we want that case to fail here, not to download at build time.
(cd "$SRC" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=warn) >"$log" 2>&1 \
  || die "npm ci in $SRC failed: npm output in $log"

case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) platform=linux-amd64 ;;
  Linux-aarch64|Linux-arm64) platform=linux-arm64 ;;
  Darwin-x86_64) platform=darwin-amd64 ;;
  Darwin-arm64) platform=darwin-arm64 ;;
  *) die "no Anvil package for $(uname -s) $(uname -m) (@foundry-rs/anvil ships linux and darwin, amd64 and arm64)" ;;
esac
anvil="$SRC/node_modules/@foundry-rs/anvil-$platform/bin/anvil"
[ -x "$anvil" ] || die "npm ci did not install $anvil (optional dependencies omitted? npm output in $log)"
version=$("$anvil" --version 2>/dev/null | head -1) || die "$anvil does not run on this machine"
case "$version" in
  *1.7.1*) ;;
  *) die "$anvil reports '$version', expected 1.7.1" ;;
esac
ln -sfn "$REPO/$anvil" "$OUT/anvil" || die "cannot link $OUT/anvil"

msg=$(cd "$SRC" && node compile.mjs "$REPO/$OUT/WakuRlnV2Local.json" 2>&1) \
  || { last=$(printf '%s\n' "$msg" | grep -m1 '^error: ' || printf '%s\n' "$msg" | tail -1)
       die "compiling WakuRlnV2Local.sol failed: ${last#error: }"; }
echo "$want" >"$STAMP" || die "cannot write $STAMP"
rm -f "$log"
echo "build_rln_chain: $msg; $version; $(( $(date +%s) - start )) s"
