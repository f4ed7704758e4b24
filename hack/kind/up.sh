#!/usr/bin/env bash
# hack/kind-e2e.sh up: build or reuse everything, create the kind cluster $CLUSTER (1 control
# plane + $PHALANX_KIND_WORKERS workers, default 2; kept when it exists), load Phalanx's images, install charts/phalanx.
# Environment: see hack/kind-e2e.sh --help.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
export KUBECONFIG="$KIND_KUBECONFIG"

# kind needs `docker run --privileged`; where the engine refuses it, the shim stands in.
use_shim_if_needed() {
  if ! docker run --rm --privileged --entrypoint /bin/true "$NODE_IMAGE" >/dev/null 2>&1; then
    log "docker refuses --privileged here: kind runs through hack/kind/shim/docker"
    export PATH="$KIND_LIB_DIR/shim:$PATH"
  fi
}

cluster_config() {
  local mount="    extraMounts: [{hostPath: \"$SHARED\", containerPath: /phalanx-shared}]"
  cat <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $CLUSTER
nodes:
  - role: control-plane
$mount
YAML
  for ((i = 0; i < WORKERS; i++)); do printf '  - role: worker\n%s\n' "$mount"; done
  cat <<YAML
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
YAML
  if [[ "$OFFLINE" == 1 ]]; then
    cat <<YAML
  - |
    kind: ClusterConfiguration
    dns:
      imageTag: $COREDNS_VERSION
YAML
  fi
}

# A ReadWriteMany hostPath PV over $SHARED, bound to the PVC phalanx-shared in $NAMESPACE.
shared_volume() {
  kubectl apply -f - >/dev/null <<YAML
apiVersion: v1
kind: PersistentVolume
metadata: {name: phalanx-shared-$NAMESPACE, labels: {phalanx.dev/shared: "true"}}
spec:
  capacity: {storage: 50Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: /phalanx-shared, type: DirectoryOrCreate}
  claimRef: {namespace: $NAMESPACE, name: phalanx-shared}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: phalanx-shared, namespace: $NAMESPACE}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: phalanx-shared-$NAMESPACE
  resources: {requests: {storage: 50Gi}}
YAML
  # Jobs run where Pod Security "restricted" is enforced: Phalanx pods are restricted by default.
  kubectl label namespace "$NAMESPACE" pod-security.kubernetes.io/enforce=restricted --overwrite >/dev/null
}

start=$SECONDS
ensure_docker
python3 -c "import phalanx, kopf" 2>/dev/null || python3 -m pip install -q -e '.[operator,runtime,dev]'
use_tools
choose_node_image
use_shim_if_needed
mkdir -p "$SHARED" && chmod 1777 "$SHARED"  # the pods write as uid 1000 (hostPath: fsGroup does not apply)
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "cluster $CLUSTER exists"
  kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
else
  log "creating cluster $CLUSTER from $NODE_IMAGE"
  cluster_config >"$STATE/kind-config.yaml"
  kind create cluster --image "$NODE_IMAGE" --config "$STATE/kind-config.yaml" --kubeconfig "$KUBECONFIG" --wait 5m
fi
mapfile -t images < <("$KIND_LIB_DIR/app-images.sh" ${PHALANX_KIND_IMAGES:-operator runtime})
for image in "${images[@]}"; do
  if [[ "$image" == phalanx/runtime:* ]]; then load_image "$image" --workers; else load_image "$image"; fi   # no training on the control plane
done
[[ "${PHALANX_KIND_NETPOL:-0}" == 1 ]] && PHALANX_KIND_CLUSTER="$CLUSTER" "$KIND_LIB_DIR/netpol.sh" install
shared_volume
log "installing charts/phalanx"
kubectl get ns phalanx-system >/dev/null 2>&1 || kubectl create ns phalanx-system >/dev/null
helm upgrade --install phalanx charts/phalanx -n phalanx-system --set image.pullPolicy=Never \
  --set-string podAnnotations.phalanx\\.dev/image-id="$(docker image inspect -f '{{.Id}}' "phalanx/operator:$PHALANX_VERSION" | cut -c8-20)" \
  --wait --timeout 5m >/dev/null
log "ready in $((SECONDS - start))s: export KUBECONFIG=$KUBECONFIG"
