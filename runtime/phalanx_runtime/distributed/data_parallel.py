"""Data parallelism for any model part — the one place that picks FSDP2 or DDP — and gradient-sync
control for gradient accumulation.

* zero 2/3: FSDP2 (``fsdp.py``) on the dp_shard (or HSDP) mesh, when there is something to do:
  dp > 1, bf16 mixed precision, or CPU offload;
* zero 0/1 with dp > 1: DDP (``ddp.py``) on the flattened dp group, with ``gradCompression``
  hooks (ZeRO-1's optimizer sharding is in ``components/optimizer.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel

from phalanx_runtime.config import JobSpec
from phalanx_runtime.distributed.ddp import apply_ddp
from phalanx_runtime.distributed.fsdp import apply_fsdp
from phalanx_runtime.distributed.parallel_dims import ParallelDims
from phalanx_runtime.distributed.precision import compute_precision


def apply_data_parallel(part: nn.Module, parallel_dims: ParallelDims, spec: JobSpec, *,
                        device: torch.device, blocks: Sequence[nn.Module] = ()) -> nn.Module:
    """``blocks``: the part's repeated blocks, each its own FSDP unit (the family knows them)."""
    par, tr = spec.parallelism, spec.training
    precision = compute_precision(tr.precision, device)
    if parallel_dims.fsdp_enabled:
        if parallel_dims.dp_enabled or precision == "bf16" or par.cpu_offload:
            return apply_fsdp(part, parallel_dims.fsdp, zero=par.zero, device=device, precision=precision,
                              cpu_offload=par.cpu_offload, gloo=device.type == "cpu", blocks=blocks)
        return part
    if parallel_dims.dp_enabled:
        return apply_ddp(part, parallel_dims.group("dp"), device=device, comm_hook=tr.grad_compression)
    return part


@contextlib.contextmanager
def grad_sync(parts: Sequence[nn.Module], enabled: bool):
    """Skip gradient reduction on all but the last microbatch of an accumulation."""
    with contextlib.ExitStack() as stack:
        for p in parts:
            if isinstance(p, DistributedDataParallel) and not enabled:
                stack.enter_context(p.no_sync())
            elif isinstance(p, FSDPModule):
                p.set_requires_gradient_sync(enabled)
        yield
