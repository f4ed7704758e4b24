#!/usr/bin/env bash
# NetworkPolicy enforcement on the kind cluster (the offline node image's pod network enforces
# none): kube-network-policies (sigs.k8s.io, the enforcer inside kind's own kindnetd), built
# from the Go module proxy, no registry:
#   binary   `go build` of its cmd/ with one addition (hack/kind/netpol/nfqueue.go): where the
#            kernel has no nftables `queue` expression (CONFIG_NFT_QUEUE unset, no loadable
#            modules: this VM) the first packet of a connection goes to the same userspace queue
#            through xtables' NFQUEUE target (nft_compat)
#   image    the binary alone (upstream's image is distroless/static), streamed into the
#            containerd of every node (load_image, hack/kind/lib.sh)
#   install  its install.yaml (RBAC + DaemonSet in kube-system) with this image; waits for it
# Usage: `hack/kind/netpol.sh --help`. `PHALANX_KIND_NETPOL=1 hack/kind-e2e.sh up|test` runs it
# after the cluster is created.
#
# Cache: binary $PHALANX_CACHE/bin/kube-network-policies-<key>/netpol and image
# phalanx.local/kube-network-policies:<version>-<key>, the key hashing KNP_VERSION, nfqueue.go and
# the code of build_binary and build_image (the patch, the build flags, the image recipe).
set -euo pipefail
LOG_PREFIX="[netpol]"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/lib.sh"
KNP_VERSION=v0.8.0   # sigs.k8s.io/kube-network-policies (here, not in versions.sh: no other artifact depends on it)
export KUBECONFIG="${KUBECONFIG:-$KIND_KUBECONFIG}"
KEY="$( (echo "$KNP_VERSION"; cat "$HERE/netpol/nfqueue.go"; code_of "${BASH_SOURCE[0]}" build_binary build_image) | key_of 12)"
IMAGE="phalanx.local/kube-network-policies:$KNP_VERSION-$KEY"
BIN="$CACHE/bin/kube-network-policies-$KEY/netpol"
k() { kubectl --context "kind-$CLUSTER" "$@"; }   # never another cluster of $KUBECONFIG

# The module's source, downloaded once per run (call as a statement, not in $(…)).
KNP_SRC=""
knp_src() { [[ -n "$KNP_SRC" ]] || KNP_SRC="$(go_mod_dir "sigs.k8s.io/kube-network-policies@$KNP_VERSION")"; }

build_binary() {
  [[ -x "$BIN" ]] && return
  local work start=$SECONDS
  knp_src
  work="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-netpol.XXXXXX")"
  cp -r "$KNP_SRC/." "$work" && chmod -R u+w "$work"
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
  build_lock "netpol-image"
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

manifest() {
  sed "s|image: registry.k8s.io/networking/kube-network-policies:.*|image: $IMAGE|" "$KNP_SRC/install.yaml"
}

deploy() {
  use_tools
  build_image
  load_image "$IMAGE"
  knp_src
  manifest | k apply -f - >/dev/null
  k -n kube-system rollout status ds/kube-network-policies --timeout=180s >&2
  # The rules are in place once each pod has synced them (the probe's choice is logged first).
  local pod
  for pod in $(k -n kube-system get pods -l app=kube-network-policies -o name); do
    for _ in $(seq 1 60); do
      k -n kube-system logs "$pod" 2>/dev/null | grep -q 'Syncing nftables rules' && break
      sleep 1
    done
    # grep -m, not head: under pipefail a head that closes the pipe early fails the script
    k -n kube-system logs "$pod" | grep -m 5 -E 'nftables|NFQUEUE|rror' | sed "s|^|  $pod: |" >&2 || true
  done
  log "kube-network-policies $KNP_VERSION enforces NetworkPolicies on $CLUSTER"
}

undeploy() {
  use_tools
  knp_src
  manifest | k delete --ignore-not-found --wait -f - >/dev/null
  # its nftables table outlives it: queue rules with no listener would drop (fail closed)
  local node
  for node in $(kind get nodes --name "$CLUSTER"); do
    docker exec "$node" nft delete table inet kube-network-policies 2>/dev/null || true
  done
}

usage() {
  cat <<'TEXT'
Usage: hack/kind/netpol.sh [install|image|delete]
  install (default)  build or reuse the kube-network-policies image, load it onto the nodes of the
                     kind cluster $PHALANX_KIND_CLUSTER (default phalanx) and install it there:
                     context kind-<cluster> of $KUBECONFIG (default $PHALANX_KIND_DIR/kubeconfig)
  image              only build the image, print its tag
  delete             uninstall, and drop its nftables table from the nodes
TEXT
}

case "${1:-install}" in
  image) build_image; echo "$IMAGE" ;;
  install) deploy ;;
  delete) undeploy ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
