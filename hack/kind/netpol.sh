#!/usr/bin/env bash
# NetworkPolicy enforcement on the kind cluster (the offline node image's pod network enforces
# none): kube-network-policies (sigs.k8s.io, the enforcer inside kind's own kindnetd), built
# from the Go module proxy, no registry:
#   binary   `go build` of its cmd/ with one addition (hack/kind/netpol/nfqueue.go): where the
#            kernel has no nftables `queue` expression (CONFIG_NFT_QUEUE unset, no loadable
#            modules: this VM) the first packet of a connection goes to the same userspace queue
#            through xtables' NFQUEUE target (nft_compat)
#   image    the binary alone (upstream's image is distroless/static), streamed into the
#            containerd of every node
#   install  its install.yaml (RBAC + DaemonSet in kube-system) with this image; waits for it
#
#   hack/kind/netpol.sh           build or reuse, load and install into the kind cluster
#                                 $PHALANX_KIND_CLUSTER (default phalanx): context kind-<cluster>
#                                 of $KUBECONFIG (default $PHALANX_KIND_DIR/kubeconfig)
#   hack/kind/netpol.sh image     only build the image, print its tag
#   hack/kind/netpol.sh delete    uninstall, and drop its nftables table from the nodes
# `PHALANX_KIND_NETPOL=1 hack/kind-e2e.sh up|test` runs it after the cluster is created.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
source "$HERE/versions.sh"
KNP_VERSION=v0.8.0   # sigs.k8s.io/kube-network-policies (here, not in versions.sh: that one keys the node image)
CLUSTER="${PHALANX_KIND_CLUSTER:-phalanx}"
export KUBECONFIG="${KUBECONFIG:-${PHALANX_KIND_DIR:-$ROOT/.kind}/kubeconfig}"
KEY="$( (echo "$KNP_VERSION"; cat "${BASH_SOURCE[0]}" "$HERE/netpol/nfqueue.go") | sha256sum | cut -c1-12)"
IMAGE="phalanx.local/kube-network-policies:$KNP_VERSION-$KEY"
BIN="${PHALANX_CACHE:-$HOME/.cache/phalanx}/bin/kube-network-policies-$KEY/netpol"
log() { echo "[netpol] $*" >&2; }
k() { kubectl --context "kind-$CLUSTER" "$@"; }   # never another cluster of $KUBECONFIG

build_binary() {
  [[ -x "$BIN" ]] && return
  local src work start=$SECONDS
  src="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kube-network-policies@$KNP_VERSION" | jq -r .Dir)"
  work="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-netpol.XXXXXX")"
  cp -r "$src/." "$work" && chmod -R u+w "$work"
  cp "$HERE/netpol/nfqueue.go" "$work/pkg/networkpolicy/zz_phalanx_nfqueue.go"
  # every queue verdict through nfqueueVerdict; the build stops if upstream's code moved
  perl -0pi -e 's/queue := &expr\.Queue\{Num: uint16\(c\.config\.QueueID\)\}\n\tif c\.config\.FailOpen \{\n\t\tqueue\.Flag = expr\.QueueFlagBypass\n\t\}/queue := nfqueueVerdict(c.config.QueueID, c.config.FailOpen)/g' \
    "$work/pkg/networkpolicy/controller.go"
  perl -pi -e 's/&expr\.Queue\{Num: uint16\(n\.nfQueueID\), Flag: expr\.QueueFlagBypass\}/nfqueueVerdict(n.nfQueueID, true)/' \
    "$work/pkg/networkpolicy/dnsagent.go"
  if grep -n 'expr\.Queue{' "$work"/pkg/networkpolicy/{controller,dnsagent}.go >&2; then
    log "kube-network-policies $KNP_VERSION: these queue verdicts were not patched"; rm -rf "$work"; exit 1
  fi
  log "go build sigs.k8s.io/kube-network-policies@$KNP_VERSION/cmd"
  mkdir -p "$(dirname "$BIN")"
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}" \
     go build -trimpath -ldflags "-s -w" -o "$BIN.tmp" ./cmd)
  mv -f "$BIN.tmp" "$BIN"
  rm -rf "$work"
  find "$(dirname "$(dirname "$BIN")")" -maxdepth 1 -name 'kube-network-policies-*' \
    ! -name "kube-network-policies-$KEY" -exec rm -rf {} +   # older builds of this script
  log "built $BIN in $((SECONDS - start))s"
}

# A one-binary image, like hack/kind/node-image.sh's component images.
build_image() {
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then log "have $IMAGE"; return; fi
  build_binary
  local dir
  dir="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-netpol-img.XXXXXX")"
  mkdir -p "$dir/bin" "$dir/tmp" "$dir/etc"
  install -m 0755 "$BIN" "$dir/bin/netpol"
  echo "root:x:0:0:root:/:/sbin/nologin" >"$dir/etc/passwd"
  tar -C "$dir" --owner=0 --group=0 -c . | docker import --change 'CMD ["/bin/netpol"]' - "$IMAGE" >/dev/null
  rm -rf "$dir"
  docker images --format '{{.Repository}}:{{.Tag}}' | grep '^phalanx\.local/kube-network-policies:' |
    grep -vx "$IMAGE" | xargs -r docker rmi >/dev/null 2>&1 || true   # older builds of this script
  log "built $IMAGE"
}

load() {
  local node id
  id="$(docker image inspect -f '{{.Id}}' "$IMAGE")"
  for node in $(kind get nodes --name "$CLUSTER"); do
    docker exec "$node" crictl inspecti -q "$IMAGE" 2>/dev/null | grep -q "$id" && continue
    log "loading $IMAGE onto $node"
    docker save "$IMAGE" | docker exec -i "$node" ctr -n k8s.io images import --local --digests - >/dev/null
  done
}

manifest() {
  local src
  src="$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kube-network-policies@$KNP_VERSION" | jq -r .Dir)"
  sed "s|image: registry.k8s.io/networking/kube-network-policies:.*|image: $IMAGE|" "$src/install.yaml"
}

tools() {
  command -v kind >/dev/null || PATH="$("$HERE/tools.sh"):$PATH"
  command -v kubectl >/dev/null || PATH="$("$ROOT/hack/cluster/build.sh"):$PATH"
}

deploy() {
  tools
  build_image
  load
  manifest | k apply -f - >/dev/null
  k -n kube-system rollout status ds/kube-network-policies --timeout=180s >&2
  # The rules are in place once each pod has synced them (the probe's choice is logged first).
  local pod
  for pod in $(k -n kube-system get pods -l app=kube-network-policies -o name); do
    for _ in $(seq 1 60); do
      k -n kube-system logs "$pod" 2>/dev/null | grep -q 'Syncing nftables rules' && break
      sleep 1
    done
    k -n kube-system logs "$pod" | grep -E 'nftables|NFQUEUE|rror' | head -5 | sed "s|^|  $pod: |" >&2
  done
  log "kube-network-policies $KNP_VERSION enforces NetworkPolicies on $CLUSTER"
}

case "${1:-install}" in
  image) build_image; echo "$IMAGE" ;;
  install) deploy ;;
  delete)
    tools
    manifest | k delete --ignore-not-found --wait -f - >/dev/null
    # its nftables table outlives it: queue rules with no listener would drop (fail closed)
    for node in $(kind get nodes --name "$CLUSTER"); do
      docker exec "$node" nft delete table inet kube-network-policies 2>/dev/null || true
    done ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
