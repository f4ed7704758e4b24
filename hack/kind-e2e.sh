#!/usr/bin/env bash
# Phalanx on a kind cluster: the entry point. Each verb is a script of its own in hack/kind/
# (up.sh, demo.sh, test.sh, down.sh, images.sh, prefetch.sh) over hack/kind/lib.sh; the builders
# they call: hack/kind/node-image.sh (+ rootfs.sh, tools.sh), app-images.sh, netpol.sh.
# Details: docs/kind.md.
set -euo pipefail

usage() {
  cat <<'TEXT'
Usage: hack/kind-e2e.sh VERB [ARGS]   Phalanx on a kind cluster (1 control plane + 2 workers)

Verbs:
  up         build or reuse everything, create the cluster (kept when it exists), load
             Phalanx's images, install charts/phalanx
  demo       up + train examples/cpu-3d-demo.yaml, streaming progress (`phalanx watch`)
  test       up + the e2e suite (tests/e2e); ARGS go to pytest (e.g. -k suspend -x)
  down       delete the cluster (builds nothing)
  images     build or reuse the node image (offline route) and Phalanx's images
  prefetch   only the network-bound parts (Debian rootfs, torch wheels): CI runs it while the
             Go builds take the CPUs

Node image, chosen automatically: kind's stock kindest/node when Docker can pull it, else built
offline by hack/kind/node-image.sh (Debian packages + the Go module proxy); where the engine
refuses --privileged, kind runs through hack/kind/shim/docker.

Environment:
  PHALANX_KIND_CLUSTER     cluster name (default phalanx)
  PHALANX_KIND_DIR         state: kubeconfig, kind config, logs, shared/ (default .kind/)
  PHALANX_KIND_WORKERS     worker nodes of a new cluster (default 2; one training pod per worker)
  PHALANX_KIND_NODE_IMAGE  use this node image
  PHALANX_KIND_IMAGES      Phalanx images to build and load (default "operator runtime";
                           "operator" skips the 3.9 GB runtime image)
  PHALANX_KIND_NETPOL=1    up also installs a NetworkPolicy enforcer (hack/kind/netpol.sh)
  PHALANX_NAMESPACE        namespace of the jobs and the shared PVC (default default)
  PHALANX_CACHE            binary and wheel cache (default ~/.cache/phalanx)
  JOB, RESUME=1            demo: the job file; resume from the last run's checkpoints
TEXT
}

case "${1:-}" in
  up|demo|test|down|images|prefetch)
    verb="$1"; shift
    if [[ "$verb" != down ]]; then   # Go from the module proxy when missing (down builds nothing)
      PATH="$("$(dirname "${BASH_SOURCE[0]}")/go.sh"):$PATH"; export PATH
    fi
    exec "$(dirname "${BASH_SOURCE[0]}")/kind/$verb.sh" "$@" ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
