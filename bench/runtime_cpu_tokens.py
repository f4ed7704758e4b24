"""(d) Tokens/s on CPU through the full local path (launcher → torchrun → workers), training
the byte-level corpus (Python stdlib sources).

    python bench/runtime_cpu_tokens.py [--preset tiny] [--steps 12] [--no-doc]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_common import append_result, median  # noqa: E402


def job_yaml(d: str, name: str, procs: int, par: dict, preset: str, steps: int, seq: int) -> str:
    import yaml

    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
           "spec": {"image": "x", "nodes": 1, "procsPerNode": procs, "parallelism": par, "model": {"preset": preset},
                    "data": {"source": "corpus", "seqLen": seq},
                    "training": {"steps": steps, "globalBatchSize": 8, "microBatchSize": 4 if procs == 1 else 4,
                                 "lr": 3e-3, "precision": "fp32", "logEvery": 1000}}}
    p = Path(d) / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    from phalanx.local.run import run_local

    cases = [("1 process", 1, {}), ("DDP, 2 processes", 2, {"zero": 0}), ("FSDP2, 2 processes", 2, {"zero": 3}),
             ("TP 2 + SP", 2, {"tensor": 2, "sequenceParallel": True}),
             ("PP 2, 1F1B, m=4", 2, {"pipeline": 2, "microbatches": 4})]
    body = ("| layout | tokens/s (mean) | tokens/s (median step) | MFU (median step) | peak per rank | loss step 1 → last |\n"
            "|---|---|---|---|---|---|\n")
    with tempfile.TemporaryDirectory() as d:
        import os

        import torch

        from phalanx_runtime.components.metrics import measure_cpu_peak

        for label, procs, par in cases:
            # One MFU denominator per case: the GEMM peak of the threads each rank gets.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // procs))
            peak = measure_cpu_peak(n=1536, iters=4, trials=6)
            r = run_local(job_yaml(d, f"cpu{procs}", procs, par, args.preset, args.steps, args.seq), timeout=600,
                          env={"PHALANX_CPU_PEAK_FLOPS": str(peak)})
            from phalanx_common.presets import PRESETS

            tokens_per_step = 8 * args.seq
            med = tokens_per_step / median(r["step_times"][1:])
            mfu = PRESETS[args.preset].flops_per_token(args.seq) * med / procs / peak
            print(f"{label}: {r['tokens_per_s']:.0f} tok/s (median step {med:.0f}), mfu {mfu:.3%}", flush=True)
            body += (f"| {label} | **{r['tokens_per_s']:.0f}** | {med:.0f} | {mfu:.1%} | {peak / 1e9:.0f} GFLOP/s | "
                     f"{r['losses'][0]:.3f} → {r['losses'][-1]:.3f} |\n")
    body += (f"\nPreset `{args.preset}`, seqLen {args.seq}, global batch 8, {args.steps} steps (first step excluded "
             "from tokens/s), corpus data, `run_local` (one launcher, torchrun workers, OMP threads = cores / "
             "ranks). MFU denominator per rank: best of 6 fp32 GEMM (1536², 4 iterations) FLOP/s trials with that rank's thread count, taken by the bench before each case (this-machine.md: ≈158 GFLOP/s with 2 threads). The VM was shared with other builds; figures are indicative.")
    if not args.no_doc:
        append_result("cpu", body)


if __name__ == "__main__":
    main()
