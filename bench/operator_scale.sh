#!/usr/bin/env bash
# Operator scale benchmark: build what it needs (cached), then run bench/operator_scale.py.
#   bench/operator_scale.sh [--order phalanx,kubeflow,kubeflow,phalanx] [--json out.json] ...
# Cluster binaries: hack/cluster/build.sh; Kubeflow training-operator: hack/bench/build.sh.
# Both cache under ${PHALANX_CACHE:-~/.cache/phalanx}; a cold build takes minutes on 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/hack/cluster/build.sh" >/dev/null
"$ROOT/hack/bench/build.sh" >/dev/null
exec python "$ROOT/bench/operator_scale.py" "$@"
