#!/usr/bin/env bash
# Build SeaweedFS's `weed` (its S3 gateway is the object store of tests/integration/test_store_on_s3.py
# and of tools/object_store.py) from the Go module proxy into .cache/bin/weed. Skipped when the
# binary of this version is there. Needs Go >= 1.26 (the module's go.mod); a first build downloads
# ~200 modules and takes several minutes on 2 cores. `go install ...@version` refuses the module
# (its go.mod has a replace directive), so it is built inside the downloaded module.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=v0.0.0-20261109003541-7506e5f91cd6   # the proxy's newest, 2026-11-09
OUT=.cache/bin/weed
STAMP=$OUT.version
if [ -x "$OUT" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
command -v go >/dev/null || { echo "error: Go not found: SeaweedFS (the S3 tests' object store) is built with Go >= 1.26" >&2; exit 2; }
mkdir -p .cache/bin
dir=$(go mod download -json "github.com/seaweedfs/seaweedfs@$VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
[ -d "$dir" ] || { echo "error: could not download github.com/seaweedfs/seaweedfs@$VERSION from the Go module proxy" >&2; exit 2; }
echo "build_seaweedfs: building weed $VERSION (several minutes the first time)"
(cd "$dir" && nice go build -trimpath -o "$OLDPWD/$OUT.tmp" ./weed) \
  || { echo "error: building SeaweedFS failed" >&2; exit 2; }
mv "$OUT.tmp" "$OUT"
echo "$VERSION" > "$STAMP"
