#!/usr/bin/env bash
# `make demo-local`: install what is missing, then train the demo job (pp=2 × dp=2 (ZeRO-3) ×
# tp=2, the built-in transformer on the built-in text corpus) as local processes, no cluster,
# streaming progress, and show the committed checkpoints. A second run resumes from them.
# (`make demo` is the same job on a kind cluster: hack/kind-e2e.sh demo.)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import torch, kopf, phalanx, phalanx_runtime, phalanx_common" 2>/dev/null || python3 -m pip install -q -e '.[operator,runtime,dev]'
JOB="${JOB:-examples/cpu-3d-demo.yaml}"
CKPT="${CKPT:-.demo/checkpoints}"
echo "phalanx: validating $JOB"
python3 -m phalanx validate "$JOB"
echo "phalanx: training $JOB as local processes (no cluster needed); checkpoints in $CKPT"
python3 -m phalanx local "$JOB" --json --checkpoint-dir "$CKPT"
echo "phalanx: committed checkpoints:"
for d in "$CKPT"/step-*; do [ -f "$d/COMMITTED" ] && echo "  $d ($(du -sh "$d" | cut -f1))"; done
echo "phalanx: rerun 'make demo-local' to resume from the last one; 'rm -rf $CKPT' to start over"
