"""(b) ZeRO-3 (FSDP2) model-state bytes per rank — parameters + gradients + AdamW state after a
step, counted from the local shards — vs the ZeRO paper's 16Ψ/N (fp32 AdamW: 4+4+8 bytes per
parameter). Goal: within 5 %.

    python bench/runtime_zero_memory.py [--preset small] [--ranks 2 4] [--no-doc]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_common import RANKS_TIMEOUT_S, append_result  # noqa: E402


def _local(t):
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def measure(cfg) -> dict:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from phalanx_runtime.components.optimizer import build_optimizer
    from phalanx_runtime.distributed.parallel_dims import ParallelDims
    from phalanx_runtime.models.build import build_model_parts
    from phalanx_runtime.models.entrypoint import ModelContext

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    pmesh = ParallelDims.from_spec(cfg.spec).build_mesh("cpu")
    ctx = ModelContext(cfg, pmesh, device, rank, world, rank, cfg.spec.data.seq_len, 0)
    parts = build_model_parts(ctx)
    model = parts.parts[0]
    opt = build_optimizer(parts.parameters(), lr=1e-3, weight_decay=0.1, zero=3, device=device)
    x = torch.randint(0, cfg.shape.vocab_size, (1, cfg.spec.data.seq_len + 1))
    F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    opt.step()
    nbytes = lambda t: _local(t).numel() * _local(t).element_size()  # noqa: E731
    params = list(parts.parameters())
    p_b = sum(nbytes(p) for p in params)
    g_b = sum(nbytes(p.grad) for p in params if p.grad is not None)
    o_b = sum(nbytes(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    rows = [None] * world
    dist.all_gather_object(rows, {"params": p_b, "grads": g_b, "optim": o_b})
    dist.destroy_process_group()
    return {"ranks": rows, "psi": cfg.shape.num_params()}


def job(preset: str, n: int) -> dict:
    return {"metadata": {"name": "zero3-mem"},
            "spec": {"image": "x", "procsPerNode": n, "parallelism": {"zero": 3}, "model": {"preset": preset},
                     "data": {"seqLen": 32}, "training": {"globalBatchSize": n, "precision": "fp32"}}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args()
    from phalanx_runtime.spawn import run_ranks

    body = ("| ranks N | Ψ (params) | params / grads / AdamW bytes on the largest rank | total per rank (max) | 16Ψ/N | deviation |\n"
            "|---|---|---|---|---|---|\n")
    for n in args.ranks:
        out = run_ranks(job(args.preset, n), n, fn=measure, timeout=RANKS_TIMEOUT_S)
        psi = out["psi"]
        worst = max(out["ranks"], key=lambda r: sum(r.values()))
        total = sum(worst.values())
        ideal = 16 * psi / n
        dev = total / ideal - 1
        print(f"N={n}: {total / 2**20:.2f} MiB per rank vs 16Ψ/N {ideal / 2**20:.2f} MiB ({dev:+.2%})", flush=True)
        body += (f"| {n} | {psi:,} | {worst['params'] / 2**20:.2f} / {worst['grads'] / 2**20:.2f} / "
                 f"{worst['optim'] / 2**20:.2f} MiB | {total / 2**20:.2f} MiB | {ideal / 2**20:.2f} MiB | **{dev:+.2%}** |\n")
    body += (f"\nPreset `{args.preset}` (fp32, FSDP2 `fully_shard` per block + root, AdamW). Bytes are the local "
             "shards after one optimizer step (uneven dim-0 shards: the largest rank is reported).")
    if not args.no_doc:
        append_result("zero3", body)


if __name__ == "__main__":
    main()
