# Sourced by the builders of cached artifacts (hack/cluster/build.sh, hack/kueue/build.sh, and
# through hack/kind/lib.sh the kind route's tools.sh, rootfs.sh, node-image.sh, app-images.sh).
#
# build_lock NAME holds ${PHALANX_CACHE:-~/.cache/phalanx}/locks/NAME.lock on fd 9 until the
# script exits. `make test` builds ahead in the background (hack/test.sh) while the first suites
# run; a suite that reaches a builder still at work waits for it here and then finds the result
# cached, instead of building it a second time beside it. Call it before the cache check.
# A daemon a builder starts must not inherit fd 9 (ensure_dockerd closes it), or the lock would
# live as long as the daemon.
build_lock() {
  local dir="${PHALANX_CACHE:-$HOME/.cache/phalanx}/locks"
  mkdir -p "$dir"
  exec 9>"$dir/$1.lock"
  flock 9
}
