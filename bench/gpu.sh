#!/usr/bin/env bash
# Single-GPU runtime benchmark (bench/runtime_gpu.py). Runs in < 8 minutes, writes
# $OUT/runtime_gpu.json (+ .log). Usage from the repository root: OUT=/some/dir bash bench/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/operator:$PWD/runtime:$PWD/common${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true
python -c "import torch, pydantic; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  > "$OUT/env.txt" 2>&1 || pip install -q pydantic pyyaml prometheus-client numpy >> "$OUT/env.txt" 2>&1
# 470 s hard cap; the script itself stops starting new attempts after 360 s.
timeout -k 10 470 python bench/runtime_gpu.py --out "$OUT/runtime_gpu.json" --budget-s 360 --steps 30 \
  2>&1 | tee "$OUT/runtime_gpu.log" | tail -n 40
rc=${PIPESTATUS[0]}
echo "exit code $rc" >> "$OUT/runtime_gpu.log"
exit "$rc"
