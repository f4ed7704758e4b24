"""(c) Measured pipeline bubble vs the model (p−1)/(m+p−1).

For each schedule and microbatch count m, on p pipeline ranks: T_step = wall time of one
``schedule.step`` (forward+backward of all microbatches); T_busy = the same rank's own stage
running the same m microbatches forward+backward back to back, no communication. Bubble (idle
fraction of the step) = 1 − T_busy / T_step, averaged over ranks.

    python bench/runtime_pipeline_bubble.py [--pp 2] [--microbatches 2 4 8] [--no-doc]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_common import RANKS_TIMEOUT_S, append_result, median  # noqa: E402

MBS = 2
REPS = 10


def measure(cfg) -> list[dict]:
    import torch
    import torch.distributed as dist

    from phalanx_runtime.components.loss import cross_entropy
    from phalanx_runtime.distributed.parallel_dims import ParallelDims
    from phalanx_runtime.distributed.pipeline import build_pipeline
    from phalanx_runtime.models.build import build_model_parts
    from phalanx_runtime.models.entrypoint import ModelContext

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    rows = []
    for sched in os.environ["BENCH_SCHEDULES"].split(","):
        for m in map(int, os.environ["BENCH_MICROBATCHES"].split(",")):
            spec = cfg.spec
            c = replace(cfg, spec=replace(
                spec, parallelism=replace(spec.parallelism, pipeline=world, pipeline_schedule=sched, microbatches=m),
                training=replace(spec.training, global_batch_size=m * MBS)))
            pmesh = ParallelDims.from_spec(c.spec).build_mesh("cpu")
            ctx = ModelContext(c, pmesh, device, rank, world, rank, c.spec.data.seq_len, 0)
            parts = build_model_parts(ctx)
            runner = build_pipeline(parts.parts, parts.stage_ids, parts.n_stages, device=device,
                                    group=pmesh.group("pp"), schedule=sched, microbatches=m, loss_fn=cross_entropy)
            seq, vocab, dim = c.spec.data.seq_len, c.shape.vocab_size, c.shape.dim
            g = torch.Generator().manual_seed(0)
            tok = torch.randint(0, vocab, (m * MBS, seq + 1), generator=g)
            x, y = tok[:, :-1], tok[:, 1:]
            stage = runner.stages[0]
            mod = parts.parts[0]

            def busy_once(m=m, x=x, y=y, stage=stage, mod=mod, seq=seq, dim=dim):
                for j in range(m):
                    inp = x[j * MBS:(j + 1) * MBS] if stage.is_first else torch.randn(MBS, seq, dim, requires_grad=True)
                    out = mod(inp)
                    if stage.is_last:
                        cross_entropy(out, y[j * MBS:(j + 1) * MBS]).backward()
                    else:
                        out.backward(torch.ones_like(out))

            # Pair each pipelined step with a local busy run right after it, so both see the same
            # machine load; the bubble is taken from the per-pair ratios.
            step_t, busy_t, ratios = [], [], []
            for i in range(REPS + 2):
                dist.barrier()
                t0 = time.perf_counter()
                runner.step(x, y)
                dist.barrier()
                t1 = time.perf_counter()
                for p in parts.parameters():
                    p.grad = None
                busy_once()
                t2 = time.perf_counter()
                for p in parts.parameters():
                    p.grad = None
                if i >= 2:
                    step_t.append(t1 - t0)
                    busy_t.append(t2 - t1)
                    ratios.append((t2 - t1) / (t1 - t0))
            ts, tb = median(step_t), median(busy_t)
            gathered = [None] * world
            dist.all_gather_object(gathered, {"step": ts, "busy": tb, "ratio": median(ratios)})
            p = world
            rows.append({"schedule": sched, "m": m, "p": p, "ranks": gathered,
                         "bubble": sum(1 - r["ratio"] for r in gathered) / world,
                         "model": (p - 1) / (m + p - 1)})
            dist.barrier()
    dist.destroy_process_group()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--schedules", nargs="+", default=["GPipe", "1F1B"])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    os.environ["BENCH_SCHEDULES"] = ",".join(args.schedules)
    os.environ["BENCH_MICROBATCHES"] = ",".join(map(str, args.microbatches))
    from phalanx_runtime.spawn import run_ranks

    doc = {"metadata": {"name": "bubble"},
           "spec": {"image": "x", "procsPerNode": args.pp, "parallelism": {"pipeline": args.pp, "microbatches": args.pp},
                    "model": {"preset": args.preset}, "data": {"seqLen": args.seq},
                    "training": {"globalBatchSize": 2 * args.pp, "precision": "fp32"}}}
    rows = run_ranks(doc, args.pp, fn=measure, timeout=RANKS_TIMEOUT_S)
    body = ("| schedule | p | m | step (median) | busy per rank | measured bubble | (p−1)/(m+p−1) |\n"
            "|---|---|---|---|---|---|---|\n")
    for r in rows:
        busy = " / ".join(f"{x['busy'] * 1e3:.0f}" for x in r["ranks"])
        body += (f"| {r['schedule']} | {r['p']} | {r['m']} | {r['ranks'][0]['step'] * 1e3:.0f} ms | {busy} ms | "
                 f"**{r['bubble']:.3f}** | {r['model']:.3f} |\n")
        print(f"{r['schedule']} p={r['p']} m={r['m']}: bubble {r['bubble']:.3f} vs model {r['model']:.3f}", flush=True)
    body += (f"\nPreset `{args.preset}` split in {args.pp} stages, microbatch {MBS}×{args.seq} tokens, gloo on CPU, "
             f"one thread per rank; median of {REPS} steps. The measured figure also contains the send/recv and "
             "schedule overhead, which the model does not.")
    if not args.no_doc:
        append_result("bubble", body)


if __name__ == "__main__":
    main()
