#!/usr/bin/env bash
# Builds the go-waku reference client to <repo>/.cache/interop/wakuinterop.
# Idempotent: rebuilds only when *.go, go.mod, go.sum, this script or the Go version
# changed (sha256 stamp beside the binary). On success prints the binary's path; on
# failure prints one line "error: ..." and exits 2 (details in .cache/interop/build.log).
set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
outdir="$root/.cache/interop"
bin="$outdir/wakuinterop"
stamp="$outdir/wakuinterop.stamp"
log="$outdir/build.log"

die() { echo "error: $*"; exit 2; }

command -v go >/dev/null 2>&1 || die "go is not installed (need Go >= 1.23 and a C compiler: go-waku needs cgo)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"
mkdir -p "$outdir" || die "cannot create $outdir"

# Build settings (part of the stamp).
# - gowaku_no_rln: go-waku without RLN (no zerokit static library); RLN is not used here.
# - GONOSUMDB: the checksum database lacks a waku-org dependency (go.sum still pins it).
# - CGO_ENABLED=1: go-ethereum's secp256k1 (used by go-waku's relay) needs cgo.
tags="gowaku_no_rln"
export GONOSUMDB="github.com/waku-org"
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN="local"
export CGO_ENABLED=1

goversion="$(go env GOVERSION 2>/dev/null)" || die "go env failed"

want="$(
  cd "$here" &&
  {
    printf 'go=%s tags=%s\n' "$goversion" "$tags"
    for f in $(ls *.go go.mod go.sum build.sh 2>/dev/null | LC_ALL=C sort); do
      printf '%s ' "$f"; sha256sum < "$f"
    done
  } | sha256sum | cut -d' ' -f1
)" || die "cannot hash the sources"

if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$bin"
  exit 0
fi

# One build at a time (the project's setup and a developer may race).
exec 9>"$outdir/.build.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
# Another build may have finished while we waited.
if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$bin"
  exit 0
fi

tmp="$bin.tmp.$$"
start=$(date +%s)
if ! (cd "$here" && go build -buildvcs=false -trimpath -tags "$tags" -ldflags "-s -w" -o "$tmp" .) >"$log" 2>&1; then
  rm -f "$tmp"
  last="$(grep -v '^\s*$' "$log" | tail -n 1)"
  die "go build failed (${last:-no output}); see $log"
fi
mv -f "$tmp" "$bin" || die "cannot move the binary to $bin"
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start ))s" >> "$log"
echo "$bin"
