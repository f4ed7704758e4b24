#!/usr/bin/env bash
# Phalanx on a kind cluster (1 control plane + 2 workers): real pods that train.
#
#   hack/kind-e2e.sh up        build or reuse everything, create the cluster, install the chart
#   hack/kind-e2e.sh demo      up + train examples/cpu-3d-demo.yaml, streaming progress
#   hack/kind-e2e.sh test      up + the e2e suite (tests/e2e)
#   hack/kind-e2e.sh down      delete the cluster
#   hack/kind-e2e.sh images    build or reuse the node image (offline route) and Phalanx's images
#   hack/kind-e2e.sh prefetch  only the network-bound parts (Debian rootfs images, torch
#                              wheels): CI runs it while the Go builds take the CPUs
#
# Two routes to a node image, chosen automatically (PHALANX_KIND_NODE_IMAGE overrides):
#   stock    a normal Docker that can pull: kind's own kindest/node image, stock kind.
#   offline  no registry: hack/kind/node-image.sh builds one from Debian packages and the
#            Go module proxy; if the engine refuses --privileged, kind runs through
#            hack/kind/shim/docker.
# Images of Phalanx itself never come from a registry: hack/kind/app-images.sh builds them
# and load_image (a disk-frugal `kind load`) puts them on the nodes.
# PHALANX_KIND_IMAGES="operator" skips the 3.6 GB runtime image (default "operator runtime");
# PHALANX_KIND_NETPOL=1 installs a NetworkPolicy enforcer (hack/kind/netpol.sh) in `up`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source hack/kind/versions.sh
CLUSTER="${PHALANX_KIND_CLUSTER:-phalanx}"
STATE="${PHALANX_KIND_DIR:-$ROOT/.kind}"
SHARED="$STATE/shared"                     # host dir mounted on every node: the shared volume
export KUBECONFIG="$STATE/kubeconfig"
NAMESPACE="${PHALANX_NAMESPACE:-default}"
JOB_FILE="${JOB:-examples/cpu-3d-demo.yaml}"
log() { echo "phalanx-kind: $*" >&2; }

ensure_host() {
  if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
    if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
      command -v dockerd >/dev/null || { log "installing docker.io"; DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null; }
      if ! docker info >/dev/null 2>&1; then
        log "starting dockerd"; (nohup dockerd >/var/log/phalanx-dockerd.log 2>&1 &)
        for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
      fi
    fi
    docker info >/dev/null 2>&1 || { log "a running Docker engine is needed"; exit 1; }
  fi
  python3 -c "import phalanx, kopf" 2>/dev/null || python3 -m pip install -q -e '.[dev,runtime]'
  K8S_BIN="$(hack/cluster/build.sh)"       # kubectl, helm (and the node binaries)
  TOOLS="$(hack/kind/tools.sh)"            # kind
  export PATH="$K8S_BIN:$TOOLS:$PATH"
}

stock_pullable() {
  docker image inspect "$STOCK_NODE_IMAGE" >/dev/null 2>&1 || timeout 60 docker pull -q "$STOCK_NODE_IMAGE" >/dev/null 2>&1
}

choose_node_image() {
  if [[ -n "${PHALANX_KIND_NODE_IMAGE:-}" ]]; then NODE_IMAGE="$PHALANX_KIND_NODE_IMAGE"; return; fi
  if stock_pullable; then
    NODE_IMAGE="$STOCK_NODE_IMAGE"; OFFLINE=0
  else
    command -v debootstrap >/dev/null || { [[ $EUID -eq 0 ]] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
    log "no registry: building the node image offline"
    NODE_IMAGE="$(hack/kind/node-image.sh)"; OFFLINE=1
  fi
}

use_shim_if_needed() {
  if ! docker run --rm --privileged --entrypoint /bin/true "$NODE_IMAGE" >/dev/null 2>&1; then
    log "docker refuses --privileged here: kind runs through hack/kind/shim/docker"
    export PATH="$ROOT/hack/kind/shim:$PATH"
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
  - role: worker
$mount
  - role: worker
$mount
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
YAML
  if [[ "${OFFLINE:-0}" == 1 ]]; then
    cat <<YAML
  - |
    kind: ClusterConfiguration
    dns:
      imageTag: $COREDNS_VERSION
YAML
  fi
}

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

# `kind load docker-image`, frugal with disk: streams `docker save` into each node's
# containerd (no temporary tarball on the host), drops the replaced image first and keeps only
# the unpacked layers (--discard-unpacked-layers), so a node holds one copy of the 3.5 GB
# runtime image instead of three. Skips nodes that already have this exact image.
load_image() {
  local image="$1" id pids=() node
  id="$(docker image inspect -f '{{.Id}}' "$image")"
  for node in $(kind get nodes --name "$CLUSTER"); do
    [[ "$image" == phalanx/runtime:* && "$node" == *control-plane ]] && continue   # no training there
    docker exec "$node" crictl inspecti -q "$image" 2>/dev/null | grep -q "$id" && continue
    log "loading $image onto $node"
    ( set -o pipefail
      docker exec "$node" ctr -n k8s.io images rm "docker.io/$image" >/dev/null 2>&1 || true
      docker save "$image" | docker exec -i "$node" ctr -n k8s.io images import --local --digests \
        --snapshotter=overlayfs --discard-unpacked-layers - >/dev/null 2>"$STATE/load-$node.log" ||
        { grep -v DEPRECATION "$STATE/load-$node.log" >&2; exit 1; } ) &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { log "loading $image failed"; exit 1; }; done
}

up() {
  local start=$SECONDS
  ensure_host
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
  local images
  mapfile -t images < <(hack/kind/app-images.sh ${PHALANX_KIND_IMAGES:-operator runtime})
  for image in "${images[@]}"; do load_image "$image"; done
  [[ "${PHALANX_KIND_NETPOL:-0}" == 1 ]] && PHALANX_KIND_CLUSTER="$CLUSTER" hack/kind/netpol.sh install
  shared_volume
  log "installing charts/phalanx"
  kubectl get ns phalanx-system >/dev/null 2>&1 || kubectl create ns phalanx-system >/dev/null
  helm upgrade --install phalanx charts/phalanx -n phalanx-system --set image.pullPolicy=Never \
    --set-string podAnnotations.phalanx\\.dev/image-id="$(docker image inspect -f '{{.Id}}' "phalanx/operator:$PHALANX_VERSION" | cut -c8-20)" \
    --wait --timeout 5m >/dev/null
  log "ready in $((SECONDS - start))s: export KUBECONFIG=$KUBECONFIG"
}

demo() {
  up
  local name
  name="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["metadata"]["name"])' "$JOB_FILE")"
  kubectl -n "$NAMESPACE" delete trainingjob "$name" --ignore-not-found --wait >/dev/null
  kubectl -n "$NAMESPACE" wait --for=delete pod -l "phalanx.dev/job-name=$name" --timeout=180s >/dev/null 2>&1 || true
  local ckpt="$SHARED/$NAMESPACE/$name"
  if [[ -d "$ckpt" && "${RESUME:-0}" != 1 ]]; then   # train afresh; keep the old run's checkpoints
    local aside
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
}

e2e() {
  up
  PHALANX_REQUIRE_E2E=1 PHALANX_E2E_SHARED_DIR="$SHARED" PHALANX_E2E_NAMESPACE="$NAMESPACE" \
    python3 -m pytest tests/e2e -q -p no:cacheprovider "$@"
}

down() {
  ensure_host
  choose_node_image
  use_shim_if_needed
  kind delete cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
}

images() {
  ensure_host
  choose_node_image
  hack/kind/app-images.sh operator runtime >/dev/null
}

prefetch() {
  local pids=()
  if ! stock_pullable; then
    hack/kind/rootfs.sh kind-base "$KIND_BASE_PACKAGES" >/dev/null & pids+=($!)
  fi
  hack/kind/app-images.sh wheels & pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid"; done
}

case "${1:-}" in
  prefetch) prefetch ;;
  images) images ;;
  up) up ;;
  demo) demo ;;
  test) shift; e2e "$@" ;;
  down) down ;;
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac
