"""How the built-in transformer is parallelised: pipeline split, TP(+SP) plan, activation
checkpointing, then data parallelism (DDP / ZeRO / FSDP2 / HSDP). Order as torchtitan:
PP split → TP → AC → FSDP/DDP."""

from __future__ import annotations

import copy

from torch import nn

from phalanx_runtime.distributed.pipeline import num_stages, split_layers, stage_ids_for_rank
from phalanx_runtime.distributed.tensor_parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    Replicate,
    RowwiseParallel,
    SequenceParallel,
    Shard,
    apply_tp,
)
from phalanx_runtime.models.transformer import Transformer


def pipeline_split(model: Transformer, *, pp_rank: int, pp: int, schedule: str, virtual_stages: int
                   ) -> tuple[list[Transformer], list[int], int]:
    """Model parts for this pipeline rank. Layers are deleted from the ModuleDict, so the kept
    parameters keep their full-model names (``layers.5.attention.wq.weight``)."""
    n = num_stages(pp, schedule, virtual_stages)
    ids = stage_ids_for_rank(pp_rank, pp, schedule, virtual_stages)
    split = split_layers(model.shape.n_layers, n)
    parts = []
    for sid in ids:
        part = copy.deepcopy(model) if len(ids) > 1 else model
        keep = {str(i) for i in split[sid]}
        for name in list(part.layers.keys()):
            if name not in keep:
                del part.layers[name]
        if sid != 0:
            part.tok_embeddings = None
        if sid != n - 1:
            part.norm = None
            part.output = None
        parts.append(part)
    return parts, ids, n


def tp_plans(model: Transformer, sequence_parallel: bool) -> tuple[dict, dict]:
    """(root plan, per-block plan) — Megatron TP, optional sequence parallelism."""
    seq = Shard(1) if sequence_parallel else Replicate()
    root: dict = {}
    if model.tok_embeddings is not None:
        root["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.norm is not None and sequence_parallel:
        root["norm"] = SequenceParallel()
    if model.output is not None:
        root["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate(), use_local_output=True)
    block: dict = {
        "attention": PrepareModuleInput(input_layouts=(seq, None), desired_input_layouts=(Replicate(), None)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=seq),
        "feed_forward": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=seq),
        "feed_forward.w3": ColwiseParallel(),
    }
    if sequence_parallel:
        block["attention_norm"] = SequenceParallel()
        block["ffn_norm"] = SequenceParallel()
    return root, block


def apply_transformer_tp(model: Transformer, tp_mesh, sequence_parallel: bool) -> None:
    if tp_mesh.size() == 1:
        return
    root, block = tp_plans(model, sequence_parallel)
    apply_tp(model, tp_mesh, root)
    for layer in model.layers.values():
        apply_tp(layer, tp_mesh, block)


def apply_ac(model: nn.Module, mode: str) -> None:
    for layer in getattr(model, "layers", {}).values():
        layer.ac_mode = mode
