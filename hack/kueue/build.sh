#!/usr/bin/env bash
# Build Kueue (sigs.k8s.io/kueue/cmd/kueue) from the Go module proxy into a versioned cache dir
# and copy the module's CRDs and webhook manifests next to it, so the cache dir is self-contained:
#
#   <dir>/kueue
#   <dir>/crds/*.yaml              config/components/crd/bases (conversion webhooks not patched in)
#   <dir>/webhook-manifests.yaml   config/components/webhook/manifests.yaml (service clientConfig)
#   <dir>/chart/                   charts/kueue (the Helm chart: hack/kueue/kind.sh installs it on kind)
#
#   hack/kueue/build.sh              # build if missing, print the dir
#   hack/kueue/build.sh --print-dir  # only print the dir
#
# The version is pinned in hack/kueue/go.mod (+ go.sum), a module of its own so that the
# control plane's key (hack/cluster/build.sh) is untouched. Kueue v0.17.0 says `go 1.25.0`: the
# machine's Go 1.26 builds it, GOTOOLCHAIN=local. Cache:
# ${PHALANX_CACHE:-$HOME/.cache/phalanx}/bin/kueue-<version>-<sha256(go.mod+go.sum+build.sh)[:10]>/
# (PHALANX_KUEUE_DIR overrides it).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

MOD=sigs.k8s.io/kueue
VERSION="$(awk -v m="$MOD" '{ if ($1 == "require") $1 = ""; $0 = $0 } $1==m && $2 ~ /^v/ {print $2; exit}' go.mod)"
SUM="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-10)"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
DIR="${PHALANX_KUEUE_DIR:-$CACHE/bin/kueue-${VERSION}-${SUM}}"

log() { echo "[kueue-build] $*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$DIR"
  exit 0
fi

source "$HERE/../build-lock.sh"
build_lock "kueue-$VERSION-$SUM"
if [[ -x "$DIR/kueue" && -f "$DIR/webhook-manifests.yaml" && -d "$DIR/crds" && -d "$DIR/chart" ]]; then
  log "have kueue $VERSION"
  echo "$DIR"
  exit 0
fi
command -v go >/dev/null || { log "go toolchain not found"; exit 1; }
mkdir -p "$DIR"
tmp="$(mktemp -d "$DIR/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--mod=mod}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
start=$SECONDS
log "building kueue $VERSION into $DIR (go $(go env GOVERSION))"
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${VERSION}" \
  -o "$tmp/kueue" "$MOD/cmd/kueue"
src="$(go mod download -json "$MOD@$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
mkdir -p "$tmp/crds"
cp "$src"/config/components/crd/bases/*.yaml "$tmp/crds/"
cp "$src/config/components/webhook/manifests.yaml" "$tmp/webhook-manifests.yaml"
cp -r "$src/charts/kueue" "$tmp/chart"
chmod -R u+w "$tmp"
rm -rf "$DIR/crds" "$DIR/chart"
mv "$tmp/crds" "$DIR/crds"
mv "$tmp/chart" "$DIR/chart"
mv "$tmp/webhook-manifests.yaml" "$DIR/webhook-manifests.yaml"
mv "$tmp/kueue" "$DIR/kueue"
log "built in $((SECONDS - start))s"
echo "$DIR"
