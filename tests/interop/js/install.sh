#!/usr/bin/env bash
# Installs the js-waku interop harness (tests/interop/js/node_modules) with `npm ci`, only when
# package.json / package-lock.json changed since the last successful install (a stamp file in
# node_modules holds their checksum). Idempotent; safe to call from the project's setup script.
#
# Output: nothing when up to date, one line after an install; on failure one line
# `error: ...` on stderr and exit status 2 (npm's own output is kept in a log file it names).
#
# Needs npm (Debian's npm on Node 20 is fine): the harness runs on the Node 22 binary that the
# npm package "node" (a pinned dependency) installs as node_modules/.bin/node.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
stamp="$here/node_modules/.interop-install-stamp"
node_bin="$here/node_modules/.bin/node"

fail() {
    echo "error: tests/interop/js: $*" >&2
    exit 2
}

command -v npm >/dev/null 2>&1 || fail "npm not found (Debian: apt-get install npm)"
command -v sha256sum >/dev/null 2>&1 || fail "sha256sum not found"
[ -f "$here/package.json" ] || fail "package.json missing"
[ -f "$here/package-lock.json" ] || fail "package-lock.json missing"

want="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)"

node_ok() {
    [ -x "$node_bin" ] && "$node_bin" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' \
        >/dev/null 2>&1
}

up_to_date() {
    [ -f "$stamp" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && node_ok
}

up_to_date && exit 0

# One installer at a time (the setup script and a developer may overlap).
if command -v flock >/dev/null 2>&1; then
    exec 9>"$here/.install.lock" || fail "cannot open $here/.install.lock"
    flock 9 || fail "cannot lock $here/.install.lock"
    up_to_date && exit 0
fi

log="$(mktemp "${TMPDIR:-/tmp}/interop-js-npm-ci.XXXXXX.log")" || fail "mktemp failed"
start=$(date +%s)
# --ignore-scripts=false: the "node" package installs its binary from a preinstall script.
(cd "$here" && npm ci --ignore-scripts=false --no-audit --no-fund --loglevel=warn) >"$log" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "npm ci failed (exit $rc); npm output in $log"
node_ok || fail "npm ci finished but $node_bin is missing or older than Node 22 (install scripts blocked?); npm output in $log"
[ -f "$here/node_modules/@waku/sdk/package.json" ] && [ -f "$here/node_modules/waku-sdk-relay/package.json" ] \
    || fail "npm ci finished but @waku/sdk or waku-sdk-relay is missing; npm output in $log"
printf '%s\n' "$want" >"$stamp" || fail "cannot write $stamp"
rm -f "$log"
echo "tests/interop/js: npm ci done in $(( $(date +%s) - start )) s (node $("$node_bin" --version))"
