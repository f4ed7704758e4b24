"""ZeRO stages on torch-native pieces.

* zero 1: DDP gradients + :class:`ZeroRedundancyOptimizer` (optimizer state sharded);
* zero 2: FSDP2 ``fully_shard(reshard_after_forward=False)`` (grads + optimizer sharded,
  parameters stay gathered between forward and backward);
* zero 3: FSDP2 ``fully_shard(reshard_after_forward=True)``;
* HSDP: the same on a 2-D (dp_replicate, dp_shard) mesh.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard


def mixed_precision_policy(precision: str, device: torch.device) -> MixedPrecisionPolicy | None:
    if precision == "bf16" and device.type == "cuda":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return None


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, *, zero: int, device: torch.device,
               precision: str = "fp32", cpu_offload: bool = False, gloo: bool = False) -> nn.Module:
    """Shard each transformer block, then the root (embeddings, norm, output)."""
    if cpu_offload and device.type != "cuda":
        raise RuntimeError("parallelism.cpuOffload: CPU offload needs a GPU")
    kwargs = {"mesh": mesh}
    mp = mixed_precision_policy(precision, device)
    if mp is not None:
        kwargs["mp_policy"] = mp
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    reshard = zero >= 3
    layers = getattr(model, "layers", None)
    if layers is not None:
        blocks = list(layers.values())
        for i, block in enumerate(blocks):
            # The last block's parameters are needed again right away by backward.
            fully_shard(block, reshard_after_forward=reshard and i < len(blocks) - 1, **kwargs)
    fully_shard(model, reshard_after_forward=reshard, **kwargs)
    if gloo:
        # gloo lacks PREMUL_SUM and its AVG was buggy (pytorch#162338): reduce with SUM and
        # divide (anchors §6).
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)
    return model


def zero1_optimizer(param_groups, group, optimizer_class, **defaults):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(param_groups, optimizer_class=optimizer_class, process_group=group,
                                   parameters_as_bucket_view=False, **defaults)
