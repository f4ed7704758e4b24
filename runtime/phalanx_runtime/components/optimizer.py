"""AdamW (weight decay on matrices only) + warmup/decay LR schedule. ZeRO-1 (zero 1 with dp > 1)
shards the AdamW state over the dp group with ``ZeroRedundancyOptimizer`` (gradients stay DDP's)."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def param_groups(params, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for p in params:
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(params, *, lr: float, weight_decay: float, zero: int = 0, dp_group=None,
                    device: torch.device | None = None) -> torch.optim.Optimizer:
    params = list(params)
    kwargs = {"lr": lr, "betas": (0.9, 0.95), "eps": 1e-8}
    if device is not None and device.type == "cuda":
        kwargs["fused"] = True
    else:
        kwargs["foreach"] = True
    groups = param_groups(params, weight_decay)
    if zero == 1 and dp_group is not None and torch.distributed.get_world_size(dp_group) > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, process_group=dp_group,
                                       parameters_as_bucket_view=False, **kwargs)
    return torch.optim.AdamW(groups, **kwargs)


def lr_lambda(step: int, *, total_steps: int, warmup_steps: int, decay: str, min_lr_ratio: float) -> float:
    """Multiplier of the base LR after ``step`` optimizer steps (torchtitan-style warmup)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if decay == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    if decay == "linear":
        frac = 1.0 - progress
    elif decay == "cosine":
        frac = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        raise ValueError(f"training.lrSchedule.decay: unknown decay {decay!r}")
    return min_lr_ratio + (1.0 - min_lr_ratio) * frac


def build_lr_scheduler(optimizer, *, total_steps: int, warmup_steps: int, decay: str, min_lr_ratio: float) -> LambdaLR:
    def fn(step: int) -> float:
        return lr_lambda(step, total_steps=total_steps, warmup_steps=warmup_steps, decay=decay,
                         min_lr_ratio=min_lr_ratio)

    return LambdaLR(optimizer, fn)
