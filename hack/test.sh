#!/usr/bin/env bash
# make test: every suite in one pytest run — unit, runtime, integration (local control plane),
# e2e (kind) — so that its closing line counts them all.
#
# What the later suites need is built meanwhile in the background, niced, in the order they need
# it: the control-plane binaries (integration), Kueue (its backend's tests), kind's tools and
# images and the NetworkPolicy enforcer (e2e), then the TensorFlow and Horovod venvs and SeaweedFS (their tests run last:
# the `built_last` marker). A suite that gets to a piece first waits for its build (hack/build-lock.sh) or makes
# it; cached pieces take seconds, so a warm run loses nothing to this. The background's log:
# build/prebuild.log. Extra arguments go to pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
PATH="$(hack/go.sh):$PATH"; export PATH
PYTHON="${PYTHON:-python3}"
# Everything runs: the suites build (or wait for) what they need rather than skip without it.
export PHALANX_REQUIRE_CLUSTER="${PHALANX_REQUIRE_CLUSTER:-1}" PHALANX_HOROVOD_REQUIRED="${PHALANX_HOROVOD_REQUIRED:-1}"
mkdir -p build

prebuild() {
  set -e
  hack/kind-e2e.sh prefetch &   # network-bound: the Debian rootfs, the torch wheelhouse
  hack/cluster/build.sh >/dev/null
  hack/kueue/build.sh >/dev/null
  wait
  hack/kind-e2e.sh images
  if [[ "${PHALANX_KIND_NETPOL:-0}" == 1 ]]; then hack/kind/netpol.sh image >/dev/null; fi
  hack/tensorflow/venv.sh >/dev/null
  PYTHON="$PYTHON" hack/horovod/venv.sh >/dev/null
  hack/seaweedfs/build.sh >/dev/null   # the S3 server of the object-storage checkpoint tests (built_last)
}

start=$SECONDS
setsid nice -n 19 bash -c "$(declare -f prebuild); PYTHON='$PYTHON' prebuild" >build/prebuild.log 2>&1 &
builder=$!
trap 'kill -- -"$builder" 2>/dev/null' EXIT   # pytest ended early: the builds stop with it

PHALANX_E2E_UP=1 "$PYTHON" -m pytest tests/unit tests/runtime tests/integration tests/e2e -q -p no:cacheprovider "$@"
rc=$?
if ! wait "$builder"; then
  # A suite that needed a piece the background failed to build made it itself (or failed).
  echo "hack/test.sh: the background builds failed; build/prebuild.log ends:" >&2
  tail -20 build/prebuild.log >&2
fi
echo "hack/test.sh: $((SECONDS - start))s" >&2
exit "$rc"
