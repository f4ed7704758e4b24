#!/usr/bin/env bash
# Build the Phalanx images with no registry: a Debian rootfs (debootstrap) with
# Python, plus a venv installed from a local wheelhouse:
#   phalanx/operator:<version>   the operator (kopf) — what charts/phalanx runs
#   phalanx/runtime:<version>    torch + the runtime — what TrainingJob pods run (no kopf, no
#                                kubernetes client: pyproject's `runtime` extra, not `operator`)
# operator/Dockerfile and runtime/Dockerfile are the same images for registry users.
# Cached: each image carries a label with the hash of its inputs (its base, the wheels, the
# project's files and the code, not the comments, of the function that builds it); unchanged →
# skipped.
#
#   hack/kind/app-images.sh [operator] [runtime]     # prints the tags
#   hack/kind/app-images.sh wheels                   # only the base rootfs and the wheelhouse
set -euo pipefail
LOG_PREFIX="[app-images]"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/lib.sh"
which_images=("$@"); ((${#which_images[@]})) || which_images=(operator runtime)

PYVER=311
WHEELS="$CACHE/wheels/py$PYVER"
VERSION="$PHALANX_VERSION"
BASE="$("$HERE/rootfs.sh" python-base "$PYTHON_BASE_PACKAGES")"
build_lock "app-images"   # the wheelhouse and the images: prefetch and images may run at once

# Wheelhouse: the project's dependencies (the operator's and the runtime's extras) at the versions
# installed here (torch CPU/CUDA build as on PyPI), downloaded once.
wheelhouse() {
  local torch
  torch="$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')"
  mkdir -p "$WHEELS"
  if ! ls "$WHEELS"/torch-"$torch"-*.whl >/dev/null 2>&1; then
    log "downloading wheels into $WHEELS (torch $torch)"
    local deps
    mapfile -t deps < <(python3 -c 'import sys, tomllib; x = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]; print(*(r for r in x["operator"] + x["runtime"] if not r.startswith("torch")), sep="\n")' "$ROOT/pyproject.toml")
    python3 -m pip download -q -d "$WHEELS" "torch==$torch" "${deps[@]}"
  fi
  deepspeed_wheels
  extra_wheels hf "$torch"
  extra_wheels objectstore "$torch"
}

# An extra's wheels with every wheel they require: Hugging Face transformers and accelerate
# (pyproject's `hf` extra: Trainer scripts as command jobs), fsspec's s3fs and gcsfs (`objectstore`,
# in the runtime extra too: checkpoint.storage; fetched here for a wheelhouse made before them). What
# the wheelhouse has already is held at its version (one wheel per project: runtime_wheels picks by
# name), torch included, so none is fetched again. Downloaded once: the stamp, named after the pins,
# is written when all is there.
extra_wheels() { # extra torch-version
  local pins stamp held
  mapfile -t pins < <(python3 -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"][sys.argv[2]], sep="\n")' "$ROOT/pyproject.toml" "$1")
  stamp="$WHEELS/.$1-$(echo "${pins[*]} torch==$2" | key_of 12)"
  [[ -e "$stamp" ]] && return
  log "downloading ${pins[*]} into $WHEELS"
  held="$(mktemp)"
  # The wheelhouse's versions are held where the extra allows them; where it does not (an older
  # wheelhouse with newer wheels than the extra's pins admit), its own resolution wins: the wheels
  # it picked replace the wheelhouse's of the same projects (one wheel per project).
  # wheel file names are <name>-<version>-…: one name==version line per project
  (cd "$WHEELS" && ls -- *.whl) | sed -E 's/^([^-]+)-([^-]+)-.*/\1==\2/' | sort -u -t= -k1,1 >"$held"
  if ! python3 -m pip download -q -d "$WHEELS" -c "$held" "torch==$2" "${pins[@]}" 2>/dev/null; then
    local fresh
    fresh="$(mktemp -d)"
    python3 -m pip download -q -d "$fresh" "${pins[@]}"
    python3 - "$WHEELS" "$fresh" <<'PY'
import glob, os, re, shutil, sys
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
for new in glob.glob(sys.argv[2] + "/*.whl"):
    name = norm(os.path.basename(new).split("-")[0])
    for old in glob.glob(sys.argv[1] + "/*.whl"):
        if norm(os.path.basename(old).split("-")[0]) == name and os.path.basename(old) != os.path.basename(new):
            os.remove(old)
    shutil.move(new, os.path.join(sys.argv[1], os.path.basename(new)))
PY
    rm -rf "$fresh"
  fi
  rm -f "$held"
  touch "$stamp"
}

# DeepSpeed (pyproject's `deepspeed` extra, for `framework: deepspeed` jobs) and the pure-Python
# wheels it needs that the wheelhouse lacks, at the versions installed here where they are. PyPI
# has only its sdist: the wheel is built once, without compiled ops (DS_BUILD_OPS=0, as .ci/run).
deepspeed_wheels() {
  local pin built missing
  pin="$(python3 -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["deepspeed"])' "$ROOT/pyproject.toml")"
  ls "$WHEELS"/deepspeed-"${pin#deepspeed==}"-*.whl >/dev/null 2>&1 && return
  log "building the $pin wheel into $WHEELS"
  built="$(mktemp -d)"
  DS_BUILD_OPS=0 python3 -m pip wheel -q --no-deps -w "$built" "$pin"
  mapfile -t missing < <(python3 - "$WHEELS" "$built"/deepspeed-*.whl <<'PY'
import glob, importlib.metadata as md, re, sys, zipfile
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
have = {norm(p.split("/")[-1].split("-")[0]) for p in glob.glob(sys.argv[1] + "/*.whl")}
whl = zipfile.ZipFile(sys.argv[2])
meta = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
for line in meta.splitlines():
    if line.startswith("Requires-Dist:"):
        r = Requirement(line.split(":", 1)[1])
        if r.marker is None and norm(r.name) not in have:
            try:
                print(f"{r.name}=={md.version(r.name)}")
            except md.PackageNotFoundError:
                print(str(r))
PY
)
  if ((${#missing[@]})); then python3 -m pip download -q --no-deps -d "$WHEELS" "${missing[@]}"; fi
  mv "$built"/deepspeed-*.whl "$WHEELS"/ && rm -rf "$built"  # last: its presence means all is there
}

# Run a shell script in a container of $1 (wheelhouse and /src mounted read-only) and commit
# the result as $2 with the given entrypoint and inputs label; drop the image $2 replaces.
commit_from() { # from tag entrypoint inputs script [user]
  local from="$1" tag="$2" entry="$3" inputs="$4" script="$5" user="${6:-0}" id old
  id="phalanx-img-build-$$-$RANDOM"
  old="$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)"
  docker run --name "$id" -v "$WHEELS:/wheels:ro" -v "$work:/src:ro" --entrypoint /bin/sh "$from" -euc "$script" >&2
  docker commit \
    --change 'ENV PATH=/opt/phalanx/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1' \
    --change "ENTRYPOINT [\"$entry\"]" --change "LABEL dev.phalanx.inputs=$inputs" --change "USER $user" "$id" "$tag" >/dev/null
  docker rm -f "$id" >/dev/null
  if [[ -n "$old" && "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
}

labelled() { [[ "$(docker image inspect -f '{{index .Config.Labels "dev.phalanx.inputs"}}' "$1" 2>/dev/null)" == "$2" ]]; }

# The wheels of the runtime image: pyproject's `runtime`, `deepspeed` and `hf` extras with every wheel
# they require (Requires-Dist, markers evaluated for this Python), as /wheels/ paths. Not triton
# (see runtime_deps) and none of the operator's (kopf, the kubernetes client and what they pull).
runtime_wheels() {
  python3 - "$WHEELS" "$ROOT/pyproject.toml" <<'PY'
import glob, re, sys, tomllib, zipfile
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
wheels = {norm(p.rsplit("/", 1)[-1].split("-")[0]): p for p in glob.glob(sys.argv[1] + "/*.whl")}
def requires(path):
    whl = zipfile.ZipFile(path)
    meta = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [Requirement(line.split(":", 1)[1]) for line in meta.splitlines() if line.startswith("Requires-Dist:")]
extras = tomllib.load(open(sys.argv[2], "rb"))["project"]["optional-dependencies"]
todo = [(norm(Requirement(r).name), frozenset()) for r in extras["runtime"] + extras["deepspeed"] + extras["hf"]]
seen = set()
while todo:
    name, extras = todo.pop()
    if (name, extras) in seen or name not in wheels or name == "triton":
        continue
    seen.add((name, extras))
    for r in requires(wheels[name]):
        if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras | {""}):
            todo.append((norm(r.name), frozenset(r.extras)))
print(*sorted({"/wheels/" + wheels[n].rsplit("/", 1)[-1] for n, _ in seen}))
PY
}

# torch and its libraries, from the wheelhouse, in a layer of their own (rebuilt only when the
# wheels change). These images train on CPUs (the kind route): no triton (torch.compile on GPUs),
# static libraries, C++ headers or lazily loaded GPU-only libraries. runtime/Dockerfile keeps all.
# DeepSpeed and its small wheels go in this layer too, not in the runtime layer above it: like
# torch they are pinned third-party code that changes only with the wheelhouse, while the runtime
# layer is rebuilt on every change to Phalanx's code (reinstalling DeepSpeed there each time would
# cost ~15 MB and seconds per build for nothing). Adding them rebuilt this layer once. So do
# transformers and accelerate (the `hf` extra) and theirs, for Hugging Face Trainer scripts.
runtime_deps() {
  local tag="phalanx/runtime-deps:$VERSION" inputs wheels
  wheels="$(runtime_wheels)"
  inputs="$( (echo "$BASE"; ls "$WHEELS"; echo "$wheels"; code_of "${BASH_SOURCE[0]}" runtime_deps runtime_wheels) | key_of 16)"
  if labelled "$tag" "$inputs"; then log "have $tag"; echo "$tag"; return; fi
  local start=$SECONDS
  commit_from "$BASE" "$tag" /bin/sh "$inputs" "
    python3 -m venv /opt/phalanx
    /opt/phalanx/bin/pip install -q --no-cache-dir --no-index --no-deps --no-compile $wheels
    /opt/phalanx/bin/python -c 'import torch, torch.distributed.fsdp, torch.distributed.tensor.parallel, torch.distributed.pipelining, torch.distributed.checkpoint'
    cd /opt/phalanx/lib/python3.11/site-packages
    find . -name '*.a' -delete; rm -rf torch/include
    # GPU-only pieces that torch loads lazily, never on a CPU (cuDNN engines, NVSHMEM device
    # bitcode, the profiler's perf libraries): ~1 GB less to load onto every kind node.
    rm -f nvidia/cudnn/lib/libcudnn_engines_* nvidia/cudnn/lib/libcudnn_adv* nvidia/cudnn/lib/libcudnn_graph* \
      nvidia/cudnn/lib/libcudnn_heuristic* nvidia/cudnn/lib/libcudnn_ops* nvidia/cudnn/lib/libcudnn_ext* \
      nvidia/nvshmem/lib/*.bc nvidia/cu13/lib/libnvperf*
    /opt/phalanx/bin/python -c 'import torch; torch.nn.Linear(8, 8)(torch.randn(2, 8)).sum().backward()'
    HOME=/tmp DS_ACCELERATOR=cpu /opt/phalanx/bin/python -c 'import deepspeed, deepspeed.runtime.zero.stage_1_and_2'
    HOME=/tmp /opt/phalanx/bin/python -c 'import accelerate; from transformers import LlamaForCausalLM, Trainer, TrainingArguments'
    find /opt/phalanx -name __pycache__ -prune -exec rm -rf {} +
    # Bytecode for every module, compiled once here: pods run as a user that cannot write it (and
    # with PYTHONDONTWRITEBYTECODE), so without it each process of each pod compiles torch's
    # modules again (5 s of CPU per process). A file that is not Python 3.11 (a template, a
    # vendored test) is reported and skipped: nothing imports it.
    /opt/phalanx/bin/python -m compileall -q -j 0 /opt/phalanx/lib/python3.11/site-packages || true"
  log "built $tag in $((SECONDS - start))s"
  echo "$tag"
}

# The files the wheel is built from (NUL-separated): tracked or new (not ignored), less those
# deleted from the working tree. project_files: their names and contents, for the inputs label.
project_list() {
  local f
  git -C "$ROOT" ls-files -z -co --exclude-standard pyproject.toml README.md operator runtime common | sort -zu |
    while IFS= read -r -d '' f; do
      if [[ -f "$ROOT/$f" ]]; then printf '%s\0' "$f"; fi
    done
}
project_files() {
  local f
  project_list | while IFS= read -r -d '' f; do echo "$f"; cat "$ROOT/$f"; done
}

# The runtime runs as this non-root user (the operator's pods set the same uid, gid and fsGroup:
# operator/phalanx/constants.py RUNTIME_UID); its HOME is the pod's writable scratch emptyDir.
RUNTIME_UID=1000
# The runtime image runs the launcher and the trainer, and has neither kopf nor the kubernetes client.
RUNTIME_CHECK="/opt/phalanx/bin/python -c 'import importlib.util, sys, phalanx_runtime.launch, phalanx_runtime.trainer; sys.exit(\", \".join(m for m in (\"kopf\", \"kubernetes\") if importlib.util.find_spec(m)) or None)'"
# pip compiles the bytecode of what it installs, and it stays in the image (see runtime_deps).
build() { # name from pip-args entrypoint check [user]
  local name="$1" from="$2" pip_args="$3" entry="$4" check="$5" user="${6:-0}" tag="phalanx/$1:$VERSION" inputs
  inputs="$( (echo "$from $(docker image inspect -f '{{.Id}}' "$from") $pip_args"; ls "$WHEELS"; cat "$ROOT/pyproject.toml";
              code_of "${BASH_SOURCE[0]}" build; project_files) | key_of 16)"
  if labelled "$tag" "$inputs"; then log "have $tag"; echo "$tag"; return; fi
  local start=$SECONDS
  commit_from "$from" "$tag" "$entry" "$inputs" "
    [ -x /opt/phalanx/bin/pip ] || python3 -m venv /opt/phalanx
    grep -q ':65532:' /etc/passwd || echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin' >> /etc/passwd
    grep -q ':$RUNTIME_UID:' /etc/passwd || echo 'phalanx:x:$RUNTIME_UID:$RUNTIME_UID:phalanx:/phalanx/scratch:/bin/sh' >> /etc/passwd
    grep -q ':$RUNTIME_UID:' /etc/group || echo 'phalanx:x:$RUNTIME_UID:' >> /etc/group
    /opt/phalanx/bin/pip install -q --no-cache-dir --no-index --find-links /wheels $pip_args
    $check" "$user"
  log "built $tag in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f GB", $1/1e9}'))"
  echo "$tag"
}

wheelhouse
work="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-img.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The wheel, from a copy of those files: never with stale modules of the checkout's build/.
mkdir -p "$work/src"
project_list | tar -C "$ROOT" --null -T - -cf - | tar -C "$work/src" -xf -
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$work" "$work/src" >/dev/null
wheel="$(cd "$work" && ls phalanx-*.whl)" && wheel="/src/$wheel"
for image in "${which_images[@]}"; do
  case "$image" in
    wheels) ;;
    operator) build operator "$BASE" "$wheel[operator]" /opt/phalanx/bin/phalanx "/opt/phalanx/bin/phalanx --help >/dev/null" ;;
    runtime) build runtime "$(runtime_deps)" "--no-deps $wheel" /opt/phalanx/bin/phalanx-runtime "$RUNTIME_CHECK" "$RUNTIME_UID:$RUNTIME_UID" ;;
    *) log "unknown image $image (operator|runtime|wheels)"; exit 2 ;;
  esac
done
