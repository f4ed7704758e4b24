#!/usr/bin/env bash
# hack/kind-e2e.sh demo: up, then train $JOB (default examples/cpu-3d-demo.yaml) afresh (RESUME=1:
# from the last run's checkpoints), streaming phase, step, loss and tokens/s until it ends; then
# list its committed checkpoints on the shared volume. The cluster keeps running.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
export KUBECONFIG="$KIND_KUBECONFIG"
JOB_FILE="${JOB:-examples/cpu-3d-demo.yaml}"

"$KIND_LIB_DIR/up.sh"
use_tools
name="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])' "$JOB_FILE")"
kubectl -n "$NAMESPACE" delete trainingjob "$name" --ignore-not-found --wait >/dev/null
kubectl -n "$NAMESPACE" wait --for=delete pod -l "phalanx.dev/job-name=$name" --timeout=180s >/dev/null 2>&1 || true
ckpt="$SHARED/$NAMESPACE/$name"
if [[ -d "$ckpt" && "${RESUME:-0}" != 1 ]]; then   # train afresh; keep the old run's checkpoints
  aside="$ckpt.$(date +%Y%m%d-%H%M%S)"
  mv "$ckpt" "$aside"
  log "earlier checkpoints moved to $aside (RESUME=1 resumes from them instead)"
fi
log "applying $JOB_FILE (checkpoints on the shared volume: $ckpt)"
kubectl -n "$NAMESPACE" apply -f "$JOB_FILE"
python3 -m phalanx watch "$name" -n "$NAMESPACE" --timeout 1800
log "committed checkpoints:"
for d in "$ckpt"/step-*; do [[ -f "$d/COMMITTED" ]] && echo "  $d ($(du -sh "$d" | cut -f1))"; done
cat <<TEXT

The cluster keeps running:
  export KUBECONFIG=$KUBECONFIG PATH=$K8S_BIN:\$PATH
  kubectl get tj,pods -o wide              # jobs (short name tj) and their pods
  kubectl describe tj $name                 # conditions and events
  kubectl logs -n phalanx-system deploy/phalanx-operator
  hack/kind-e2e.sh test                     # the e2e suite against this cluster
  hack/kind-e2e.sh down                     # delete the cluster
TEXT
