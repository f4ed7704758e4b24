#!/usr/bin/env bash
# Kueue in the kind cluster of hack/kind-e2e.sh, with no registry: the binary of hack/kueue/build.sh
# in a minimal image made here (the static binary, an /etc/passwd with the nonroot user, /tmp —
# `docker import` of that rootfs, nothing pulled), loaded onto the nodes (hack/kind/lib.sh
# load_image), installed with Kueue's own Helm chart (charts/kueue of the same module) and its
# internal certificate management (cert-controller: no cert-manager). Kueue config: the plain
# `pod` integration only, for namespaces labelled phalanx.dev/kueue=true; TopologyAwareScheduling
# is on by default in v0.17.
#
#   hack/kueue/kind.sh image   # build (cached by the binary's hash) and print the tag
#   hack/kueue/kind.sh up      # image, load, helm upgrade --install, wait until the webhook serves
#   hack/kueue/kind.sh down    # helm uninstall (its webhooks go with it); CRDs and Kueue objects stay
#
# Environment: as hack/kind-e2e.sh (PHALANX_KIND_CLUSTER, PHALANX_KIND_DIR, PHALANX_CACHE).
set -euo pipefail
LOG_PREFIX="[kueue-kind]"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../kind/lib.sh
source "$HERE/../kind/lib.sh"
export KUBECONFIG="$KIND_KUBECONFIG"
RELEASE=kueue
KNS=kueue-system

kueue_dir() { "$HERE/build.sh"; }

image() {
  local dir="$1" version key tag root
  version="$(basename "$dir" | sed -E 's/^kueue-(v[^-]+)-.*/\1/')"
  key="$(key_of 10 < "$dir/kueue")"
  tag="phalanx/kueue:${version}-${key}"
  if docker image inspect "$tag" >/dev/null 2>&1; then log "have $tag"; echo "$tag"; return; fi
  root="$(mktemp -d "${TMPDIR:-/tmp}/kueue-rootfs.XXXXXX")"
  mkdir -p "$root/etc" "$root/tmp"
  chmod 1777 "$root/tmp"
  cp "$dir/kueue" "$root/manager"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
  tar -C "$root" --owner=0 --group=0 -c . | docker import \
    --change 'ENTRYPOINT ["/manager"]' --change 'USER 65532:65532' --change 'WORKDIR /' - "$tag" >/dev/null
  rm -rf "$root"
  log "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
  echo "$tag"
}

manager_config() {
  cat <<'YAML'
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health:
  healthProbeBindAddress: :8081
metrics:
  bindAddress: :8443
webhook:
  port: 9443
leaderElection:
  leaderElect: true
  resourceName: c1f6bfd2.kueue.x-k8s.io
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchLabels:
    phalanx.dev/kueue: "true"
integrations:
  frameworks:
  - "pod"
YAML
}

up() {
  use_tools
  local dir tag repo t0=$SECONDS values
  dir="$(kueue_dir)"
  tag="$(image "$dir")"
  load_image "$tag"
  repo="${tag%:*}"
  values="$(mktemp)"
  trap 'rm -f "$values"' RETURN
  { echo "managerConfig:"; echo "  controllerManagerConfigYaml: |-"; manager_config | sed 's/^/    /'; } > "$values"
  log "installing Kueue ($tag) with its chart"
  helm upgrade --install "$RELEASE" "$dir/chart" -n "$KNS" --create-namespace --wait --timeout 5m \
    -f "$values" \
    --set "controllerManager.manager.image.repository=docker.io/$repo" \
    --set "controllerManager.manager.image.tag=${tag##*:}" \
    --set controllerManager.manager.image.pullPolicy=IfNotPresent \
    --set controllerManager.manager.resources.requests.cpu=100m \
    --set controllerManager.manager.resources.requests.memory=128Mi \
    --set controllerManager.replicas=1 >&2
  # The webhook answers only once cert-controller has written the certificate and the CA bundle:
  # a dry-run LocalQueue goes through the validating webhook.
  local deadline=$((SECONDS + 180))
  until kubectl create --dry-run=server -f - >/dev/null 2>&1 <<'YAML'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: phalanx-webhook-probe}
YAML
  do
    ((SECONDS < deadline)) || { log "Kueue's webhook did not answer in 180s"; kubectl -n "$KNS" logs deploy/kueue-controller-manager --tail=40 >&2 || true; exit 1; }
    sleep 2
  done
  log "Kueue ready in $((SECONDS - t0))s"
}

down() {
  use_tools
  helm uninstall "$RELEASE" -n "$KNS" --wait >/dev/null 2>&1 || true
  # the chart's webhook configurations go with the release; make sure none is left to block pods
  kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name 2>/dev/null |
    grep -E 'kueue' | xargs -r kubectl delete --ignore-not-found >/dev/null 2>&1 || true
  log "Kueue uninstalled"
}

case "${1:-}" in
  image) image "$(kueue_dir)" ;;
  up) up ;;
  down) down ;;
  *) echo "usage: $0 image|up|down" >&2; exit 2 ;;
esac
