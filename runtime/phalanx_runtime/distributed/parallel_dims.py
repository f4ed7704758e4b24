"""``ParallelDims``: the parallel degrees of a job, which parallelisms are on, and the 4-D device
mesh ``pp → dp_replicate → dp_shard → tp`` (torchtitan order, tp innermost) with its sub-meshes.

The degrees come from ``phalanx_common.layout`` (``layout_of``: the world-size factorisation, shared
with the operator's validator, which refuses what cannot run before a pod exists):

* zero 0/1 (DDP, ZeRO-1): ``dp_replicate = data``, ``dp_shard = 1``;
* zero 2/3 (FSDP2): ``dp_replicate = parallelism.replicate`` (HSDP), ``dp_shard = data / replicate``;
* ``dp`` = dp_replicate × dp_shard, flattened: data loading, loss averaging, the DDP group.

Entrypoint models get it as ``ModelContext.mesh`` (``.tp``, ``.dp``, ``.pp``, ``.fsdp`` meshes,
``.layout`` degrees, ``*_rank``, ``group(dim)``).
"""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from phalanx_common.layout import MESH_DIM_NAMES, Layout, layout_of
from phalanx_runtime.config import JobSpec
from phalanx_runtime.distributed.process_group import group_options, pg_timeout


class ParallelDims:
    def __init__(self, layout: Layout, *, zero: int = 0):
        self.layout, self.zero = layout, zero
        self._mesh: DeviceMesh | None = None
        self._dp: DeviceMesh | None = None

    @classmethod
    def from_spec(cls, spec: JobSpec) -> ParallelDims:
        return cls(layout_of(spec), zero=spec.parallelism.zero)

    # ---------------------------------------------------------------- which parallelisms are on

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def pp_enabled(self) -> bool:
        return self.layout.pp > 1

    @property
    def tp_enabled(self) -> bool:
        return self.layout.tp > 1

    @property
    def dp_enabled(self) -> bool:
        return self.layout.dp > 1

    @property
    def fsdp_enabled(self) -> bool:
        """zero 2/3: FSDP2 shards the model (DDP otherwise)."""
        return self.zero >= 2

    # ---------------------------------------------------------------- the mesh

    def build_mesh(self, device_type: str) -> ParallelDims:
        """Create the mesh (collective: every rank calls it). Every group it creates gets the
        process-group timeout (``$PHALANX_PG_TIMEOUT_SECONDS``)."""
        world = dist.get_world_size()
        if world != self.world_size:
            raise RuntimeError(f"world size {world} does not match the layout {self.layout} "
                               f"({self.world_size} ranks)")
        timeout = pg_timeout()

        def override(size: int):
            # A dim spanning every rank reuses the default group (which has the timeout already).
            # One options object per dim: the backend keeps (and fills in) the one it is given.
            return group_options(timeout) if size != world else None

        dims = dict(zip(MESH_DIM_NAMES, self.layout.shape, strict=True))
        mesh_override = {name: o for name, size in dims.items() if (o := override(size)) is not None}
        self._mesh = init_device_mesh(device_type, self.layout.shape, mesh_dim_names=MESH_DIM_NAMES,
                                      backend_override=mesh_override or None)
        self._dp = self._mesh["dp_replicate", "dp_shard"]._flatten("dp", backend_override=override(self.layout.dp))
        return self

    @property
    def mesh(self) -> DeviceMesh:
        """The full 4-D mesh."""
        if self._mesh is None:
            raise RuntimeError("ParallelDims.build_mesh() has not been called")
        return self._mesh

    @property
    def device_type(self) -> str:
        return self.mesh.device_type

    @property
    def pp(self) -> DeviceMesh:
        return self.mesh["pp"]

    @property
    def tp(self) -> DeviceMesh:
        return self.mesh["tp"]

    @property
    def dp(self) -> DeviceMesh:
        """Flattened dp_replicate × dp_shard."""
        self.mesh  # noqa: B018 - raises when not built
        return self._dp

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

    def describe(self) -> str:
        return f"(pp, dp_replicate, dp_shard, tp) = {self.layout.shape}, zero {self.zero}"
