#!/usr/bin/env bash
# A virtual environment with Horovod 0.28.1 (gloo, no MPI, PyTorch only) compiled against the
# installed torch, kept apart from the project's Python environment (docs/horovod.md).
#
#   hack/horovod/venv.sh              # create it if missing, print the dir
#   hack/horovod/venv.sh --print-dir  # only print the dir
#
# ${PHALANX_CACHE:-$HOME/.cache/phalanx}/venvs/horovod-0.28.1 (PHALANX_HOROVOD_VENV overrides it),
# made with --system-site-packages so that it sees the project's torch: Horovod's extension is
# compiled against that torch's headers and libraries, so the venv counts only while `.complete`
# names the same torch version (and `import horovod.torch` worked); otherwise it is made again.
#
# Horovod 0.28.1 (June 2023) does not build unpatched against torch >= 2.1; two patches to the
# sdist's CMake files (docs/horovod.md has the errors):
#   1. horovod/torch/CMakeLists.txt sets C++14 for the torch extension; torch 2.15's headers need
#      C++20 (`#error C++20 or later compatible compiler is required to use PyTorch.`) -> 20.
#   2. third_party/gloo is then still built as C++14 (-std=c++11 in its flags) and the link fails on
#      `multiple definition of gloo::rendezvous::Store::kDefaultTimeout` (an out-of-line constexpr
#      definition in C++14 vs an inline variable in C++17+) -> gloo built as C++17, the very
#      rewrite Horovod's own CMakeLists applies to its gloo copy for C++17 TensorFlow.
# Build: 2 jobs (PHALANX_HOROVOD_JOBS), about 2 minutes on 2 idle cores; needs cmake >= 3.13 (pip's
# cmake if there is none) and g++ >= 10. The wheel is kept in
# $PHALANX_CACHE/wheels/horovod-0.28.1-torch-<torch version>/, so remaking the venv takes seconds.
set -euo pipefail

HVD_VERSION=0.28.1
WHEEL_PKG_VERSION=0.48.0   # bdist_wheel for the venv's own setuptools (no build isolation)
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
DIR="${PHALANX_HOROVOD_VENV:-$CACHE/venvs/horovod-${HVD_VERSION}}"
SRC="$CACHE/src"
PY="${PYTHON:-python3}"
JOBS="${PHALANX_HOROVOD_JOBS:-2}"

log() { echo "[horovod-venv] $*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$DIR"
  exit 0
fi

mkdir -p "$(dirname "$DIR")" "$SRC"
exec 9>"$DIR.lock"
flock 9   # one build at a time

TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__)')"
STAMP="horovod ${HVD_VERSION} torch ${TORCH_VERSION}"
if [[ -x "$DIR/bin/python" && -f "$DIR/.complete" && "$(cat "$DIR/.complete")" == "$STAMP" ]]; then
  log "have $STAMP"
  echo "$DIR"
  exit 0
fi

for tool in g++ make; do  # cmake: pip's, below, when there is none
  if ! command -v "$tool" >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      log "installing g++/make with apt-get"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ make >/dev/null
    else
      log "need $tool"; exit 1
    fi
  fi
done

start=$SECONDS
WHEELS="$CACHE/wheels/horovod-${HVD_VERSION}-torch-${TORCH_VERSION}"
log "making $STAMP in $DIR ($("$PY" --version))"
rm -rf "$DIR"
"$PY" -m venv --system-site-packages "$DIR"
"$DIR/bin/python" -m pip install -q --disable-pip-version-check "wheel==${WHEEL_PKG_VERSION}"

if ! ls "$WHEELS"/horovod-"${HVD_VERSION}"-*.whl >/dev/null 2>&1; then
  command -v cmake >/dev/null || "$DIR/bin/python" -m pip install -q --disable-pip-version-check "cmake<4"
  sdist="$SRC/horovod-${HVD_VERSION}.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    "$DIR/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      --no-build-isolation "horovod==${HVD_VERSION}" -d "$SRC"
  fi
  work="$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  tar xzf "$sdist" -C "$work"
  tree="$work/horovod-${HVD_VERSION}"
  "$PY" - "$tree" <<'PYEOF'
import sys, pathlib
tree = pathlib.Path(sys.argv[1])

def patch(rel, old, new, prepend=""):
    p = tree / rel
    s = p.read_text()
    assert s.count(old) == 1, f"{rel}: expected exactly one {old!r}"
    p.write_text(prepend + s.replace(old, new))

# 1. torch >= 2.1 needs C++17, torch 2.15 C++20 (its headers #error below that).
patch("horovod/torch/CMakeLists.txt",
      "    set(CMAKE_CXX_STANDARD 14)\n", "    set(CMAKE_CXX_STANDARD 20)\n")
# 2. gloo in C++17 too, so Store::kDefaultTimeout is one inline variable on both sides of the link.
patch("third_party/gloo/CMakeLists.txt", "-std=c++11", "-std=c++17",
      prepend="set(CMAKE_CXX_STANDARD 17)\n")
# 3. -O1 without debug info instead of RelWithDebInfo's -O3 -g: the venv serves tests of small
#    tensors, and a torch-extension file compiles 2.3x faster (101 s -> 44 s on one core).
patch("setup.py", "cmake_args = ['-DCMAKE_BUILD_TYPE=' + config,",
      "cmake_args = ['-DCMAKE_BUILD_TYPE=' + config, '-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1', "
      "'-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1',")
PYEOF
  log "compiling (${JOBS} jobs, about 2 min on 2 idle cores; log: $WHEELS.build.log)"
  mkdir -p "$WHEELS.tmp"
  if ! env -u HOROVOD_GPU -u HOROVOD_GPU_OPERATIONS HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
      HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_GLOO=1 HOROVOD_CPU_OPERATIONS=gloo \
      MAKEFLAGS="-j${JOBS}" PATH="$DIR/bin:$PATH" \
      "$DIR/bin/python" -m pip wheel -v --disable-pip-version-check --no-build-isolation --no-deps \
      --no-cache-dir -w "$WHEELS.tmp" "$tree" >"$WHEELS.build.log" 2>&1; then
    grep -m5 -E ' error: |#error|multiple definition' "$WHEELS.build.log" >&2 || tail -20 "$WHEELS.build.log" >&2
    log "build failed after $((SECONDS - start))s"
    exit 1
  fi
  rm -rf "$WHEELS" && mv "$WHEELS.tmp" "$WHEELS"
  log "compiled in $((SECONDS - start))s: $(ls "$WHEELS")"
else
  log "reusing $(ls "$WHEELS"/*.whl)"
fi

# Deps (cloudpickle, psutil, pyyaml, packaging) come from the system site-packages when present.
"$DIR/bin/python" -m pip install -q --disable-pip-version-check "$WHEELS"/horovod-"${HVD_VERSION}"-*.whl
# The extension is built RelWithDebInfo: 63 MB, of which 61 MB are debug info.
find "$DIR/lib" -path '*/horovod/*' -name '*.so' -exec strip --strip-debug {} + 2>/dev/null || true
"$DIR/bin/python" - <<'PYEOF'
import horovod.torch as hvd
assert hvd.gloo_built() and not hvd.mpi_built(), (hvd.gloo_built(), hvd.mpi_built())
PYEOF
echo "$STAMP" >"$DIR/.complete"
log "done in $((SECONDS - start))s, $(du -sh "$DIR" | cut -f1)"
echo "$DIR"
