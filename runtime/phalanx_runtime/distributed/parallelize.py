"""Data parallelism for any model part: FSDP2 (zero 2/3, HSDP), DDP (zero 0/1, comm hooks)."""

from __future__ import annotations

import torch
from torch import nn

from phalanx_runtime.distributed.ddp import apply_ddp
from phalanx_runtime.distributed.mesh import ParallelMesh
from phalanx_runtime.distributed.zero import apply_fsdp


def apply_data_parallel(part: nn.Module, pmesh: ParallelMesh, *, zero: int, device: torch.device,
                        precision: str = "fp32", cpu_offload: bool = False, comm_hook: str = "none",
                        gloo: bool = False) -> nn.Module:
    layout = pmesh.layout
    if zero >= 2:
        if layout.dp > 1 or (precision == "bf16" and device.type == "cuda") or cpu_offload:
            return apply_fsdp(part, pmesh.fsdp, zero=zero, device=device, precision=precision,
                              cpu_offload=cpu_offload, gloo=gloo)
        return part
    if layout.dp > 1:
        return apply_ddp(part, pmesh.group("dp"), device=device, comm_hook=comm_hook)
    return part


def inner(module: nn.Module) -> nn.Module:
    """The user-visible module under a DDP wrapper."""
    from torch.nn.parallel import DistributedDataParallel

    return module.module if isinstance(module, DistributedDataParallel) else module
