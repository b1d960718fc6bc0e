#!/bin/bash
# Prints the directory of a `go` to put first on PATH: the machine's when it has one (Go >= 1.21
# fetches the newer toolchain a module asks for by itself, GOTOOLCHAIN=auto), else Go GO_VERSION
# downloaded once from the Go module proxy, which serves Go toolchains as the module
# golang.org/toolchain (the zip's go/bin, unpacked into .cache/go).
set -euo pipefail
cd "$(dirname "$0")/.."
GO_VERSION=1.26.8
if command -v go >/dev/null; then
  dirname "$(command -v go)"
  exit 0
fi
dest=.cache/go/go$GO_VERSION
if [ ! -x "$dest/bin/go" ]; then
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "error: no Go on PATH and no Go toolchain for $(uname -m) on the module proxy: install Go >= 1.26" >&2; exit 2 ;;
  esac
  proxy=${GOPROXY:-https://proxy.golang.org}
  proxy=${proxy%%,*}
  url="$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_VERSION.linux-$arch.zip"
  echo "setup: no Go on PATH: downloading Go $GO_VERSION from the module proxy ($url)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  curl -fsSL --retry 3 -o "$tmp/go.zip" "$url" \
    || { echo "error: could not download $url: install Go >= 1.26 or set GOPROXY" >&2; exit 2; }
  mkdir -p "$tmp/x"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$tmp/go.zip" "$tmp/x"
  # The module zip holds golang.org/toolchain@<version>/{bin,pkg,src,...}; zip keeps no modes.
  root=$(echo "$tmp"/x/golang.org/toolchain@*)
  chmod -R u+x "$root/bin" "$root/pkg/tool"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mv "$root" "$dest"
fi
echo "$PWD/$dest/bin"
