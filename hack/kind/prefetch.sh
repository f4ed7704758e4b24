#!/usr/bin/env bash
# hack/kind-e2e.sh prefetch: only the network-bound parts (the kind-base Debian rootfs where the
# stock node image is not pullable, the torch wheelhouse); CI runs it while the Go builds take
# the CPUs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pids=()
if ! stock_pullable; then
  "$KIND_LIB_DIR/rootfs.sh" kind-base "$KIND_BASE_PACKAGES" >/dev/null & pids+=($!)
fi
"$KIND_LIB_DIR/app-images.sh" wheels & pids+=($!)
for pid in "${pids[@]}"; do wait "$pid"; done
