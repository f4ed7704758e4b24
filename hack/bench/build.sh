#!/usr/bin/env bash
# Build the third-party operators that bench/operator_scale.py compares
# Phalanx against, from the Go module proxy, into a versioned cache dir:
#
#   training-operator   github.com/kubeflow/training-operator/cmd/training-operator.v1
#
#   hack/bench/build.sh              # build missing binaries, print the dir
#   hack/bench/build.sh --print-dir  # only print the cache dir
#   hack/bench/build.sh --crd-dir    # print the module's manifests/base/crds dir
#
# Versions are pinned in hack/bench/go.mod (+ go.sum). Cache:
# ${PHALANX_CACHE:-$HOME/.cache/phalanx}/bench-bin/<training-operator version>-<sha256(go.mod+go.sum+build.sh)[:10]>/
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

TO_MOD=github.com/kubeflow/training-operator
TO_VERSION="$(awk -v m="$TO_MOD" '{ if ($1 == "require") $1 = ""; $0 = $0 } $1==m && $2 ~ /^v/ {print $2; exit}' go.mod)"
SUM="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-10)"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
BIN_DIR="${PHALANX_BENCH_BIN_DIR:-$CACHE/bench-bin/${TO_VERSION}-${SUM}}"

log() { echo "[bench-build] $*" >&2; }

case "${1:-}" in
  --print-dir) echo "$BIN_DIR"; exit 0 ;;
  --crd-dir)
    dir="$(GOFLAGS=-mod=mod go mod download -json "$TO_MOD@$TO_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    echo "$dir/manifests/base/crds"; exit 0 ;;
esac

mkdir -p "$BIN_DIR"
if [[ -x "$BIN_DIR/training-operator" ]]; then
  log "have training-operator"
else
  command -v go >/dev/null || { log "go toolchain not found"; exit 1; }
  log "building training-operator $TO_VERSION into $BIN_DIR (go $(go env GOVERSION))"
  tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=mod}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
    go build -trimpath -ldflags "-s -w" -o "$tmp/training-operator" "$TO_MOD/cmd/training-operator.v1"
  mv "$tmp/training-operator" "$BIN_DIR/training-operator"
  log "built in $((SECONDS - start))s"
fi
echo "$BIN_DIR"
