"""The 4-D device mesh ``pp → dp_replicate → dp_shard → tp`` (torchtitan order, tp innermost)
and the sub-meshes/groups each parallelism uses."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from phalanx_runtime.config import MESH_DIM_NAMES, Layout


@dataclass
class ParallelMesh:
    layout: Layout
    mesh: DeviceMesh  # full 4-D mesh
    dp: DeviceMesh  # flattened dp_replicate × dp_shard (data loading, loss averaging, DDP)
    device_type: str

    @property
    def pp(self) -> DeviceMesh:
        return self.mesh["pp"]

    @property
    def tp(self) -> DeviceMesh:
        return self.mesh["tp"]

    @property
    def fsdp(self) -> DeviceMesh:
        """1-D (dp_shard) mesh, or 2-D (dp_replicate, dp_shard) for HSDP."""
        if self.layout.dp_replicate > 1:
            return self.mesh["dp_replicate", "dp_shard"]
        return self.mesh["dp_shard"]

    def rank_in(self, dim: str) -> int:
        if dim == "dp":
            return self.dp.get_local_rank()
        return self.mesh.get_local_rank(dim)

    @property
    def pp_rank(self) -> int:
        return self.rank_in("pp")

    @property
    def dp_rank(self) -> int:
        return self.rank_in("dp")

    @property
    def tp_rank(self) -> int:
        return self.rank_in("tp")

    def group(self, dim: str) -> dist.ProcessGroup:
        if dim == "dp":
            return self.dp.get_group()
        return self.mesh.get_group(dim)


def build_mesh(layout: Layout, device_type: str) -> ParallelMesh:
    world = dist.get_world_size()
    if world != layout.world_size:
        raise RuntimeError(f"world size {world} does not match the layout {layout} ({layout.world_size} ranks)")
    mesh = init_device_mesh(device_type, layout.shape, mesh_dim_names=MESH_DIM_NAMES)
    dp = mesh["dp_replicate", "dp_shard"]._flatten("dp")
    return ParallelMesh(layout=layout, mesh=mesh, dp=dp, device_type=device_type)


def device_for_rank(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
