"""A user's Horovod script, as a ``framework: horovod`` job would run it (tests/runtime/test_horovod.py).

Plain Horovod: ``hvd.init()`` from the HOROVOD_* env (rendered by the operator, per process by
phalanx_runtime.horovod_launch), ``broadcast_parameters``, ``DistributedOptimizer`` on this rank's
shard of a fixed global batch. Writes what it saw and its final weights to
``$OUT_DIR/rank-<rank>.json``. The model and data are also built by :func:`build` for the
one-process reference (the test imports this module without Horovod).
"""

from __future__ import annotations

import json
import os
import sys
import time

SEED = 1234
DIM = 6


def build(rank: int, size: int, global_batch: int, steps: int):
    """The model (seeded per rank: the broadcast must make them equal) and each step's global
    batch (the same on every rank; rank r trains on rows r, r + size, …)."""
    import torch

    torch.manual_seed(SEED + rank)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(DIM, 1, generator=gen)
    batches = []
    for _ in range(steps):
        x = torch.randn(global_batch, DIM, generator=gen)
        batches.append((x, torch.sin(x @ w)))
    return model, batches


def train(model, batches, opt, shard=lambda t: t) -> list[float]:
    import torch

    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(shard(x)), shard(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> int:
    import horovod.torch as hvd
    import torch

    t0 = time.monotonic()
    torch.set_num_threads(1)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    steps, global_batch, lr = int(os.environ["STEPS"]), int(os.environ["GLOBAL_BATCH"]), float(os.environ["LR"])
    model, batches = build(rank, size, global_batch, steps)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    losses = train(model, batches, opt, shard=lambda t: t[rank::size])
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(weights.unsqueeze(0), name="weights")
    out = {
        "rank": rank, "size": size, "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
        "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "gloo": hvd.gloo_enabled(),
        "env": {k: v for k, v in os.environ.items() if k.startswith("HOROVOD_")},
        "losses": losses, "weights": weights.tolist(),
        "replicas_equal": all(torch.equal(gathered[0], gathered[i]) for i in range(size)),
        "seconds": time.monotonic() - t0,
    }
    with open(os.path.join(os.environ["OUT_DIR"], f"rank-{rank}.json"), "w") as f:
        json.dump(out, f)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
