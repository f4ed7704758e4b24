"""The model parts this rank holds, built and parallelised by the model's family: the built-in
transformer (``models/transformer``: build, pipeline split, TP → AC → FSDP/DDP per part; a
pretrained one built on the meta device and its shards loaded from the Hugging Face directory,
``models/huggingface/load.py``) or a user entrypoint (``models/entrypoint.py``: the user's module,
data parallelism only). One part unless pipelined with several stages per rank (virtual stages)."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from phalanx_common.presets import ModelShape
from phalanx_runtime.models.entrypoint import (
    ModelContext,
    build_entrypoint_model,
    parallelize_entrypoint,
)
from phalanx_runtime.models.huggingface.load import load_hf_weights
from phalanx_runtime.models.transformer import (
    build_transformer,
    parallelize_transformer,
    pipeline_split,
)

META_INIT_PARAMS = 1_000_000_000  # above this (multi-rank), build on meta and initialise shards in place


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


def build_model_parts(ctx: ModelContext) -> ModelParts:
    spec = ctx.config.spec
    if spec.model.entrypoint:
        model, loss_fn = build_entrypoint_model(spec.model.entrypoint, ctx)
        return ModelParts([parallelize_entrypoint(model.to(ctx.device), ctx)], loss_fn=loss_fn)
    return _build_transformer_parts(ctx)


def _build_transformer_parts(ctx: ModelContext) -> ModelParts:
    spec, parallel_dims, device = ctx.config.spec, ctx.mesh, ctx.device
    par = spec.parallelism
    shape = ctx.config.shape
    pretrained = spec.model.pretrained.path if spec.model.pretrained is not None else None
    # A pretrained model: no rank materialises the whole of it (each allocates and reads its shards).
    on_meta = bool(pretrained) or (shape.num_params() > META_INIT_PARAMS and parallel_dims.world_size > 1)
    # CPU: build on the host (bit-identical to the single-process reference, for parity). GPU:
    # initialise on the device (fast); very large models: on meta, then each shard in place.
    build_on = "meta" if on_meta else (device if device.type == "cuda" else "cpu")
    model = build_transformer(shape, seed=spec.training.seed, device=build_on)
    if not on_meta:
        model = model.to(device)
    if parallel_dims.pp_enabled:
        parts, ids, n = pipeline_split(model, pp_rank=parallel_dims.pp_rank, pp=par.pipeline,
                                       schedule=par.pipeline_schedule, virtual_stages=par.virtual_stages)
    else:
        parts, ids, n = [model], [0], 1
    parts = [parallelize_transformer(p, parallel_dims, spec, device=device, on_meta=on_meta,
                                     init_weights=not pretrained) for p in parts]
    if pretrained:
        load_hf_weights(parts, pretrained, shape)
    return ModelParts(parts, ids, n, shape)
