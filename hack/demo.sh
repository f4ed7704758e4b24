#!/usr/bin/env bash
# `make demo`: install what is missing, then train the demo job (pp=2 × dp=2 × tp=2, the built-in
# transformer on the built-in text corpus) and print progress and the final result.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, kopf, phalanx, phalanx_runtime" 2>/dev/null || python3 -m pip install -q -e '.[dev,runtime]'
JOB="${JOB:-examples/cpu-3d-demo.yaml}"
echo "phalanx: validating and rendering $JOB"
python3 -m phalanx validate "$JOB"
echo "phalanx: training $JOB as local processes (no cluster needed)"
python3 -m phalanx local "$JOB" --json
