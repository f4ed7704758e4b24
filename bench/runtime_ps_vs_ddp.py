"""Parameter servers (phalanx_runtime.ps, torch.distributed.rpc) vs all-reduce DDP (the runtime's
data parallelism, zero 0), same model, same global batch, same number of workers, on CPU:

* dense: the built-in transformer (``--preset``, default debug: 4 layers, dim 64, vocab 256);
* sparse: ``sparse_model`` below, a 1M × 64 embedding table (256 MB fp32) + a 64 → 256 head;
  each step looks up ≤ global batch × seq rows (128 of 1M at the defaults).

Step time: the median over the steps after the first two, of worker 0 (PS) / rank 0 (DDP).
Bytes per step and worker (sent + received): PS counts the tensors its RPC calls carry (pulls,
pushes; the pickled envelopes are not counted); DDP is the ring all-reduce of the gradients,
2 × 2(N−1)/N × parameter bytes per rank (sent + received), N the ranks. A PS server moves the
sum of its workers' traffic.

    python bench/runtime_ps_vs_ddp.py [--workers 2] [--steps 8] [--only dense|sparse]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "runtime"))
from runtime_common import RANKS_TIMEOUT_S, machine  # noqa: E402

SPARSE_ROWS = 1_000_000
SPARSE_DIM = 64
VOCAB = 256


def sparse_model(ctx):
    """Token ids [bs, seq] → row ids hashed over the table (token, position) → logits [bs, seq, 256]."""
    import torch
    from torch import nn

    class Sparse(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(SPARSE_ROWS, SPARSE_DIM)
            self.head = nn.Linear(SPARSE_DIM, VOCAB)

        def forward(self, x):
            pos = torch.arange(x.shape[1])
            rows = (x * 3_907 + pos * 104_729) % SPARSE_ROWS
            return self.head(self.table(rows))

    torch.manual_seed(ctx.seed)
    return Sparse()


def job_doc(kind: str, world: int, steps: int, ps: dict | None) -> dict:
    from runtime_parity_util import job

    par = {"parameterServer": ps} if ps else {"zero": 0}
    doc = job(par, world=world, steps=steps, training={"globalBatchSize": 8, "microBatchSize": 4,
                                                         "weightDecay": 0.0})
    if kind == "sparse":
        doc["spec"]["model"] = {"entrypoint": "runtime_ps_vs_ddp:sparse_model"}
    else:
        doc["spec"]["model"] = {"preset": "debug"}
    return doc


def param_bytes(kind: str) -> int:
    if kind == "sparse":
        return 4 * (SPARSE_ROWS * SPARSE_DIM + SPARSE_DIM * VOCAB + VOCAB)
    from phalanx_common.presets import resolve_shape

    return 4 * resolve_shape("debug", {}).num_params()


def _ps_result(cfg):
    from phalanx_runtime.train import train

    r = train(cfg)
    return {"step_times": r.step_times, "losses": r.losses, **r.extra}


def run_one(kind: str, workers: int, servers: int, steps: int) -> dict:
    from phalanx_runtime.spawn import run_ranks

    ps = {"servers": servers, "mode": "sync"} if servers else None
    world = workers + servers
    t0 = time.perf_counter()
    out = run_ranks(job_doc(kind, world, steps, ps), world, fn=_ps_result if servers else None,
                    timeout=RANKS_TIMEOUT_S)
    step = statistics.median(out["step_times"][2:])
    if servers:
        per_worker = statistics.median(out["bytes_per_step"][2:]) / workers
    else:
        per_worker = 2 * 2 * (workers - 1) / workers * param_bytes(kind)
    return {"kind": kind, "setup": f"PS {servers} server(s) + {workers} workers" if servers else f"DDP {workers} ranks",
            "step_s": step, "bytes_worker": per_worker, "bytes_server": per_worker * workers / servers if servers else None,
            "loss": out["losses"][-1], "wall_s": time.perf_counter() - t0}


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f} B"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--only", choices=["dense", "sparse"], default=None)
    args = ap.parse_args()
    print(machine())
    rows = []
    for kind in [args.only] if args.only else ["dense", "sparse"]:
        for servers in (0, 1, 2):
            r = run_one(kind, args.workers, servers, args.steps)
            rows.append(r)
            print(r, flush=True)
    print("\n| model | setup | step time (median) | bytes/step per worker | bytes/step at a server | final loss |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['setup']} | {r['step_s'] * 1e3:.0f} ms | {fmt_bytes(r['bytes_worker'])} | "
              f"{fmt_bytes(r['bytes_server'])} | {r['loss']:.4f} |")


if __name__ == "__main__":
    main()
