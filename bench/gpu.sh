#!/usr/bin/env bash
# The GPU machine's benchmark, one script under a hard timeout (520 s: done in < 9 minutes):
#   1. NCCL all-reduce bus bandwidth over every visible GPU (bench/nccl_allreduce.py under
#      torchrun; busbw = algbw × 2(n−1)/n, against the GPU's nominal NVLink rate); 1 GPU: skipped;
#   2. the built-in runtime's MFU in bf16 on one GPU, presets 125m and 1b (bench/runtime_gpu.py),
#      against the GPU's peak bf16 FLOP/s and a bf16 GEMM measured on it;
#   3. a Hugging Face import: a Llama made here (no download), load time and logits parity
#      against transformers (bench/hf_import.py).
# Every part leaves its JSON in $OUT; bench/gpu_results.py collects them into
# $OUT/gpu_results.json and writes the table between <!-- bench: gpu --> markers into
# docs/benchmarks.md (a copy, $OUT/benchmarks.md, too). A part that fails or times out leaves
# "not measured" in its table; the others go on.
#
# Usage, from anywhere:  [OUT=DIR] bench/gpu.sh          needs 1+ NVIDIA GPUs, torch with CUDA, transformers
#                        bench/gpu.sh --dry-run          or DRY_RUN=1: CPU, gloo, tiny models and steps;
#                                                        the table goes to $OUT/benchmarks.md only (CI)
# Rewrite the doc from a results file later: python bench/gpu_results.py --results DIR/gpu_results.json
set -uo pipefail
cd "$(dirname "$0")/.."
DRY_RUN="${DRY_RUN:-0}"
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "bench/gpu.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
export DRY_RUN
if [[ -z "${GPU_BENCH_UNDER_TIMEOUT:-}" ]]; then
  # The hard cap on the whole run; on it the script still writes what it has (trap below).
  export GPU_BENCH_UNDER_TIMEOUT=1 GPU_BENCH_COMMAND="bench/gpu.sh${*:+ $*}"
  exec timeout -k 15 "${GPU_BENCH_TIMEOUT_S:-520}" bash "$PWD/bench/gpu.sh" "$@"
fi

if [[ "$DRY_RUN" == 1 ]]; then OUT="${OUT:-$(mktemp -d)}"; else OUT="${OUT:-$PWD/out/gpu-$(date -u +%Y%m%dT%H%M%SZ)}"; fi
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/operator:$PWD/runtime:$PWD/common${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
start=$SECONDS
log() { echo "[gpu.sh $((SECONDS - start))s] $*" | tee -a "$OUT/gpu.log"; }

# part NAME SECONDS CMD...: run one part under its own cap, output in $OUT/NAME.log; never fatal.
# In the background + wait: a TERM from the hard cap interrupts `wait` (not a foreground child).
part_pid=""
part() {
  local name="$1" cap="$2"; shift 2
  log "$name: $* (cap ${cap}s)"
  timeout -k 5 "$cap" "$@" >"$OUT/$name.log" 2>&1 &
  part_pid=$!
  wait "$part_pid"
  local rc=$?
  part_pid=""
  log "$name: exit $rc$([[ $rc == 124 || $rc == 137 ]] && echo ' (timed out)')"
  tail -n 5 "$OUT/$name.log" | sed 's/^/    /'
}

write_table() {
  local doc="$OUT/benchmarks.md" flags=()
  cp docs/benchmarks.md "$doc"
  [[ "$DRY_RUN" == 1 ]] && flags+=(--dry-run)
  timeout 30 "$PY" bench/gpu_results.py --out-dir "$OUT" --doc "$doc" --command "$GPU_BENCH_COMMAND" \
    --total-s "$((SECONDS - start))" "${flags[@]}" >"$OUT/table.md" 2>"$OUT/table.err" || { cat "$OUT/table.err"; return 1; }
  # A GPU run is the section's current result; a dry run never touches docs/benchmarks.md.
  if [[ "$DRY_RUN" != 1 ]]; then
    "$PY" bench/gpu_results.py --results "$OUT/gpu_results.json" --doc docs/benchmarks.md >/dev/null
  fi
  log "results: $OUT/gpu_results.json; table: $doc$([[ "$DRY_RUN" != 1 ]] && echo ' and docs/benchmarks.md')"
  cat "$OUT/table.md"
}
on_term() {
  log "hard timeout: stopping the running part, writing what there is"
  [[ -n "$part_pid" ]] && kill -TERM "$part_pid" 2>/dev/null && wait "$part_pid" 2>/dev/null
  write_table
  exit 124
}
trap on_term TERM

# The environment: GPUs, torch, the commit and machine the table's header names.
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv" 2>/dev/null || rm -f "$OUT/nvidia-smi.csv"
nvidia-smi topo -m > "$OUT/nvidia-smi-topo.txt" 2>/dev/null || rm -f "$OUT/nvidia-smi-topo.txt"
"$PY" - >"$OUT/env.json" 2>"$OUT/env.err" <<'PYEOF'
import json, sys
sys.path.insert(0, "bench")
import torch
from runtime_common import commit, machine
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(json.dumps({"commit": commit(), "machine": machine(), "torch": torch.__version__,
                  "cuda": torch.version.cuda, "gpus": [torch.cuda.get_device_name(i) for i in range(n)]}))
PYEOF
ngpu=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["gpus"]))' "$OUT/env.json" 2>/dev/null || echo 0)
log "out $OUT; dry run $DRY_RUN; GPUs $ngpu"
if [[ "$DRY_RUN" != 1 && "$ngpu" == 0 ]]; then
  log "no CUDA GPU visible to torch (see $OUT/env.err): nothing to measure; bench/gpu.sh --dry-run checks the script on CPU"
  exit 1
fi

# 1. All-reduce over every visible GPU (nproc = GPUs); the dry run: 2 gloo ranks on CPU.
if [[ "$DRY_RUN" == 1 ]]; then
  part allreduce 60 "$PY" -m torch.distributed.run --standalone --nproc-per-node=2 bench/nccl_allreduce.py \
    --backend gloo --sizes-mib 1,4 --warmup 1 --iters 3 --out "$OUT/allreduce.json"
elif (( ngpu > 1 )); then
  part allreduce 100 "$PY" -m torch.distributed.run --standalone --nproc-per-node="$ngpu" bench/nccl_allreduce.py \
    --out "$OUT/allreduce.json"
else
  printf '{"skipped": "1 GPU: an all-reduce needs 2 or more (busbw = algbw x 2(n-1)/n is 0 at n = 1)", "world": 1}\n' >"$OUT/allreduce.json"
  log "allreduce: skipped, 1 GPU"
fi

# 2. MFU on one GPU (the first visible one), one fresh process per preset.
first_gpu="${CUDA_VISIBLE_DEVICES:-0}"; first_gpu="${first_gpu%%,*}"
if [[ "$DRY_RUN" == 1 ]]; then  # debug and tiny stand in for 125m and 1b
  for preset in debug tiny; do
    part "mfu-$preset" 60 "$PY" bench/runtime_gpu.py --cpu --preset "$preset" --steps 3 --budget-s 30 --out "$OUT/mfu-$preset.json"
  done
else
  part mfu-125m 120 env CUDA_VISIBLE_DEVICES="$first_gpu" "$PY" bench/runtime_gpu.py --preset 125m --steps 30 --budget-s 70 --out "$OUT/mfu-125m.json"
  part mfu-1b 160 env CUDA_VISIBLE_DEVICES="$first_gpu" "$PY" bench/runtime_gpu.py --preset 1b --steps 30 --budget-s 100 --out "$OUT/mfu-1b.json"
fi

# 3. Hugging Face import: time against transformers (CPU processes), parity on the GPU.
if [[ "$DRY_RUN" == 1 ]]; then
  part hf_import 90 "$PY" bench/hf_import.py --dim 64 --layers 2 --vocab 512 --ranks 1 --device cpu --json "$OUT/hf_import.json"
else
  part hf_import 100 env CUDA_VISIBLE_DEVICES="$first_gpu" "$PY" bench/hf_import.py --json "$OUT/hf_import.json"
fi

trap - TERM
write_table
