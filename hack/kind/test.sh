#!/usr/bin/env bash
# hack/kind-e2e.sh test [pytest args]: up, then the e2e suite (tests/e2e) against the cluster.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
export KUBECONFIG="$KIND_KUBECONFIG"

"$KIND_LIB_DIR/up.sh"
use_tools
PHALANX_REQUIRE_E2E=1 PHALANX_E2E_KUBECONFIG="$KIND_KUBECONFIG" PHALANX_E2E_SHARED_DIR="$SHARED" PHALANX_E2E_NAMESPACE="$NAMESPACE" \
  python3 -m pytest tests/e2e -q -p no:cacheprovider "$@"
