"""A Hugging Face model directory (config.json + safetensors shards) loaded into the built-in
transformer's parts as they are sharded on this rank.

The parts are built on the meta device, split into pipeline stages and parallelised (TP → AC →
FSDP) before any storage exists; then each rank allocates its shards only and reads them with
torch DCP's ``HuggingFaceStorageReader``: the load plan asks each safetensors file for the slices
this rank's DTensor shards cover (``safe_open(...).get_slice``), so no rank ever holds the whole
model. Parameter names map to Hugging Face's by ``keys.to_hf``; with tied embeddings the output
layer (a last pipeline stage's, whose ``tok_embeddings`` is elsewhere) reads
``model.embed_tokens.weight`` (the file has no ``lm_head.weight``). Weights are cast to the
parameters' dtype as they are copied. Without a process group it is a plain local load.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import HuggingFaceStorageReader
from torch.distributed.tensor import DTensor

from phalanx_common.hf_config import FIELD, read_hf_config, shape_from_hf_config
from phalanx_common.presets import ModelShape
from phalanx_runtime.models.huggingface.keys import to_hf
from phalanx_runtime.models.transformer.lora import is_adapter_param

SAFETENSORS_SUFFIX = ".safetensors"

log = logging.getLogger("phalanx_runtime.models.huggingface")
TIED_SOURCE = "model.embed_tokens.weight"


class CountingReader(HuggingFaceStorageReader):
    """The HF reader, counting what this rank reads (elements and bytes, in the files' dtypes)."""

    def __init__(self, path: str, thread_count: int = 1):
        super().__init__(path, thread_count=thread_count)
        self.elements_read = 0
        self.bytes_read = 0

    def read_data(self, plan, planner):
        for item in plan.items:
            n = math.prod(item.lengths)
            self.elements_read += n
            self.bytes_read += n * self.storage_data[item.storage_index].dtype.itemsize
        return super().read_data(plan, planner)


@dataclass
class LoadStats:
    tensors: int  # parameters (or shards of them) this rank filled
    elements_local: int  # their elements on this rank
    elements_read: int  # elements read from the files (equal to elements_local: only the slices needed)
    bytes_read: int
    seconds: float


def hf_name(name: str, shape: ModelShape) -> str:
    """The Hugging Face tensor a parameter of ours loads from."""
    if shape.tie_embeddings and name == "output.weight":
        return TIED_SOURCE
    hf = to_hf(name)
    if hf is None:
        raise ValueError(f"{FIELD}: parameter {name} has no Hugging Face name")
    return hf


def _unwrap(part: nn.Module) -> nn.Module:
    """DDP prefixes its module's names with ``module.``; FSDP2 and TP keep them."""
    return part.module if isinstance(part, nn.parallel.DistributedDataParallel) else part


def load_targets(parts: list[nn.Module], shape: ModelShape) -> dict[str, list[torch.Tensor]]:
    """Hugging Face name → this rank's parameters that load it (several only when one rank holds
    the same tensor in two parts). LoRA adapters are not in the base model: they keep their
    initialisation (or resume from the run's checkpoint)."""
    targets: dict[str, list[torch.Tensor]] = {}
    for part in parts:
        for name, param in _unwrap(part).named_parameters():
            if not is_adapter_param(name):
                targets.setdefault(hf_name(name, shape), []).append(param)
    return targets


def _local_numel(t: torch.Tensor) -> int:
    return t.to_local().numel() if isinstance(t, DTensor) else t.numel()


def check_readable(path: str) -> None:
    """Every safetensors file of the directory opens for reading. Raises ValueError naming those
    that do not: safetensors reports a file it may not read as "No such file or directory"."""
    errors = []
    for file in sorted(Path(path).glob("*" + SAFETENSORS_SUFFIX)):
        try:
            with open(file, "rb"):
                pass
        except OSError as exc:
            errors.append(f"{FIELD}: {file} cannot be read ({exc.strerror or type(exc).__name__}); the pods run as "
                          "uid 1000 and need read permission on the model's files")
    if errors:
        raise ValueError("\n".join(errors))


def check_against_files(reader: HuggingFaceStorageReader, state: dict[str, torch.Tensor], path: str) -> None:
    """Every tensor asked for is in the files, with the parameter's (global) shape. Raises ValueError
    naming each one that is not (DCP would read a partial overlap of a wrong-sized tensor)."""
    stored = reader.read_metadata().state_dict_metadata
    errors = []
    for name, param in sorted(state.items()):
        if name not in stored:
            errors.append(f"{FIELD}: {path} has no tensor {name}")
        elif tuple(stored[name].size) != tuple(param.shape):
            errors.append(f"{FIELD}: {path} tensor {name} has shape {tuple(stored[name].size)}, "
                          f"config.json implies {tuple(param.shape)}")
    if errors:
        raise ValueError("\n".join(errors))


@torch.no_grad()
def load_hf_weights(parts: list[nn.Module], path: str | Path, shape: ModelShape, *, local: bool = False,
                    thread_count: int = 1) -> LoadStats:
    """Fill every parameter of ``parts`` (already allocated, possibly sharded) from the model
    directory ``path``. Collective when a process group exists (every rank calls it) unless
    ``local``: this process loads whole tensors on its own."""
    t0 = time.perf_counter()
    path = str(path)
    targets = load_targets(parts, shape)
    state = {name: params[0] for name, params in targets.items()}
    check_readable(path)
    reader = CountingReader(path, thread_count=thread_count)
    check_against_files(reader, state, path)
    no_dist = local or not dist.is_initialized()
    with warnings.catch_warnings():
        if no_dist:  # DCP warns that it "assumes" a single process: that is the intent here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=reader, no_dist=no_dist)
    for params in targets.values():
        for twin in params[1:]:
            twin.copy_(params[0])
    stats = LoadStats(tensors=len(state), elements_local=sum(_local_numel(t) for t in state.values()),
                      elements_read=reader.elements_read, bytes_read=reader.bytes_read,
                      seconds=time.perf_counter() - t0)
    log.info("loaded %d tensors (%.1f MB read) from %s in %.2fs", stats.tensors, stats.bytes_read / 2**20,
             path, stats.seconds)
    return stats


def from_pretrained(path: str | Path, *, device: str | torch.device = "cpu"):
    """The whole model in this process (no parallelism, no collective): a ``Transformer`` with the
    directory's weights, in float32."""
    from phalanx_runtime.models.transformer import build_transformer

    shape = shape_from_hf_config(read_hf_config(path))
    model = build_transformer(shape, device="meta")
    model.to_empty(device=device)
    model.tie_weights()
    model.init_rope(torch.device(device))
    load_hf_weights([model], path, shape, local=True)
    return model
