"""Global gradient-norm clipping across every mesh a gradient is spread over.

DTensor gradients (FSDP shards, TP shards) reduce their norm over their own mesh via
``full_tensor()``; plain gradients (DDP: already identical on every dp rank; TP-replicated
params) count once; finally the squared norm is summed over the pipeline group, since each
stage holds different parameters (torchtitan#596)."""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


@torch.no_grad()
def grad_norm(params, *, pp_group: dist.ProcessGroup | None = None) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    plain: list[torch.Tensor] = []
    groups: dict[tuple, list[DTensor]] = defaultdict(list)
    for g in grads:
        if isinstance(g, DTensor):
            groups[(g.device_mesh, tuple(g.placements))].append(g)
        else:
            plain.append(g)
    device = grads[0].device if not isinstance(grads[0], DTensor) else grads[0].to_local().device
    sq = torch.zeros((), device=device, dtype=torch.float32)
    for gs in groups.values():
        n = torch.nn.utils.get_total_norm(gs, 2.0, foreach=True)
        if isinstance(n, DTensor):
            n = n.full_tensor()
        sq = sq + n.float().pow(2)
    if plain:
        sq = sq + torch.nn.utils.get_total_norm(plain, 2.0, foreach=True).float().pow(2)
    if pp_group is not None and dist.get_world_size(pp_group) > 1:
        dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=pp_group)
    return sq.sqrt()


@torch.no_grad()
def clip_grad_norm_(params, max_norm: float, *, pp_group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Returns the total (pre-clip) norm; clips in place when ``max_norm > 0``."""
    params = [p for p in params if p.grad is not None]
    total = grad_norm(params, pp_group=pp_group)
    if max_norm > 0 and params:
        coef = min(max_norm / (float(total) + 1e-6), 1.0)
        if coef < 1.0:
            for p in params:  # a python scalar works for plain and DTensor grads alike
                p.grad.mul_(coef)
    return total
