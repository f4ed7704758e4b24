#!/usr/bin/env bash
# hack/kind-e2e.sh images: build or reuse the node image (offline route) and Phalanx's images,
# creating no cluster (`make test` runs it before the suites, so no cluster idles meanwhile).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

ensure_docker
python3 -c "import phalanx, kopf" 2>/dev/null || python3 -m pip install -q -e '.[operator,runtime,dev]'
use_tools
choose_node_image
"$KIND_LIB_DIR/app-images.sh" operator runtime >/dev/null
