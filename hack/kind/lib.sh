# Shared by the kind route's scripts: source it (it runs nothing, sets no shell options).
#   verbs     hack/kind/{up,demo,test,down,images,prefetch}.sh, behind hack/kind-e2e.sh
#   builders  hack/kind/{tools,node-image,app-images,netpol}.sh; .ci/run (ensure_dockerd)
#
# Settings (environment) → variables:
#   PHALANX_KIND_CLUSTER  CLUSTER          kind cluster name (default phalanx)
#   PHALANX_KIND_DIR      STATE            kubeconfig, kind config, logs, shared/ (default .kind/)
#                         SHARED           $STATE/shared: mounted on every node at /phalanx-shared
#                         KIND_KUBECONFIG  $STATE/kubeconfig
#   PHALANX_NAMESPACE     NAMESPACE        where jobs run (default default)
#   PHALANX_CACHE         CACHE            binary cache (default ~/.cache/phalanx)
# Also ROOT (the checkout), PHALANX_VERSION (pyproject.toml's version: its one home) and the
# pins of hack/kind/versions.sh.
KIND_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$KIND_LIB_DIR/../.." && pwd)"
# shellcheck source=versions.sh
source "$KIND_LIB_DIR/versions.sh"
# shellcheck source=../build-lock.sh
source "$KIND_LIB_DIR/../build-lock.sh"
PHALANX_VERSION="$(awk -F'"' '/^version = /{print $2; exit}' "$ROOT/pyproject.toml")"
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
CLUSTER="${PHALANX_KIND_CLUSTER:-phalanx}"
STATE="${PHALANX_KIND_DIR:-$ROOT/.kind}"
SHARED="$STATE/shared"
KIND_KUBECONFIG="$STATE/kubeconfig"
NAMESPACE="${PHALANX_NAMESPACE:-default}"
WORKERS="${PHALANX_KIND_WORKERS:-2}"
[[ "$WORKERS" =~ ^[1-9][0-9]?$ ]] || { echo "PHALANX_KIND_WORKERS: a number of worker nodes, 1-99 (got '$WORKERS')" >&2; exit 2; }

# Messages go to stderr (stdout carries results: a tag, a dir); LOG_PREFIX names the script.
log() { echo "${LOG_PREFIX:-phalanx-kind:} $*" >&2; }

# Cache keys: `… | key_of N` is the first N hex digits of the sha256 of its input. Keys hash
# what decides the artifact — pins, build flags, the code that builds it — never comments:
# code_of prints FILE's lines less comment-only and blank ones; with function names, only the
# code of those functions.
key_of() { sha256sum | cut -c1-"$1"; }
code_of() { # file [function...]
  local file="$1" fn; shift
  for fn in "$@"; do
    grep -q "^$fn() *{" "$file" || { log "code_of: no function $fn in $file"; return 1; }
  done
  if (($#)); then
    for fn in "$@"; do sed -n "/^$fn() *{/,/^}/p" "$file"; done
  else
    cat "$file"
  fi | grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$'
}

# The source dir of a Go module (downloaded into Go's module cache once).
go_mod_dir() { GOFLAGS=-mod=mod go mod download -json "$1" | jq -r .Dir; }

# The Docker engine, running: started here (as root, log /var/log/phalanx-dockerd.log) when it is
# installed but not running. The one place that starts it (.ci/run calls it too).
ensure_dockerd() {
  docker info >/dev/null 2>&1 && return 0
  if command -v dockerd >/dev/null && [[ $EUID -eq 0 ]]; then
    log "starting dockerd"
    # Without the caller's open files: an inherited lock (build_lock's fd 9, `flock LOCK cmd`'s fd 3)
    # would stay held by dockerd, which outlives the caller, and block every later taker.
    (for fd in /proc/$BASHPID/fd/*; do fd="${fd##*/}"; ((fd > 2)) && eval "exec $fd>&-"; done
     nohup dockerd >/var/log/phalanx-dockerd.log 2>&1 &)
    local _; for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && return 0; sleep 1; done
  fi
  log "a running Docker engine is needed"
  return 1
}

# ensure_dockerd, installing docker.io first where it is missing (root with apt).
ensure_docker() {
  if ! command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1 && [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing docker.io"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
  fi
  ensure_dockerd
}

# kubectl, helm (hack/cluster/build.sh) and kind (hack/kind/tools.sh) first in PATH: built once
# per set of pins, seconds when cached. Sets K8S_BIN and KIND_TOOLS.
use_tools() {
  K8S_BIN="$("$ROOT/hack/cluster/build.sh")"
  KIND_TOOLS="$("$KIND_LIB_DIR/tools.sh")"
  export PATH="$K8S_BIN:$KIND_TOOLS:$PATH"
}

# kind's own node image, present or pullable (the route for a Docker that can pull).
stock_pullable() {
  docker image inspect "$STOCK_NODE_IMAGE" >/dev/null 2>&1 || timeout 60 docker pull -q "$STOCK_NODE_IMAGE" >/dev/null 2>&1
}

# NODE_IMAGE: $PHALANX_KIND_NODE_IMAGE, else kind's stock image when pullable, else one built
# offline by hack/kind/node-image.sh (OFFLINE=1: the cluster config then pins CoreDNS's tag).
choose_node_image() {
  OFFLINE=0
  if [[ -n "${PHALANX_KIND_NODE_IMAGE:-}" ]]; then NODE_IMAGE="$PHALANX_KIND_NODE_IMAGE"; return; fi
  if stock_pullable; then
    NODE_IMAGE="$STOCK_NODE_IMAGE"
  else
    command -v debootstrap >/dev/null || { [[ $EUID -eq 0 ]] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; }
    log "no registry: building the node image offline"
    NODE_IMAGE="$("$KIND_LIB_DIR/node-image.sh")"; OFFLINE=1
  fi
}

# load_image IMAGE [--workers]: `kind load docker-image` onto the nodes of $CLUSTER (--workers:
# not the control plane), frugal with disk: streams `docker save` into each node's containerd (no
# temporary tarball on the host), drops the replaced image first and keeps only the unpacked
# layers (--discard-unpacked-layers), so a node holds one copy of the 3.5 GB runtime image
# instead of three. Skips nodes that already have this exact image; loads the others at once.
load_image() {
  local image="$1" only="${2:-}" id node pid pids=()
  id="$(docker image inspect -f '{{.Id}}' "$image")"
  mkdir -p "$STATE"
  for node in $(kind get nodes --name "$CLUSTER"); do
    [[ "$only" == --workers && "$node" == *control-plane ]] && continue
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
