#!/usr/bin/env bash
# Build the local integration-test control plane (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok, helm) and the kind
# node binaries (kubelet, kubeadm, kube-proxy) from the Go module proxy into a
# versioned cache dir.
#
# etcd is go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes itself
# requires (v3.6.x), not Debian's etcd-server (3.4): client-go >= 0.34 opens
# watch-list streams, which need etcd's RequestWatchProgress (etcd >= 3.5.13);
# against 3.4 every informer's watch ends with "the required storage feature
# RequestWatchProgress is disabled" and events arrive only on relists.
#
#   hack/cluster/build.sh              # build missing binaries, print the dir
#   hack/cluster/build.sh --print-dir  # only print the cache dir (builds nothing)
#
# Cache: ${PHALANX_CACHE:-$HOME/.cache/phalanx}/bin/<kubernetes version>-<key>/, the key being
# the first 10 hex of sha256 over what decides the binaries: go.mod, go.sum, TARGETS and the
# build flags (BUILD_ENV, ldflags) — not this script's comments. Binaries already present are
# skipped: a rerun takes well under a second. This script is the key's one home: everything else
# (hack/cluster/localcluster/binaries.py, the kind scripts) asks `build.sh --print-dir` or runs it.
# PHALANX_BIN_DIR overrides the dir.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

K8S_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)"
HELM_VERSION="$(awk '$1=="helm.sh/helm/v3" && $2 ~ /^v/ {print $2; exit}' go.mod)"
KWOK_VERSION="$(awk '$1=="sigs.k8s.io/kwok" && $2 ~ /^v/ {print $2; exit}' go.mod)"

# name:import-path
TARGETS=(
  "kube-apiserver:k8s.io/kubernetes/cmd/kube-apiserver"
  "kube-controller-manager:k8s.io/kubernetes/cmd/kube-controller-manager"
  "kube-scheduler:k8s.io/kubernetes/cmd/kube-scheduler"
  "kubectl:k8s.io/kubernetes/cmd/kubectl"
  "kubelet:k8s.io/kubernetes/cmd/kubelet"
  "kubeadm:k8s.io/kubernetes/cmd/kubeadm"
  "kube-proxy:k8s.io/kubernetes/cmd/kube-proxy"
  "kwok:sigs.k8s.io/kwok/cmd/kwok"
  "helm:helm.sh/helm/v3/cmd/helm"
  "etcd:go.etcd.io/etcd/server/v3"
)
# Programs built from their own module at the version go.mod pins (`go install pkg@version`:
# their go.mod, not ours, so adding them moves none of the pins above). kwokctl runs the local
# control plane (hack/cluster/localcluster) from the binaries above.
INSTALLS=(
  "kwokctl:sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION"
)
# Static binaries, stamped with the versions `make` would (kube-apiserver /version, kubectl
# version, helm version); a plain module build reports v0.0.0-master.
BUILD_ENV=(CGO_ENABLED=0)
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
ldflags+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=module"

KEY="$( (cat go.mod go.sum; printf '%s\n' "${TARGETS[@]}" "${INSTALLS[@]}" "${BUILD_ENV[@]}" -trimpath "$ldflags") | sha256sum | cut -c1-10)"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
BIN_DIR="${PHALANX_BIN_DIR:-$CACHE/bin/$K8S_VERSION-$KEY}"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$BIN_DIR"
  exit 0
fi

log() { echo "[cluster-build] $*" >&2; }

source "$HERE/../build-lock.sh"
build_lock "cluster-binaries-$K8S_VERSION-$KEY"
mkdir -p "$BIN_DIR"

missing=()
for t in "${TARGETS[@]}"; do
  name="${t%%:*}"; pkg="${t#*:}"
  if [[ -x "$BIN_DIR/$name" ]]; then
    log "have $name"
  else
    missing+=("$pkg")
  fi
done

installs=()
for t in "${INSTALLS[@]}"; do
  [[ -x "$BIN_DIR/${t%%:*}" ]] && log "have ${t%%:*}" || installs+=("${t#*:}")
done

if ((${#missing[@]} + ${#installs[@]})); then
  command -v go >/dev/null || { log "go toolchain not found"; exit 1; }
  log "building $((${#missing[@]} + ${#installs[@]})) binaries into $BIN_DIR (go $(go env GOVERSION), k8s $K8S_VERSION)"
  tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  start=$SECONDS
  # One `go build` for all packages: shared packages compile once and the
  # two cores stay busy. The versions come from go.mod.
  if ((${#missing[@]})); then
    env "${BUILD_ENV[@]}" GOFLAGS="${GOFLAGS:--mod=mod}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
      go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${missing[@]}"
  fi
  for pkg in "${installs[@]}"; do
    env "${BUILD_ENV[@]}" GOBIN="$tmp" GOFLAGS= GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
      go install -trimpath -ldflags "-s -w" "$pkg"
  done
  # go names a /vN main package after the element before it: server/v3 -> server.
  [[ -f "$tmp/server" ]] && mv -f "$tmp/server" "$tmp/etcd"
  for f in "$tmp"/*; do mv -f "$f" "$BIN_DIR/"; done
  log "built in $((SECONDS - start))s"
fi

echo "$BIN_DIR"
