#!/usr/bin/env bash
# Build the kind node's own tools from the Go module proxy (no registry, no
# download sites): kind, containerd + shim + ctr, crictl, CNI plugins, CoreDNS.
# Versions follow kind's base image (images/base/Dockerfile of the pinned kind);
# CoreDNS is the nearest served release to kubeadm's default (see KIND_COREDNS_TAG).
#
#   hack/kind/tools.sh        # build what is missing, print the dir
#
# Cache: ${PHALANX_CACHE:-~/.cache/phalanx}/bin/kind-tools-<hash of this file>/.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"
KEY="$(cat "${BASH_SOURCE[0]}" "$HERE/versions.sh" | sha256sum | cut -c1-10)"
BIN_DIR="${PHALANX_CACHE:-$HOME/.cache/phalanx}/bin/kind-tools-$KEY"
log() { echo "[kind-tools] $*" >&2; }

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

mkdir -p "$BIN_DIR"
for t in "${TARGETS[@]}"; do
  name="${t%%:*}"; pkg="${t#*:}"
  [[ -x "$BIN_DIR/$name" ]] && continue
  log "go install $pkg"
  start=$SECONDS
  tmp="$(mktemp -d "$BIN_DIR/.build.XXXXXX")"
  CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS= GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
    go install -trimpath -ldflags "-s -w" -tags "no_aufs no_zfs no_btrfs no_devmapper" "$pkg"
  mv -f "$tmp"/* "$BIN_DIR/$name"
  rmdir "$tmp"
  log "built $name in $((SECONDS - start))s"
done
echo "$BIN_DIR"
