"""FSDP2 ``fully_shard`` for ZeRO-2/3 and HSDP.

* zero 2: ``reshard_after_forward=False`` (grads + optimizer state sharded, parameters stay
  gathered between forward and backward);
* zero 3: ``reshard_after_forward=True`` (the last block keeps its parameters: backward needs
  them right away);
* HSDP: the same on a 2-D (dp_replicate, dp_shard) mesh.

Each block the model family names is a unit of its own, then the root (embeddings, norm, output).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard

from phalanx_runtime.distributed.precision import fsdp_mixed_precision


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, *, zero: int, device: torch.device, precision: str = "fp32",
               cpu_offload: bool = False, gloo: bool = False, blocks: Sequence[nn.Module] = ()) -> nn.Module:
    if cpu_offload and device.type != "cuda":
        raise RuntimeError("parallelism.cpuOffload: CPU offload needs a GPU")
    kwargs = {"mesh": mesh}
    mp = fsdp_mixed_precision(precision)
    if mp is not None:
        kwargs["mp_policy"] = mp
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    reshard = zero >= 3
    for i, block in enumerate(blocks):
        fully_shard(block, reshard_after_forward=reshard and i < len(blocks) - 1, **kwargs)
    fully_shard(model, reshard_after_forward=reshard, **kwargs)
    if gloo:
        # gloo lacks PREMUL_SUM and its AVG was buggy (pytorch#162338): reduce with SUM and
        # divide.
        for m in model.modules():
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)
    return model
