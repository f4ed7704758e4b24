"""Low-rank adapters (LoRA) on the built-in transformer's projections, laid out like PEFT's.

Each targeted ``nn.Linear`` of every layer this rank holds gains two children, ``lora_a``
(weight [rank, in]) and ``lora_b`` (weight [out, rank]), and a forward hook that adds
``lora_b(lora_a(dropout(x))) * alpha / rank`` to its output. The base keeps its name
(``layers.3.attention.wq.weight``); the adapters are ``layers.3.attention.wq.lora_a.weight`` and
``…lora_b.weight`` (``models/huggingface/keys.to_peft``). Every other parameter is frozen.

Applied after tensor parallelism and before activation checkpointing and FSDP/DDP (FSDP2 shards
the frozen base and the adapters alike and reduces only the adapters' gradients). Under tensor
parallelism the adapters are DTensors laid out to match their base, and the hook runs in DTensor,
so autograd inserts every reduction the gradients need:

* colwise base (wq wk wv w1 w3, weight ``Shard(0)``): A replicated, B ``Shard(0)``; the adapter's
  output is sharded on the features like the base's;
* rowwise base (wo w2, weight ``Shard(1)``): A ``Shard(1)`` (its input dim), so A's output is a
  partial sum, B replicated; the base's tensor-parallel output hook (all-reduce, or reduce-scatter
  with sequence parallelism) reduces base and adapter together (the hook here runs before it).

Initialisation like PEFT's: B zero, A kaiming-uniform (``a = sqrt(5)``) from a generator seeded by
(training seed, layer, module). Each rank draws the full A and keeps its shard, so every layout and
pipeline stage starts from the single process's adapters.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from phalanx_runtime.config import Lora
from phalanx_runtime.models.huggingface.keys import LORA_TARGET_MODULES

log = logging.getLogger("phalanx_runtime")

ADAPTER_NAMES = ("lora_a", "lora_b")


def target_modules(targets: Iterable[str]) -> list[str]:
    """PEFT module names (``q_proj``, ``down_proj``, …) → our module paths in a layer
    (``attention.wq``, ``feed_forward.w2``, …), in the order given; unknown names are refused."""
    targets = list(targets)
    unknown = [t for t in targets if t not in LORA_TARGET_MODULES]
    if unknown:
        raise ValueError(f"model.lora.targets: unknown module(s) {', '.join(unknown)} "
                         f"(known: {', '.join(LORA_TARGET_MODULES)})")
    if not targets:
        raise ValueError("model.lora.targets: name at least one module")
    return [LORA_TARGET_MODULES[t] for t in dict.fromkeys(targets)]


def is_adapter_param(name: str) -> bool:
    """Whether a parameter name (any prefix) is a LoRA adapter's weight."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[-2] in ADAPTER_NAMES


def adapters_only_checkpoints(model_spec) -> bool:
    """Whether a run's checkpoints hold the adapters (and their optimizer state) alone: only when
    the frozen base can be read again at every start and by an export, from ``model.pretrained``.
    A preset base (random from the seed) is saved whole, so that the checkpoint is the model."""
    return (model_spec is not None and model_spec.lora is not None and model_spec.pretrained is not None
            and bool(model_spec.pretrained.path))


def adapter_seed(seed: int, layer: int, module: str) -> int:
    """The seed of one adapter's A: stable across processes (no ``hash``) and layouts."""
    return (seed * 1_000_003 + zlib.crc32(f"{layer}.{module}".encode())) % (2**63)


def initial_lora_a(seed: int, layer: int, module: str, rank: int, in_features: int) -> torch.Tensor:
    """The full A [rank, in] of ``layers.<layer>.<module>`` at initialisation (fp32, CPU), drawn
    like PEFT's ``kaiming_uniform_(a=sqrt(5))``."""
    weight = torch.empty(rank, in_features)
    generator = torch.Generator().manual_seed(adapter_seed(seed, layer, module))
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)
    return weight


def _adapter_placements(base: torch.Tensor) -> tuple[list, list] | None:
    """(A's, B's) tensor-parallel placements for a base weight, None when it is a plain tensor."""
    if not isinstance(base, DTensor):
        return None
    (placement,) = base.placements  # the tensor-parallel mesh only: FSDP comes later
    if placement == Shard(0):  # colwise
        return [Replicate()], [Shard(0)]
    if placement == Shard(1):  # rowwise
        return [Shard(1)], [Replicate()]
    raise ValueError(f"LoRA: a base weight laid out as {placement} has no adapter layout")


def _adapter_weight(shape: tuple[int, int], base: torch.Tensor, placements: list | None) -> nn.Parameter:
    """An uninitialised adapter weight on the base's device and dtype, laid out like ``placements``."""
    local = base.to_local() if isinstance(base, DTensor) else base
    weight = torch.empty(shape, device=local.device, dtype=local.dtype)
    if placements is not None:
        weight = distribute_tensor(weight, base.device_mesh, placements, src_data_rank=None)
    return nn.Parameter(weight)


def _add_lora_output(module: nn.Linear, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """Forward hook: the base output plus the scaled low-rank update of the same input."""
    update = module.lora_b(module.lora_a(module.lora_dropout(args[0])))
    return output + update * module.lora_scaling


def _attach(linear: nn.Linear, lora: Lora, layer: int, module: str) -> None:
    placements = _adapter_placements(linear.weight)
    a_placements, b_placements = placements if placements is not None else (None, None)
    # On meta: the weights are replaced right away (no initialisation thrown away).
    linear.lora_a = nn.Linear(linear.in_features, lora.rank, bias=False, device="meta")
    linear.lora_b = nn.Linear(lora.rank, linear.out_features, bias=False, device="meta")
    linear.lora_a.weight = _adapter_weight((lora.rank, linear.in_features), linear.weight, a_placements)
    linear.lora_b.weight = _adapter_weight((linear.out_features, lora.rank), linear.weight, b_placements)
    linear.lora_dropout = nn.Dropout(lora.dropout) if lora.dropout > 0 else nn.Identity()
    linear.lora_scaling = lora.alpha / lora.rank
    linear.lora_id = (layer, module)
    # prepend: under tensor parallelism this runs before the output hook that reduces/converts.
    linear.register_forward_hook(_add_lora_output, prepend=True)


def adapted_linears(model: nn.Module) -> Iterator[nn.Linear]:
    """Every linear that carries adapters (any wrapping)."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and hasattr(module, "lora_id"):
            yield module


def _fill(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a full tensor into a parameter, plain or sharded (this rank's piece of it)."""
    full = full.to(device=param.device, dtype=param.dtype)
    if isinstance(param, DTensor):
        replicated = DTensor.from_local(full, param.device_mesh, [Replicate()] * param.device_mesh.ndim,
                                        run_check=False)
        param.to_local().copy_(replicated.redistribute(param.device_mesh, param.placements).to_local())
    else:
        param.copy_(full)


@torch.no_grad()
def init_adapters(model: nn.Module, seed: int) -> None:
    """(Re)initialise every adapter of ``model``: B zero, A from :func:`initial_lora_a`. Works
    before and after tensor parallelism and FSDP (a model built on meta calls it once it has storage)."""
    for linear in adapted_linears(model):
        layer, module = linear.lora_id
        a_weight = linear.lora_a.weight
        if a_weight.device.type == "meta":
            continue
        _fill(a_weight, initial_lora_a(seed, layer, module, a_weight.shape[0], a_weight.shape[1]))
        linear.lora_b.weight.zero_()


def apply_lora(model: nn.Module, lora: Lora, *, seed: int) -> None:
    """Adapters on the targeted projections of every layer of ``model`` (a whole transformer or a
    pipeline stage of it, tensor-parallelised or not); every other parameter frozen."""
    if lora.rank < 1:
        raise ValueError(f"model.lora.rank: {lora.rank} must be at least 1")
    if not 0.0 <= lora.dropout < 1.0:
        raise ValueError(f"model.lora.dropout: {lora.dropout} must be in [0, 1)")
    modules = target_modules(lora.targets)
    for param in model.parameters():
        param.requires_grad_(False)
    for layer_id, layer in model.layers.items():
        for module in modules:
            _attach(layer.get_submodule(module), lora, int(layer_id), module)
    init_adapters(model, seed)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.debug("LoRA rank %d on %s: %d trainable parameters in this part", lora.rank, ", ".join(modules), trainable)
