#!/usr/bin/env bash
# hack/kind-e2e.sh down: delete the kind cluster $CLUSTER (its kubeconfig context too). Builds and
# installs nothing: with no kind binary built yet, it removes the cluster's node containers itself.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export KUBECONFIG="$KIND_KUBECONFIG"

ensure_dockerd
kind="$("$KIND_LIB_DIR/tools.sh" --print-dir)/kind"
if [[ -x "$kind" ]]; then
  "$kind" delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
else
  log "deleting the node containers of $CLUSTER (no kind binary built)"
  docker ps -aq --filter "label=io.x-k8s.kind.cluster=$CLUSTER" | xargs -r docker rm -f >/dev/null
fi
