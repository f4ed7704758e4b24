"""(a) Step time of the Phalanx runtime vs the same parallelism written in plain torch, in the
same processes, rounds interleaved (ours, plain, ours, plain, …). Goal: ratio ≤ 1.03.

    python bench/runtime_overhead.py [--steps 12] [--rounds 3] [--preset tiny] [--no-doc]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_common import RANKS_TIMEOUT_S, append_result, median  # noqa: E402

WARMUP = 2


def plain_loop(cfg) -> list[float]:
    """The same job in plain torch: DDP or fully_shard, AdamW, clip, no runtime."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    from phalanx_runtime.models.transformer import build_transformer

    spec = cfg.spec
    tr, par = spec.training, spec.parallelism
    world = dist.get_world_size()
    model = build_transformer(cfg.shape, seed=tr.seed)
    if par.zero == 0:
        model = DDP(model)
    else:
        for block in model.layers.values():
            fully_shard(block)
        fully_shard(model)
        model.set_force_sum_reduction_for_comms(True)  # gloo lacks PREMUL_SUM
        for block in model.layers.values():
            block.set_force_sum_reduction_for_comms(True)
    opt = torch.optim.AdamW(model.parameters(), lr=tr.lr, weight_decay=tr.weight_decay, foreach=True)
    local = tr.global_batch_size // world
    g = torch.Generator().manual_seed(dist.get_rank())
    times = []
    for _ in range(tr.steps):
        t0 = time.perf_counter()
        tokens = torch.randint(0, cfg.shape.vocab_size, (local, spec.data.seq_len + 1), generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tr.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.perf_counter() - t0)
    return times


def compare(cfg) -> dict:
    import os

    import torch.distributed as dist

    from phalanx_runtime.train import train

    dist.init_process_group("gloo")  # one group for all rounds (re-creating it on one port races)
    rounds = int(os.environ.get("BENCH_ROUNDS", 3))
    ours, plain = [], []
    for _ in range(rounds):
        ours += train(cfg).step_times[WARMUP:]
        plain += plain_loop(cfg)[WARMUP:]
    dist.destroy_process_group()
    return {"ours": ours, "plain": plain}


def job(zero: int, preset: str, steps: int, seq: int) -> dict:
    return {"metadata": {"name": f"bench-zero{zero}"},
            "spec": {"image": "x", "procsPerNode": 2, "parallelism": {"zero": zero},
                     "model": {"preset": preset}, "data": {"source": "synthetic", "seqLen": seq},
                     "training": {"steps": steps, "globalBatchSize": 8, "microBatchSize": 4, "precision": "fp32",
                                  "lr": 1e-3, "logEvery": 1000}}}


def main() -> None:
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    os.environ["BENCH_ROUNDS"] = str(args.rounds)
    from phalanx_runtime.spawn import run_ranks

    rows = []
    for zero, name in ((0, "DDP (zero 0)"), (3, "FSDP2 (zero 3)")):
        out = run_ranks(job(zero, args.preset, args.steps, args.seq), 2, fn=compare, timeout=RANKS_TIMEOUT_S)
        mo, mp = median(out["ours"]), median(out["plain"])
        rows.append((name, mo, mp, mo / mp, len(out["ours"])))
        print(f"{name}: ours {mo * 1e3:.1f} ms, plain {mp * 1e3:.1f} ms, ratio {mo / mp:.3f}", flush=True)
    body = ("| layout | runtime step (median) | plain torch step (median) | ratio (goal ≤ 1.03) | samples |\n"
            "|---|---|---|---|---|\n")
    body += "".join(f"| {n} | {o * 1e3:.1f} ms | {p * 1e3:.1f} ms | **{r:.3f}** | {k} |\n" for n, o, p, r, k in rows)
    body += (f"\nModel preset `{args.preset}`, seqLen {args.seq}, global batch 8, 2 ranks × 1 thread, gloo; "
             f"{args.rounds} interleaved rounds of {args.steps} steps, first {WARMUP} steps of each round dropped.")
    if not args.no_doc:
        append_result("overhead", body)


if __name__ == "__main__":
    main()
