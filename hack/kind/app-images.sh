#!/usr/bin/env bash
# Build the Phalanx images with no registry: a Debian rootfs (debootstrap) with
# Python, plus a venv installed from a local wheelhouse:
#   phalanx/operator:<version>   the operator (kopf) — what charts/phalanx runs
#   phalanx/runtime:<version>    torch + the runtime — what TrainingJob pods run
# operator/Dockerfile and runtime/Dockerfile are the same images for registry users.
# Cached: each image carries a label with the hash of its inputs; unchanged → skipped.
#
#   hack/kind/app-images.sh [operator] [runtime]     # prints the tags
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
log() { echo "[app-images] $*" >&2; }
which_images=("$@"); ((${#which_images[@]})) || which_images=(operator runtime)

VERSION="$(awk -F'"' '/^version = /{print $2; exit}' "$ROOT/pyproject.toml")"
PYVER=311
WHEELS="${PHALANX_CACHE:-$HOME/.cache/phalanx}/wheels/py$PYVER"
BASE="$("$HERE/rootfs.sh" python-base "python3,python3-venv,ca-certificates,procps")"

# Wheelhouse: the project's dependencies at the versions installed here (torch CPU/CUDA
# build as on PyPI), downloaded once.
wheelhouse() {
  local torch
  torch="$(python3 -c 'import torch; print(torch.__version__.split("+")[0])')"
  mkdir -p "$WHEELS"
  if ! ls "$WHEELS"/torch-"$torch"-*.whl >/dev/null 2>&1; then
    log "downloading wheels into $WHEELS (torch $torch)"
    local deps
    mapfile -t deps < <(python3 -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"], sep="\n")' "$ROOT/pyproject.toml")
    python3 -m pip download -q -d "$WHEELS" "torch==$torch" numpy "${deps[@]}"
  fi
}

build() { # name extra entrypoint
  local name="$1" extra="$2" entry="$3" tag="phalanx/$1:$VERSION" hash id work
  hash="$( (echo "$BASE $extra"; ls "$WHEELS"; cat "$ROOT/pyproject.toml" "${BASH_SOURCE[0]}";
            cd "$ROOT" && git ls-files -z operator runtime | xargs -0 cat) | sha256sum | cut -c1-16)"
  if [[ "$(docker image inspect -f '{{index .Config.Labels "dev.phalanx.inputs"}}' "$tag" 2>/dev/null)" == "$hash" ]]; then
    log "have $tag"; echo "$tag"; return
  fi
  local start=$SECONDS
  work="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-img.XXXXXX")"
  python3 -m pip wheel -q --no-deps --no-build-isolation -w "$work" "$ROOT" >/dev/null
  id="phalanx-img-build-$name-$$"
  docker rm -f "$id" >/dev/null 2>&1 || true
  docker run --name "$id" -v "$WHEELS:/wheels:ro" -v "$work:/src:ro" "$BASE" sh -euc "
    python3 -m venv /opt/phalanx
    /opt/phalanx/bin/pip install -q --no-cache-dir --no-index --find-links /wheels \"\$(ls /src/phalanx-*.whl)$extra\"
    /opt/phalanx/bin/phalanx --help >/dev/null
    find /opt/phalanx -name __pycache__ -prune -exec rm -rf {} +" >&2
  docker commit \
    --change 'ENV PATH=/opt/phalanx/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1' \
    --change "ENTRYPOINT [\"$entry\"]" --change "LABEL dev.phalanx.inputs=$hash" \
    "$id" "$tag" >/dev/null
  docker rm -f "$id" >/dev/null; rm -rf "$work"
  log "built $tag in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f GB", $1/1e9}'))"
  echo "$tag"
}

wheelhouse
for image in "${which_images[@]}"; do
  case "$image" in
    operator) build operator "" /opt/phalanx/bin/phalanx ;;
    runtime) build runtime "[runtime]" /opt/phalanx/bin/phalanx-runtime ;;
    *) log "unknown image $image (operator|runtime)"; exit 2 ;;
  esac
done
