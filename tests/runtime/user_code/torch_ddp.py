"""A plain torch DDP training loop, as a user writes one: a small MLP on deterministic data over
gloo, started by torchrun. Rank 0 prints one line per step

    step 3/8 loss=0.6512 lr=0.0100

and, when ``--metrics-file`` (or $METRICS_FILE) names a file, appends the same as a JSON line:
``{"step": 3, "loss": 0.6512, "lr": 0.01, "total_steps": 8}``. With ``--eval-every N`` it also
prints ``eval step 4 val_loss=0.5123`` every N steps.
Nothing in it knows about Phalanx.

Two failure modes for the failure-handling tests:
``--hang-at-step N``: from step N on, rank 1 stops stepping (sleeps for ever), so the others block
in the next all-reduce; ``--nan-at-step N``: from step N on the loss is NaN (the inputs are).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

DIM = 16


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "8")))
    p.add_argument("--lr", type=float, default=float(os.environ.get("LEARNING_RATE", "0.01")))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--step-seconds", type=float, default=float(os.environ.get("STEP_SECONDS", "0")),
                   help="sleep after each step (a slower run to watch)")
    p.add_argument("--metrics-file", default=os.environ.get("METRICS_FILE"))
    p.add_argument("--hang-at-step", type=int, default=int(os.environ.get("HANG_AT_STEP", "0")))
    p.add_argument("--nan-at-step", type=int, default=int(os.environ.get("NAN_AT_STEP", "0")))
    return p.parse_args()


def batch(step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(size, DIM, generator=g)
    return x, x.sum(1, keepdim=True).sin()


def log(step: int, total: int, values: dict[str, float], metrics_file: str | None) -> None:
    text = " ".join(f"{k}={v:.4f}" for k, v in values.items())
    print(f"step {step}/{total} {text}", flush=True)
    if metrics_file:
        with open(metrics_file, "a") as f:
            f.write(json.dumps({"step": step, **values, "total_steps": total}) + "\n")


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(DIM, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for step in range(1, args.steps + 1):
        if args.hang_at_step and step >= args.hang_at_step and rank == 1:
            print(f"rank 1 stops stepping at step {step}", flush=True)
            while True:
                time.sleep(3600)
        x, y = batch(step, rank, args.batch)
        if args.nan_at_step and step >= args.nan_at_step:
            x = torch.full_like(x, float("nan"))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            log(step, args.steps, {"loss": mean.item() / dist.get_world_size(), "lr": args.lr}, args.metrics_file)
            if args.eval_every and step % args.eval_every == 0:
                with torch.no_grad():
                    vx, vy = batch(10**6, 0, 64)
                    print(f"eval step {step} val_loss={torch.nn.functional.mse_loss(model(vx), vy).item():.4f}",
                          flush=True)
        time.sleep(args.step_seconds)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
