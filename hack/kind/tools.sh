#!/usr/bin/env bash
# Build the kind node's own tools from the Go module proxy (no registry, no
# download sites): kind, containerd + shim + ctr, crictl, CNI plugins, CoreDNS.
# Versions follow kind's base image (images/base/Dockerfile of the pinned kind);
# CoreDNS is the nearest served release to kubeadm's default (see COREDNS_VERSION
# in versions.sh).
#
#   hack/kind/tools.sh              # build what is missing, print the dir
#   hack/kind/tools.sh --print-dir  # only print the dir (builds nothing)
#
# Cache: $PHALANX_CACHE/bin/kind-tools-<key>/, the key hashing TARGETS (names, packages,
# versions) and the build flags below: nothing else decides these binaries.
set -euo pipefail
LOG_PREFIX="[kind-tools]"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# name:package@version (one `go install` each: every module builds with its own go.mod)
TARGETS=(
  "kind:sigs.k8s.io/kind@$KIND_VERSION"
  "containerd:github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION"
  "ctr:github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
  "containerd-shim-runc-v2:github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
  "crictl:sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  "ptp:github.com/containernetworking/plugins/plugins/main/ptp@$CNI_PLUGINS_VERSION"
  "loopback:github.com/containernetworking/plugins/plugins/main/loopback@$CNI_PLUGINS_VERSION"
  "host-local:github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_PLUGINS_VERSION"
  "portmap:github.com/containernetworking/plugins/plugins/meta/portmap@$CNI_PLUGINS_VERSION"
  "coredns:github.com/coredns/coredns@$COREDNS_VERSION"
)
BUILD_ENV=(CGO_ENABLED=0 GOFLAGS=)
BUILD_FLAGS=(-trimpath -ldflags "-s -w" -tags "no_aufs no_zfs no_btrfs no_devmapper")
KEY="$(printf '%s\n' "${TARGETS[@]}" "${BUILD_ENV[@]}" "${BUILD_FLAGS[@]}" | key_of 10)"
BIN_DIR="$CACHE/bin/kind-tools-$KEY"
[[ "${1:-}" == --print-dir ]] && { echo "$BIN_DIR"; exit 0; }
build_lock "kind-tools-$KEY"

mkdir -p "$BIN_DIR"
for t in "${TARGETS[@]}"; do
  name="${t%%:*}"; pkg="${t#*:}"
  [[ -x "$BIN_DIR/$name" ]] && continue
  log "go install $pkg"
  start=$SECONDS
  tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
  env "${BUILD_ENV[@]}" GOBIN="$tmp" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" go install "${BUILD_FLAGS[@]}" "$pkg"
  mv -f "$tmp"/* "$BIN_DIR/$name"
  rmdir "$tmp"
  log "built $name in $((SECONDS - start))s"
done
echo "$BIN_DIR"
