"""A committed DCP checkpoint → a Hugging Face model directory (and a PEFT adapter directory).

Tensor by tensor: each exported tensor's full value is read from the DCP files alone (a one-tensor
state dict, no process group), renamed (``keys.to_hf``), its LoRA adapters merged in
(``W + alpha/rank · B @ A``), its rows permuted for RoPE when the checkpoint rotates interleaved
pairs, and appended to a safetensors file whose header was written first — nothing holds more
than one tensor (and its adapters) at a time. Shard files are independent, so several ranks can
write them side by side (:func:`rank_files`); one writes ``model.safetensors.index.json``,
``config.json`` and the tokenizer files (:func:`write_model_metadata`).

A LoRA run on a pretrained model checkpoints its adapters only (the frozen base is the pretrained
directory, read again at every start). Exporting such a checkpoint merged takes each base tensor
from that directory (recorded in ``phalanx-model.json``, or another copy given as ``base_dir``),
one at a time with ``safe_open``, after checking it is the model the run trained (the recorded
fingerprint); the PEFT adapter directory needs the checkpoint alone.

Dtype: the model is exported in its own dtype — the one its ``config.json`` names (a pretrained
model's as published: bf16 stays bf16 whatever the run trained in), else the checkpoint's — or
the one asked for (``dtype``). Adapters are merged in float32, then cast.

RoPE: the preset transformer rotates adjacent pairs (x[2i], x[2i+1]); Hugging Face's Llama family
rotates halves (x[i], x[i + head_dim/2]), both with frequency i. Moving row 2i+j of every head to
row j·head_dim/2 + i (transformers' ``convert_llama_weights_to_hf`` ``permute``) makes q and k of
the exported model the rotated-halves form of ours; q·k is unchanged, as the same permutation applies
to both. Biases, q/k norms (per head_dim) and LoRA B (its rows are the output's) move the same way.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from phalanx_runtime.models.huggingface import keys
from phalanx_runtime.models.huggingface.provenance import (
    CONFIG_FILE,
    ROPE_INTERLEAVED,
    TOKENIZER_FILES,
    base_mismatch,
    copy_regular,
)

log = logging.getLogger("phalanx_runtime.models.huggingface")

MODEL_PREFIX = "model."  # the checkpoint's top-level key of model parameters
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9
INDEX_FILE = "model.safetensors.index.json"
ADAPTER_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"
EXPORT_MARKER = "export.json"  # in final/, written last by an in-job export
SAFETENSORS_DTYPES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}
DTYPES_BY_CODE = {code: dtype for dtype, code in SAFETENSORS_DTYPES.items()}
EXPORT_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                                         "float16": torch.float16}
_LORA = re.compile(r"^(.+)\.lora_([ab])\.weight$")
BASE_UNREADABLE = "base model {path} is not readable: export needs it because the checkpoint holds LoRA adapters only"
_ROTATED = {"attention.wq": "n_heads", "attention.wk": "n_kv_heads"}  # rows permuted per head
_HEAD_NORMS = ("attention.q_norm", "attention.k_norm")  # [head_dim], one head's worth


@dataclass(frozen=True)
class Param:
    """A tensor of the checkpoint's model: its key under ``model.``, full shape, dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class ExportTensor:
    """One tensor of the exported directory and how it is made."""

    name: str  # its Hugging Face (or PEFT) name
    shape: tuple[int, ...]
    dtype: torch.dtype
    source: str  # the checkpoint parameter
    lora: tuple[str, str] | None = None  # (A, B) parameters merged into it
    rotary_heads: int = 0  # > 0: rows permuted interleaved → half, per head of this many

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * _itemsize(self.dtype)


def _numel(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# ---------------------------------------------------------------- the pure parts


def interleaved_to_half(tensor: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows of ``n_heads`` heads (dim 0), each from interleaved pairs to halves: row 2i+j of a head
    → row j·half + i (transformers' ``convert_llama_weights_to_hf`` ``permute``)."""
    rows = tensor.shape[0]
    head_dim = rows // n_heads
    if n_heads * head_dim != rows or head_dim % 2:
        raise ValueError(f"{rows} rows are not {n_heads} heads of an even head_dim")
    rest = tuple(tensor.shape[1:])
    return tensor.reshape(n_heads, head_dim // 2, 2, *rest).transpose(1, 2).reshape(rows, *rest)


def lora_scaling(record: dict[str, Any]) -> float:
    lora = record.get("lora") or {}
    rank = lora.get("rank")
    if not rank:
        raise ValueError("the checkpoint has LoRA adapters but its model record has no lora rank")
    return float(lora.get("alpha", rank)) / float(rank)


def _rotary_heads(module: str, record: dict[str, Any]) -> int:
    if record.get("rope_style", ROPE_INTERLEAVED) != ROPE_INTERLEAVED:
        return 0
    layer_module = module.split(".", 2)[2] if module.startswith("layers.") else module
    if layer_module in _ROTATED:
        return int(record["shape"][_ROTATED[layer_module]])
    return 1 if layer_module in _HEAD_NORMS else 0


def _module_of(name: str) -> str:
    return name.rsplit(".", 1)[0]


def export_dtype(config: dict[str, Any], asked: str | None = None) -> torch.dtype | None:
    """The floating dtype of the export: ``asked``, else the one ``config.json`` names (``dtype``
    or ``torch_dtype``) when it is one of EXPORT_DTYPES, else None (each tensor's own)."""
    if asked is not None:
        if asked not in EXPORT_DTYPES:
            raise ValueError(f"dtype {asked!r} is no export dtype (one of {', '.join(EXPORT_DTYPES)})")
        return EXPORT_DTYPES[asked]
    return EXPORT_DTYPES.get(config.get("dtype") or config.get("torch_dtype"))


def plan_model(params: dict[str, Param], record: dict[str, Any], *, merge_lora: bool = True,
               dtype: torch.dtype | None = None) -> list[ExportTensor]:
    """The exported model's tensors (Hugging Face names), in the checkpoint's natural order, its
    floating tensors in ``dtype`` (None: as stored).

    LoRA parameters are merged into their base weight (``merge_lora``) or left out (the base alone);
    ``output.weight`` is left out when the embeddings are tied (Hugging Face ties it back)."""
    tied = bool(record["shape"].get("tie_embeddings"))
    if merge_lora:
        _check_adapters(params)
    out = []
    for name in sorted(params, key=_natural):
        if _LORA.match(name) or (tied and name == "output.weight"):
            continue
        hf = keys.to_hf(name)
        if hf is None:
            raise ValueError(f"checkpoint parameter {name!r} has no Hugging Face name")
        module = _module_of(name)
        pair = (f"{module}.lora_a.weight", f"{module}.lora_b.weight")
        lora = pair if merge_lora and name.endswith(".weight") and pair[0] in params else None
        p = params[name]
        cast = dtype if dtype is not None and p.dtype.is_floating_point else p.dtype
        out.append(ExportTensor(hf, p.shape, cast, name, lora, _rotary_heads(module, record)))
    return out


def _check_adapters(params: dict[str, Param]) -> None:
    """Every adapter pair has its base weight, and B @ A has the weight's shape."""
    for name in params:
        match = _LORA.match(name)
        if not match or match.group(2) != "a":
            continue
        module = match.group(1)
        weight, b_name = params.get(f"{module}.weight"), f"{module}.lora_b.weight"
        if weight is None:
            raise ValueError(f"{name}: the model has no {module}.weight to merge it into")
        if b_name not in params:
            raise ValueError(f"checkpoint has {name} without {b_name}")
        merged = (params[b_name].shape[0], params[name].shape[1])
        if merged != weight.shape[:2] or len(weight.shape) != 2:
            raise ValueError(f"{module}: adapters make {merged}, the base weight is {weight.shape}")


def adapters_only(params: dict[str, Param]) -> bool:
    """Whether a checkpoint's model is LoRA adapters and nothing else (its base is elsewhere)."""
    return bool(params) and all(_LORA.match(name) for name in params)


def plan_adapter(params: dict[str, Param], record: dict[str, Any]) -> list[ExportTensor]:
    """The LoRA adapters under PEFT's names (B of wq/wk permuted like the weight it adds to)."""
    out = []
    for name in sorted(params, key=_natural):
        match = _LORA.match(name)
        if not match:
            continue
        peft = keys.to_peft(name)
        if peft is None:
            raise ValueError(f"checkpoint parameter {name!r} has no PEFT name")
        heads = _rotary_heads(match.group(1), record) if match.group(2) == "b" else 0
        p = params[name]
        out.append(ExportTensor(peft, p.shape, p.dtype, name, None, heads))
    return out


def _natural(name: str) -> tuple:
    """``layers.10`` after ``layers.9``: numbers compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split("."))


def assign_shards(tensors: list[ExportTensor], max_bytes: int) -> list[list[ExportTensor]]:
    """Consecutive tensors into files of at most ``max_bytes`` (a larger tensor alone in its file)."""
    shards: list[list[ExportTensor]] = []
    size = 0
    for t in tensors:
        if not shards or (size + t.nbytes > max_bytes and shards[-1]):
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def shard_file_name(index: int, count: int) -> str:
    return f"model-{index + 1:05d}-of-{count:05d}.safetensors"


def rank_files(count: int, rank: int, world: int) -> list[int]:
    """The shard files rank ``rank`` of ``world`` writes (every file exactly once over the ranks)."""
    return list(range(rank, count, world))


def index_document(shards: list[list[ExportTensor]]) -> dict[str, Any]:
    """``model.safetensors.index.json``: total bytes and which file holds each tensor."""
    weight_map = {t.name: shard_file_name(i, len(shards)) for i, shard in enumerate(shards) for t in shard}
    total = sum(t.nbytes for shard in shards for t in shard)
    return {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}


def safetensors_header(tensors: list[ExportTensor], metadata: dict[str, str] | None = None) -> bytes:
    """The length-prefixed JSON header of a safetensors file holding ``tensors`` in order, padded
    with spaces to 8 bytes (as the safetensors library writes it)."""
    doc: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for t in tensors:
        if t.dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"{t.name}: dtype {t.dtype} has no safetensors code")
        doc[t.name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                       "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    header = json.dumps(doc, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header


def export_config(config: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """The model's ``config.json`` with the dtype its tensors are exported in."""
    name = str(dtype).removeprefix("torch.")
    return {**config, "dtype": name, "torch_dtype": name}


def adapter_config(record: dict[str, Any], tensors: list[ExportTensor], base_model: str | None) -> dict[str, Any]:
    """PEFT's ``adapter_config.json`` for the adapters exported."""
    lora = record.get("lora") or {}
    targets = sorted({t.name.split(".")[-3] for t in tensors})
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": int(lora.get("rank", 0)),
            "lora_alpha": float(lora.get("alpha", 0.0)), "lora_dropout": float(lora.get("dropout", 0.0)),
            "target_modules": targets, "base_model_name_or_path": base_model, "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "use_rslora": False,
            "use_dora": False, "modules_to_save": None, "revision": None}


# ---------------------------------------------------------------- reading the checkpoint


def checkpoint_params(step_dir: str | os.PathLike) -> dict[str, Param]:
    """The model tensors a committed checkpoint holds (names without ``model.``), from its metadata
    (read with the checkpoint module's safe unpickler)."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from phalanx_runtime.components.checkpoint import SafeReader

    md = SafeReader(str(step_dir)).read_metadata()
    return {k[len(MODEL_PREFIX):]: Param(k[len(MODEL_PREFIX):], tuple(v.size), v.properties.dtype)
            for k, v in md.state_dict_metadata.items()
            if k.startswith(MODEL_PREFIX) and isinstance(v, TensorStorageMetadata)}


def _metadata_once_reader(step_dir: str):
    """The checkpoint module's SafeReader, reading ``.metadata`` (which describes the optimizer
    state too) once for all the loads."""
    from phalanx_runtime.components.checkpoint import SafeReader

    class MetadataOnceReader(SafeReader):
        metadata = None

        def read_metadata(self, *args, **kwargs):
            if self.metadata is None:
                self.metadata = super().read_metadata(*args, **kwargs)
            return self.metadata

    return MetadataOnceReader(step_dir)


class PretrainedBase:
    """The base weights of a pretrained Hugging Face directory under our names and in their own
    dtype, each read alone (``safe_open``: the file's header, then that tensor's bytes)."""

    def __init__(self, directory: str | os.PathLike):
        from safetensors import safe_open

        self.directory = Path(directory)
        self.location: dict[str, tuple[Path, str]] = {}  # our name → (file, its name there)
        self.params: dict[str, Param] = {}
        try:
            files = sorted(self.directory.glob("*.safetensors")) if self.directory.is_dir() else []
            for file in files:
                with safe_open(file, framework="pt") as f:
                    for hf_name in f.keys():
                        name = keys.from_hf(hf_name)
                        if name is not None:  # buffers some files carry (rotary inv_freq) are not weights
                            piece = f.get_slice(hf_name)
                            self.location[name] = (file, hf_name)
                            self.params[name] = Param(name, tuple(piece.get_shape()),
                                                      DTYPES_BY_CODE[piece.get_dtype()])
        except OSError as e:
            raise ValueError(f"{BASE_UNREADABLE.format(path=self.directory)} ({e})") from e
        if not self.params:
            raise ValueError(BASE_UNREADABLE.format(path=self.directory))

    def read(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        from safetensors import safe_open

        out = {}
        for name in names:
            file, hf_name = self.location[name]
            try:
                with safe_open(file, framework="pt") as f:
                    out[name] = f.get_tensor(hf_name)
            except OSError as e:
                raise ValueError(f"{BASE_UNREADABLE.format(path=self.directory)} ({e})") from e
        return out


class TensorReader:
    """Full tensors out of a committed checkpoint, one load per call, no process group; those the
    checkpoint does not hold from ``base`` (an adapters-only checkpoint's pretrained model)."""

    def __init__(self, step_dir: str | os.PathLike, params: dict[str, Param]):
        self.step_dir, self.params = Path(step_dir), params
        self.storage = _metadata_once_reader(str(step_dir))
        self.base: PretrainedBase | None = None

    def read(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        from phalanx_runtime.components.checkpoint import SafeLoadPlanner

        names = list(names)
        model = {n: torch.empty(self.params[n].shape, dtype=self.params[n].dtype) for n in names if n in self.params}
        if model:
            _load_state_dict({"model": model}, storage_reader=self.storage, planner=SafeLoadPlanner(), no_dist=True)
        missing = [n for n in names if n not in self.params]
        if missing:
            if self.base is None:
                raise ValueError(f"{self.step_dir}: the checkpoint has no {', '.join(missing)}")
            model.update(self.base.read(missing))
        return model

    def value(self, tensor: ExportTensor, scaling: float = 1.0) -> torch.Tensor:
        """``tensor``'s exported value: merged with its adapters, rows permuted."""
        names = [tensor.source, *(tensor.lora or ())]
        got = self.read(names)
        value = got[tensor.source]
        if tensor.lora is not None:
            a, b = (got[n].float() for n in tensor.lora)
            value = value.float() + scaling * (b @ a)
        if tensor.rotary_heads:
            value = interleaved_to_half(value, tensor.rotary_heads)
        return value.to(tensor.dtype).contiguous()


# ---------------------------------------------------------------- writing


def write_safetensors(path: str | os.PathLike, tensors: list[ExportTensor],
                      value: Callable[[ExportTensor], torch.Tensor]) -> None:
    """A safetensors file of ``tensors`` (header first, then each value as it is made), written to a
    temporary name and renamed into place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(safetensors_header(tensors))
        for t in tensors:
            data = value(t)
            if tuple(data.shape) != t.shape or data.dtype != t.dtype:
                raise ValueError(f"{t.name}: made {tuple(data.shape)} {data.dtype}, planned {t.shape} {t.dtype}")
            f.write(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class ModelExport:
    """What one export of a checkpoint's model writes; every rank builds the same one."""

    step_dir: Path
    model_dir: Path
    config: dict[str, Any]
    record: dict[str, Any]
    params: dict[str, Param]
    merge_lora: bool = True
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    base_dir: Path | None = None  # where the base weights the checkpoint lacks are (its pretrained model)
    dtype: torch.dtype | None = None  # the model's floating tensors (None: as stored)

    def __post_init__(self):
        self.adapters = plan_adapter(self.params, self.record)
        self.reader = TensorReader(self.step_dir, self.params)
        self.scaling = lora_scaling(self.record) if self.adapters and self.merge_lora else 1.0

    @cached_property
    def tensors(self) -> list[ExportTensor]:
        """The model's tensors (made on first use: the adapter directory needs no base)."""
        params = self.params
        if self.base_dir is not None:
            self.reader.base = PretrainedBase(self.base_dir)
            params = {**self.reader.base.params, **self.params}
        return plan_model(params, self.record, merge_lora=self.merge_lora, dtype=self.dtype)

    @cached_property
    def shards(self) -> list[list[ExportTensor]]:
        return assign_shards(self.tensors, self.max_shard_bytes)

    @property
    def has_lora(self) -> bool:
        return bool(self.adapters)

    def write_shards(self, out: Path, rank: int = 0, world: int = 1) -> list[str]:
        """This rank's shard files."""
        names = []
        for i in rank_files(len(self.shards), rank, world):
            name = shard_file_name(i, len(self.shards))
            write_safetensors(out / name, self.shards[i], lambda t: self.reader.value(t, self.scaling))
            names.append(name)
        return names

    def write_model_metadata(self, out: Path) -> None:
        """The index, ``config.json`` (the exported dtype) and the tokenizer files."""
        _write_json(out / INDEX_FILE, index_document(self.shards))
        dtype = self.tensors[0].dtype if self.tensors else torch.float32
        _write_json(out / CONFIG_FILE, export_config(self.config, dtype))
        _copy_tokenizer(self.model_dir, out)

    def write_adapter(self, out: Path) -> None:
        """The PEFT adapter directory: ``adapter_model.safetensors`` and ``adapter_config.json``."""
        if not self.adapters:
            raise ValueError(f"{self.step_dir}: no LoRA adapters in this checkpoint")
        write_safetensors(out / ADAPTER_FILE, self.adapters, self.reader.value)
        _write_json(out / ADAPTER_CONFIG_FILE, adapter_config(self.record, self.adapters, self.record.get("pretrained")))
        _copy_tokenizer(self.model_dir, out)


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _copy_tokenizer(model_dir: Path, out: Path) -> None:
    """The tokenizer files ``model/`` holds, each a regular file (a symlink there is refused)."""
    for name in TOKENIZER_FILES:
        if (model_dir / name).is_file() or (model_dir / name).is_symlink():
            copy_regular(model_dir / name, out / name)


# ---------------------------------------------------------------- whole exports


def load_export(step_dir: str | os.PathLike, model_dir: str | os.PathLike | None = None, *, merge_lora: bool = True,
                max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES, base_dir: str | os.PathLike | None = None,
                dtype: str | None = None) -> ModelExport:
    """The export of the committed checkpoint ``step_dir``; its model is described by ``model_dir``
    (default: ``model/`` beside it, where the Checkpointer records it). An adapters-only checkpoint's
    base is read from ``base_dir`` (default: the pretrained directory the run recorded), which must
    be the model the run trained. ``dtype``: float32 | bfloat16 | float16 (default: the model's own)."""
    from phalanx_runtime.models.huggingface.provenance import MODEL_DIR, RECORD_FILE, read_model_dir

    step_dir = Path(step_dir)
    model_dir = Path(model_dir) if model_dir is not None else step_dir.parent / MODEL_DIR
    config, record = read_model_dir(model_dir)
    params = checkpoint_params(step_dir)
    base = None
    if adapters_only(params):
        if base_dir is None and not record.get("pretrained"):
            raise ValueError(f"{step_dir} holds LoRA adapters only and {model_dir / RECORD_FILE} names no "
                             "pretrained base model to merge them into (give its directory with --base)")
        base = Path(base_dir if base_dir is not None else record["pretrained"])
        log.info("LoRA adapters only: the base weights are read from %s", base)
    return ModelExport(step_dir, model_dir, config, record, params, merge_lora=merge_lora,
                       max_shard_bytes=max_shard_bytes, base_dir=base, dtype=export_dtype(config, dtype))


def check_base(export: ModelExport) -> None:
    """The base directory an adapters-only export reads is the model the run trained (its
    recorded fingerprint); ValueError listing the differences."""
    if export.base_dir is None or not export.base_dir.is_dir():
        return  # PretrainedBase says it is unreadable
    problems = base_mismatch(export.record.get("base"), export.base_dir)
    if problems:
        raise ValueError(f"{export.base_dir} is not the base model this run trained (give the right copy with "
                         "--base):\n  " + "\n  ".join(problems))


def export_hf(export: ModelExport, out: str | os.PathLike) -> Path:
    """The whole Hugging Face directory, from this process alone."""
    out = Path(out)
    check_base(export)
    _ = export.shards  # planned (the base found, or refused) before anything is written
    out.mkdir(parents=True, exist_ok=True)
    export.write_shards(out)
    export.write_model_metadata(out)
    return out


def export_adapter(export: ModelExport, out: str | os.PathLike) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    export.write_adapter(out)
    return out


def _replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        trash = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.rename(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(tmp, final)


def export_marker(export: ModelExport) -> dict[str, Any]:
    """What ``final/`` holds once an in-job export is complete (``EXPORT_MARKER``, written last):
    a start that finds the same one has nothing to export again."""
    return {"step": int(export.step_dir.name.removeprefix("step-")), "checkpoint": export.step_dir.name,
            "max_shard_bytes": export.max_shard_bytes, "adapter": export.has_lora}


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _agree(failed: bool, group) -> bool:
    """Whether any rank of ``group`` failed (every rank learns it, none waits at a barrier for one
    that gave up)."""
    import torch.distributed as dist

    flag = torch.tensor([1.0 if failed else 0.0])
    dist.all_reduce(flag, group=group)
    return bool(flag.item())


def _write_final(export: ModelExport, final: Path, rank: int, world: int, group) -> None:
    """The collective writing of ``final/hf`` (and ``final/adapter``), marker last. Raises on every
    rank when any rank failed (the failing one with its cause)."""
    tmp_hf, tmp_adapter, marker = final / ".tmp-hf", final / ".tmp-adapter", final / EXPORT_MARKER
    error: Exception | None = None
    try:
        if rank == 0:
            check_base(export)
            marker.unlink(missing_ok=True)  # from here until it is rewritten, final/ is incomplete
            for d in (tmp_hf, tmp_adapter):
                shutil.rmtree(d, ignore_errors=True)
            tmp_hf.mkdir(parents=True)
    except Exception as exc:  # noqa: BLE001 — every rank must hear of it
        error = exc
    if not _agree(error is not None, group):
        try:
            export.write_shards(tmp_hf, rank, world)
        except Exception as exc:  # noqa: BLE001
            error = exc
        if not _agree(error is not None, group) and rank == 0:
            try:
                export.write_model_metadata(tmp_hf)
                if export.has_lora:
                    export_adapter(export, tmp_adapter)
                _replace_dir(tmp_hf, final / "hf")
                if export.has_lora:
                    _replace_dir(tmp_adapter, final / "adapter")
                _write_json(marker, export_marker(export))
            except Exception as exc:  # noqa: BLE001
                error = exc
    _raise_if_any(error, group)


def _raise_if_any(error: Exception | None, group) -> None:
    """Collective: raise on every rank when any rank of ``group`` has an error (its own, or one
    saying another rank failed)."""
    failed = _agree(error is not None, group)
    if error is not None:
        raise error
    if failed:
        raise RuntimeError("exportHuggingFace failed on another rank (its log names the cause)")


def export_in_job(ckpt) -> Path | None:
    """``checkpoint.exportHuggingFace``: the last committed checkpoint of the Checkpointer ``ckpt``
    → ``<dir>/final/hf/`` (LoRA merged) and, with adapters, ``<dir>/final/adapter/``. Collective:
    the ranks split the shard files; rank 0 writes the rest, moves the directories into place and
    writes ``final/export.json`` last. Skipped when that marker says this checkpoint is exported
    (a job restarted at its final step); a failure on any rank fails every rank, none left waiting."""
    from phalanx_runtime.env import ENV_EXPORT_MAX_SHARD_BYTES

    if ckpt.last is None:
        return None
    max_bytes = int(os.environ.get(ENV_EXPORT_MAX_SHARD_BYTES) or DEFAULT_MAX_SHARD_BYTES)
    final, error, done = ckpt.dir / "final", None, False
    try:
        export = load_export(ckpt.last["path"], max_shard_bytes=max_bytes)
        done = _read_marker(final / EXPORT_MARKER) == export_marker(export) and (final / "hf").is_dir()
    except Exception as exc:  # noqa: BLE001 — every rank must hear of it
        error = exc
    _raise_if_any(error, ckpt.pg)
    if _agree(not done, ckpt.pg):  # a rank that does not find it complete makes every rank export
        _write_final(export, final, ckpt.rank, ckpt.world, ckpt.pg)
    elif ckpt.rank == 0:
        log.info("%s already holds the export of %s", final, export.step_dir.name)
    return final / "hf"
