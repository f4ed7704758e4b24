"""Model construction: built-in presets (parallelised by ``parallelize_transformer``) or a
user entrypoint. Returns the model parts this rank holds (one unless pipelined with virtual
stages)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from phalanx.api.presets import ModelShape
from phalanx_runtime.distributed.mesh import ParallelMesh
from phalanx_runtime.distributed.parallelize import apply_data_parallel
from phalanx_runtime.models.entrypoint import ModelContext, build_entrypoint_model
from phalanx_runtime.models.parallelize_transformer import (
    apply_ac,
    apply_transformer_tp,
    pipeline_split,
)
from phalanx_runtime.models.transformer import build_transformer

META_INIT_PARAMS = 1_000_000_000  # above this, build on meta and initialise shards in place


@dataclass
class ModelParts:
    parts: list[nn.Module]
    stage_ids: list[int] = field(default_factory=lambda: [0])
    n_stages: int = 1
    shape: ModelShape | None = None
    loss_fn: object | None = None

    def parameters(self):
        for p in self.parts:
            yield from p.parameters()


def build_model_parts(cfg, pmesh: ParallelMesh, device: torch.device, ctx: ModelContext, *,
                      gloo: bool) -> ModelParts:
    spec = cfg.spec
    par, tr = spec.parallelism, spec.training
    precision = "bf16" if (tr.precision == "bf16" and device.type == "cuda") else "fp32"
    dp_kwargs = dict(zero=par.zero, device=device, precision=precision, cpu_offload=par.cpu_offload,
                     comm_hook=tr.grad_compression, gloo=gloo)

    if spec.model.entrypoint:
        model, loss_fn = build_entrypoint_model(spec.model.entrypoint, ctx)
        model = model.to(device)
        if not getattr(model, "phalanx_parallelized", False):
            model = apply_data_parallel(model, pmesh, **dp_kwargs)
        return ModelParts([model], loss_fn=loss_fn)

    shape = cfg.shape
    meta = shape.num_params() > META_INIT_PARAMS and pmesh.layout.world_size > 1
    # CPU: build on the host (bit-identical to the single-process reference, for parity). GPU:
    # initialise on the device (fast); very large models: on meta, then each shard in place.
    build_on = "meta" if meta else (device if device.type == "cuda" else "cpu")
    model = build_transformer(shape, seed=tr.seed, device=build_on)
    if not meta:
        model = model.to(device)
    if par.pipeline > 1:
        parts, ids, n = pipeline_split(model, pp_rank=pmesh.pp_rank, pp=par.pipeline,
                                       schedule=par.pipeline_schedule, virtual_stages=par.virtual_stages)
    else:
        parts, ids, n = [model], [0], 1
    out = []
    for part in parts:
        apply_transformer_tp(part, pmesh.tp, par.sequence_parallel)
        apply_ac(part, tr.activation_checkpointing)
        if meta and par.zero < 2:
            part.to_empty(device=device)
            part.init_weights(buffer_device=device)
        part = apply_data_parallel(part, pmesh, **dp_kwargs)
        if meta and par.zero >= 2:
            part.to_empty(device=device)
            part.init_weights(buffer_device=device)
        out.append(part)
    return ModelParts(out, ids, n, shape)
