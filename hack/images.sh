#!/usr/bin/env bash
# Phalanx's two images, phalanx/operator and phalanx/runtime, tagged with pyproject's version.
#
#   hack/images.sh                      offline, no registry: hack/kind/app-images.sh (debootstrap
#                                       rootfs + a local wheelhouse; what the kind e2e suite runs)
#   REGISTRY=reg.example.com/ml hack/images.sh
#                                       `docker build` of operator/Dockerfile and runtime/Dockerfile
#                                       as $REGISTRY/phalanx/{operator,runtime}:<version>, then push
#                                       (PUSH=0: build only). Needs a Docker that can pull
#                                       python:3.11-slim-bookworm and PyPI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VERSION="$(awk -F'"' '/^version = /{print $2; exit}' pyproject.toml)"

if [[ -z "${REGISTRY:-}" ]]; then
  exec hack/kind/app-images.sh operator runtime
fi
REGISTRY="${REGISTRY%/}"
for image in operator runtime; do
  tag="$REGISTRY/phalanx/$image:$VERSION"
  echo "[images] docker build -f $image/Dockerfile -t $tag ." >&2
  docker build -f "$image/Dockerfile" -t "$tag" .
  if [[ "${PUSH:-1}" == 1 ]]; then docker push "$tag"; fi
done
cat <<MSG
Images: $REGISTRY/phalanx/operator:$VERSION, $REGISTRY/phalanx/runtime:$VERSION
  helm install phalanx charts/phalanx -n phalanx-system --create-namespace --set image.repository=$REGISTRY/phalanx/operator
  and in each TrainingJob: spec.image: $REGISTRY/phalanx/runtime:$VERSION
MSG
