"""DDP (zero 0) with optional communication hooks: bf16 compression or PowerSGD."""

from __future__ import annotations

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def apply_ddp(module: nn.Module, group: dist.ProcessGroup, *, device, comm_hook: str = "none",
              bucket_cap_mb: int = 25) -> DDP:
    device_ids = [device.index] if device.type == "cuda" else None
    kwargs = dict(process_group=group, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb,
                  gradient_as_bucket_view=True)
    # Our only buffer (RoPE cache) is computed identically on every rank: never sync it.
    try:
        ddp = DDP(module, forward_sync_buffers=False, **kwargs)
    except TypeError:  # older torch
        ddp = DDP(module, broadcast_buffers=False, **kwargs)
    if comm_hook == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
    elif comm_hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                   start_powerSGD_iter=2, min_compression_rate=2,
                                   use_error_feedback=True, warm_start=True)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
    elif comm_hook != "none":
        raise ValueError(f"training.gradCompression: unknown hook {comm_hook!r}")
    return ddp
