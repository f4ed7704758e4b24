"""User models: ``model.entrypoint: "package.module:function"`` — the model and its parallelize.

The function receives a :class:`ModelContext` and returns an ``nn.Module`` mapping token ids
``[bs, seq]`` to logits ``[bs, seq, vocab]`` (or a ``(module, loss_fn)`` pair). The runtime then
applies data parallelism (DDP/ZeRO/FSDP per ``parallelism.zero``; the children of a ``layers``
ModuleDict/ModuleList, if any, become FSDP units of their own) unless the module sets
``phalanx_parallelized = True`` (it did its own, e.g. TP with ``ctx.mesh.tp``)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from phalanx_runtime.distributed.data_parallel import apply_data_parallel


@dataclass
class ModelContext:
    config: Any  # RuntimeConfig
    mesh: Any  # ParallelDims (mesh.tp, mesh.dp, mesh.pp, mesh.fsdp, mesh.layout, ranks)
    device: torch.device
    rank: int
    world_size: int
    local_rank: int
    seq_len: int
    seed: int


def load_entrypoint(ref: str):
    mod_name, _, fn_name = ref.partition(":")
    if not mod_name or not fn_name:
        raise ValueError(f"model.entrypoint: {ref!r} is not 'package.module:function'")
    module = importlib.import_module(mod_name)
    try:
        return getattr(module, fn_name)
    except AttributeError as e:
        raise ValueError(f"model.entrypoint: {mod_name} has no function {fn_name!r}") from e


def build_entrypoint_model(ref: str, ctx: ModelContext):
    """(module, loss_fn or None) from the user's function."""
    out = load_entrypoint(ref)(ctx)
    if isinstance(out, tuple):
        model, loss_fn = out
    else:
        model, loss_fn = out, None
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model.entrypoint: {ref} returned {type(model).__name__}, expected torch.nn.Module")
    return model, loss_fn


def parallelize_entrypoint(model: nn.Module, ctx: ModelContext) -> nn.Module:
    """Data parallelism only (the runtime cannot split or shard an unknown model's layers)."""
    if getattr(model, "phalanx_parallelized", False):
        return model
    layers = getattr(model, "layers", None)
    if isinstance(layers, nn.ModuleDict):
        blocks = list(layers.values())
    elif isinstance(layers, nn.ModuleList):
        blocks = list(layers)
    else:
        blocks = []
    return apply_data_parallel(model, ctx.mesh, ctx.config.spec, device=ctx.device, blocks=blocks)
