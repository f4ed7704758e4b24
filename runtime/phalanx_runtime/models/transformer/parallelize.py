"""How the built-in transformer (one pipeline stage of it, or all of it) is parallelised, in
torchtitan's order: tensor (+ sequence) parallelism → LoRA adapters (``lora.py``, with
``model.lora``) → activation checkpointing → FSDP2 / DDP. The pipeline split comes before
(``pipeline.py``).

Tensor parallelism is Megatron-style with DTensor ``parallelize_module``: embeddings rowwise,
wq/wk/wv/w1/w3 colwise (their biases sharded with them), wo/w2 rowwise (a bias replicated), output
colwise (replicated logits). With sequence parallelism the activations between blocks are sharded
on the sequence dim and the norms run on their shard. Query/key norms (Qwen3) run on the local
heads, as a norm sharded on the head dim (their weights' gradients summed over the heads' ranks).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from phalanx_runtime.config import JobSpec
from phalanx_runtime.distributed.data_parallel import apply_data_parallel
from phalanx_runtime.distributed.parallel_dims import ParallelDims
from phalanx_runtime.models.transformer.lora import apply_lora, init_adapters
from phalanx_runtime.models.transformer.model import Transformer


def parallelize_transformer(model: Transformer, parallel_dims: ParallelDims, spec: JobSpec, *,
                            device: torch.device, on_meta: bool = False, init_weights: bool = True) -> nn.Module:
    """TP → LoRA → AC → FSDP/DDP. ``on_meta``: the model was built on the meta device; its storage is
    allocated here, before DDP (which needs real tensors) or after FSDP (each rank its shards), and
    its weights initialised unless ``init_weights`` is False (the caller loads them; LoRA adapters
    are initialised either way)."""
    if parallel_dims.tp_enabled:
        apply_tp(model, parallel_dims.tp, sequence_parallel=spec.parallelism.sequence_parallel)
        model.tie_weights()  # both sides sharded on the vocab dim; FSDP then sees one parameter
    if spec.model is not None and spec.model.lora is not None:
        apply_lora(model, spec.model.lora, seed=spec.training.seed)
    apply_ac(model, spec.training.activation_checkpointing)
    if on_meta and not parallel_dims.fsdp_enabled:
        materialize(model, device, seed=spec.training.seed, init_weights=init_weights)
    blocks = list(model.layers.values())
    model = apply_data_parallel(model, parallel_dims, spec, device=device, blocks=blocks)
    if on_meta and parallel_dims.fsdp_enabled:
        materialize(model, device, seed=spec.training.seed, init_weights=init_weights)
    return model


def tp_plans(model: Transformer, sequence_parallel: bool) -> tuple[dict, dict]:
    """(root plan, per-block plan)."""
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
    if model.shape.qk_norm:  # input [bs, seq, local heads, head_dim]
        block["attention.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        block["attention.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
    return root, block


def apply_tp(model: Transformer, tp_mesh: DeviceMesh, *, sequence_parallel: bool) -> None:
    root, block = tp_plans(model, sequence_parallel)
    if root:
        parallelize_module(model, tp_mesh, root)
    for layer in model.layers.values():
        parallelize_module(layer, tp_mesh, block)


def apply_ac(model: Transformer, mode: str) -> None:
    """none | selective | full; the blocks checkpoint themselves (``TransformerBlock.forward``)."""
    for layer in model.layers.values():
        layer.ac_mode = mode


def materialize(model: nn.Module, device: torch.device, *, seed: int, init_weights: bool = True) -> None:
    model.to_empty(device=device)
    model.tie_weights()
    if init_weights:
        model.init_weights(buffer_device=device)
    else:
        model.init_rope(buffer_device=device)
    init_adapters(model, seed)
