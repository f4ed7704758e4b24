#!/usr/bin/env bash
# Prints a directory whose `go` is at least the version hack/cluster/go.mod asks for: the one on
# PATH when it is new enough, else Go's own toolchain module fetched once from the Go module proxy
# (golang.org/toolchain, the zip `GOTOOLCHAIN=goX` would download) into $PHALANX_CACHE/go/.
# So `make demo` and .ci/run need no Go installed; `export PATH="$(hack/go.sh):$PATH"`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want="$(awk '$1=="toolchain" {sub(/^go/, "", $2); print $2; exit} $1=="go" {v=$2} END {if (v) print v}' "$ROOT/hack/cluster/go.mod" | head -1)"
newer_or_same() { [[ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" == "$1" ]]; }

if have="$(go env GOVERSION 2>/dev/null)" && newer_or_same "$want" "${have#go}"; then
  dirname "$(command -v go)"; exit 0
fi
case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) echo "no Go toolchain for $(uname -m)" >&2; exit 1 ;; esac
dir="${PHALANX_CACHE:-$HOME/.cache/phalanx}/go/go$want.linux-$arch"
if [[ ! -x "$dir/bin/go" ]]; then
  proxy="${GOPROXY:-https://proxy.golang.org}"; proxy="${proxy%%,*}"
  url="$proxy/golang.org/toolchain/@v/v0.0.1-go$want.linux-$arch.zip"
  echo "[go] fetching Go $want from $url" >&2
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  curl -fsSL -o "$tmp/go.zip" "$url"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$tmp/go.zip" "$tmp/x"
  chmod +x "$tmp"/x/golang.org/toolchain@*/bin/* "$tmp"/x/golang.org/toolchain@*/pkg/tool/*/*
  mkdir -p "$(dirname "$dir")" && rm -rf "$dir" && mv "$tmp"/x/golang.org/toolchain@* "$dir"
fi
echo "$dir/bin"
