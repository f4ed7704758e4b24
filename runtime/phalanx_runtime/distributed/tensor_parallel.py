"""Tensor (+ sequence) parallelism with DTensor ``parallelize_module`` (Megatron-style plans:
column-parallel in, row-parallel out; with sequence parallelism the activations between blocks
are sharded on the sequence dim and norms run on their shard)."""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

__all__ = ["ColwiseParallel", "PrepareModuleInput", "Replicate", "RowwiseParallel", "SequenceParallel",
           "Shard", "apply_tp"]


def apply_tp(module: nn.Module, tp_mesh: DeviceMesh, plan: dict) -> nn.Module:
    if tp_mesh.size() == 1 or not plan:
        return module
    return parallelize_module(module, tp_mesh, plan)
