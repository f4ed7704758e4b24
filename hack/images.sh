#!/usr/bin/env bash
# Phalanx's images, phalanx/operator, phalanx/runtime and phalanx/runtime-deepspeed, tagged with
# pyproject's version.
#
#   hack/images.sh                      offline, no registry: hack/kind/app-images.sh (debootstrap
#                                       rootfs + a local wheelhouse; what the kind e2e suite runs)
#   REGISTRY=reg.example.com/ml hack/images.sh
#                                       `docker build` of operator/Dockerfile and runtime/Dockerfile's
#                                       two targets as $REGISTRY/phalanx/{operator,runtime,runtime-deepspeed}:<version>,
#                                       then push (PUSH=0: build only; DRY_RUN=1: print the builds).
#                                       Needs a Docker that can pull python:3.11-slim-bookworm, Debian and PyPI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION="$(awk -F'"' '/^version = /{print $2; exit}' pyproject.toml)"

if [[ -z "${REGISTRY:-}" ]]; then
  exec hack/kind/app-images.sh operator runtime
fi
REGISTRY="${REGISTRY%/}"
# name, Dockerfile, target
builds=("operator operator/Dockerfile -" "runtime runtime/Dockerfile runtime" "runtime-deepspeed runtime/Dockerfile runtime-deepspeed")
for build in "${builds[@]}"; do
  read -r image file target <<<"$build"
  tag="$REGISTRY/phalanx/$image:$VERSION"
  args=(-f "$file" -t "$tag")
  [[ "$target" != - ]] && args+=(--target "$target")
  echo "[images] docker build ${args[*]} ." >&2
  if [[ "${DRY_RUN:-0}" == 1 ]]; then continue; fi
  docker build "${args[@]}" .
  if [[ "${PUSH:-1}" == 1 ]]; then docker push "$tag"; fi
done
cat <<MSG
Images:
  $REGISTRY/phalanx/operator:$VERSION           the operator (kopf, the kubernetes client; no torch)
  $REGISTRY/phalanx/runtime:$VERSION            torch + the built-in runtime + transformers/accelerate: the default of jobs without spec.image
  $REGISTRY/phalanx/runtime-deepspeed:$VERSION  the runtime + DeepSpeed 0.19.8 (framework: deepspeed jobs name it in spec.image)
  helm install phalanx charts/phalanx -n phalanx-system --create-namespace --set image.repository=$REGISTRY/phalanx/operator
  (the chart's runtime image is then $REGISTRY/phalanx/runtime:$VERSION)
MSG
