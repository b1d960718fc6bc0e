#!/usr/bin/env bash
# Builds go-waku v0.10.0's own node (cmd/waku, the `tool` of go.mod beside this script) to
# <repo>/.cache/interop/gowaku-node, for tests/interop/test_rest_gowaku.py (`make test`: scripts/setup.sh
# --with-interop builds it) and tests/benchmarks/side_by_side.py.
# Idempotent: rebuilds only when go.mod, go.sum, this script, filter_limit.go.txt or the Go version changed (sha256
# stamp beside the binary). On success prints the binary's path; on failure one line "error: ..."
# and exit 2 (details in .cache/interop/gowaku-node.build.log).
set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
outdir="$root/.cache/interop"
bin="$outdir/gowaku-node"
stamp="$outdir/gowaku-node.stamp"
log="$outdir/gowaku-node.build.log"

die() { echo "error: $*"; exit 2; }

command -v go >/dev/null 2>&1 || die "go is not installed (need Go >= 1.24 and a C compiler: go-waku's sqlite3 and secp256k1 need cgo)"
mkdir -p "$outdir" || die "cannot create $outdir"

# As tests/interop/go/build.sh: no RLN (gowaku_no_rln), GONOSUMDB for the waku-org modules the
# checksum database lacks (go.sum still pins them), cgo on.
tags="gowaku_no_rln"
export GONOSUMDB="github.com/waku-org"
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN="local"
export CGO_ENABLED=1

goversion="$(go env GOVERSION 2>/dev/null)" || die "go env failed"
want="$(cd "$here" && { printf 'go=%s tags=%s\n' "$goversion" "$tags"; for f in go.mod go.sum build.sh filter_limit.go.txt; do
  printf '%s ' "$f"; sha256sum < "$f"; done; } | sha256sum | cut -d' ' -f1)" || die "cannot hash the sources"

if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$bin"
  exit 0
fi
exec 9>"$outdir/.gowaku-node.build.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [ -x "$bin" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$bin"
  exit 0
fi

tmp="$bin.tmp.$$"
start=$(date +%s)
# One change to cmd/waku: its filter service takes GOWAKU_FILTER_MAX_SUBSCRIBERS
# (filter_limit.go.txt; go-waku's 20 when unset), which tests/benchmarks/capacity.py sets to offer
# it more than 20 light clients. Built from a copy of cmd/waku's own files (its packages and every
# other module as go.mod pins them; the module cache untouched), with that one line changed.
: > "$log"
work="$outdir/gowaku-node.src"
rm -rf "$work" && mkdir -p "$work" || die "cannot create $work"
src="$(cd "$here" && go mod download -json github.com/waku-org/go-waku 2>>"$log" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
[ -n "$src" ] && [ -f "$src/cmd/waku/node.go" ] || die "go mod download github.com/waku-org/go-waku found no cmd/waku; see $log"
cp "$here/go.mod" "$here/go.sum" "$src"/cmd/waku/*.go "$work/" && chmod u+w "$work"/* || die "cannot copy cmd/waku to $work"
cp "$here/filter_limit.go.txt" "$work/filter_limit.go" || die "cannot write $work/filter_limit.go"
line='node.WithWakuFilterFullNode(filter.WithTimeout(options.Filter.Timeout))'
[ "$(grep -cF "$line" "$work/node.go")" = 1 ] || die "cmd/waku/node.go no longer holds the filter option line this build changes"
sed -i "s|$line|node.WithWakuFilterFullNode(filter.WithTimeout(options.Filter.Timeout), filter.WithMaxSubscribers(filterMaxSubscribers()))|" \
  "$work/node.go" || die "cannot change $work/node.go"
if ! (cd "$work" && go build -buildvcs=false -trimpath -tags "$tags" -ldflags "-s -w" -o "$tmp" .) >>"$log" 2>&1; then
  rm -f "$tmp"
  last="$(grep -v '^\s*$' "$log" | tail -n 1)"
  die "go build failed (${last:-no output}); see $log"
fi
mv -f "$tmp" "$bin" || die "cannot move the binary to $bin"
echo "$want" > "$stamp"
echo "built in $(( $(date +%s) - start ))s" >> "$log"
echo "$bin"
