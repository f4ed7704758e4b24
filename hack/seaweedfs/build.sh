#!/usr/bin/env bash
# Build SeaweedFS's `weed` (github.com/seaweedfs/seaweedfs/weed, Apache-2.0) from the Go module
# proxy into a versioned cache dir: the S3-compatible server the object-storage checkpoint tests
# and benchmarks run (hack/cluster/localcluster/seaweedfs.py starts it).
#
#   hack/seaweedfs/build.sh              # build if missing, print the dir (holding `weed`)
#   hack/seaweedfs/build.sh --print-dir  # only print the dir
#
# The version is pinned in hack/seaweedfs/go.mod (+ go.sum), a module of its own (tools.go names
# the command, so `go mod tidy` keeps its dependencies). No cgo. Cache:
# ${PHALANX_CACHE:-$HOME/.cache/phalanx}/bin/seaweedfs-<version>-<sha256(go.mod+go.sum+build.sh)[:10]>/
# (PHALANX_SEAWEEDFS_DIR overrides it).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

MOD=github.com/seaweedfs/seaweedfs
VERSION="$(awk -v m="$MOD" '{ if ($1 == "require") $1 = ""; $0 = $0 } $1==m && $2 ~ /^v/ {print $2; exit}' go.mod)"
SUM="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-10)"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
DIR="${PHALANX_SEAWEEDFS_DIR:-$CACHE/bin/seaweedfs-${VERSION:0:20}-${SUM}}"

log() { echo "[seaweedfs-build] $*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$DIR"
  exit 0
fi

source "$HERE/../build-lock.sh"
build_lock "seaweedfs-$SUM"
if [[ -x "$DIR/weed" ]]; then
  log "have weed $VERSION"
  echo "$DIR"
  exit 0
fi
command -v go >/dev/null || { log "go toolchain not found"; exit 1; }
mkdir -p "$DIR"
tmp="$(mktemp -d "$DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=mod}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
start=$SECONDS
log "building weed $VERSION into $DIR (go $(go env GOVERSION))"
go build -trimpath -ldflags "-s -w" -o "$tmp/weed" "$MOD/weed"
mv "$tmp/weed" "$DIR/weed"
log "built in $((SECONDS - start))s"
echo "$DIR"
