"""The runtime's own config: the part of a TrainingJob a pod trains from, read from the JSON the
operator mounts at ``$PHALANX_CONFIG`` (render/configmap.py: ``apiVersion``, ``metadata``, ``spec``
with every default filled in). Torch-free, and free of the operator package: a typed model of the
fields the runtime reads (model, parallel layout, training, data, checkpoint, job identity), their
wire names camelCase as in the TrainingJob. Fields the runtime does not read are ignored.

The defaults are the TrainingJob's, for configs written by hand (tests, Slurm): a config the
operator rendered carries every value (tests/unit/phalanx_runtime/test_config.py holds the two equal).
Which layouts can run is ``phalanx_common.layout`` (shared with the operator's validator); the
mesh built from it is ``distributed/parallel_dims.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from phalanx_common.contract import ENV_CONFIG_PATH, RUNTIME_CONFIG_DIR, RUNTIME_CONFIG_FILE
from phalanx_common.hf_config import pretrained_path, read_hf_config, shape_from_hf_config
from phalanx_common.layout import Layout, layout_of, model_shape
from phalanx_common.presets import OVERRIDE_KEYS, ModelShape

WIRE = "wire"  # field metadata: the wire name where it is not the camelCase of the attribute


@dataclass(frozen=True)
class ParameterServer:
    servers: int = 1
    mode: str = "sync"
    staleness: int = 0


@dataclass(frozen=True)
class Parallelism:
    data: int | None = None
    zero: int = 0
    replicate: int = 1
    cpu_offload: bool = False
    tensor: int = 1
    sequence_parallel: bool = False
    pipeline: int = 1
    pipeline_schedule: str = "1F1B"
    microbatches: int = 1
    virtual_stages: int = 1
    parameter_server: ParameterServer | None = None


@dataclass(frozen=True)
class ModelOverrides:
    dim: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    vocab_size: int | None = None
    ffn_hidden: int | None = None
    max_seq_len: int | None = None
    tie_embeddings: bool | None = None
    rope_theta: float | None = None
    norm_eps: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The overrides set, under their wire names (``phalanx_common.presets.resolve_shape``)."""
        return {key: getattr(self, attr) for key, attr in OVERRIDE_KEYS.items() if getattr(self, attr) is not None}


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Pretrained:
    """A Hugging Face model directory (config.json, safetensors shards, tokenizer files)."""

    path: str = ""


@dataclass(frozen=True)
class Lora:
    """Low-rank adapters on the named projections (Hugging Face / PEFT module names)."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[str, ...] = LORA_TARGETS


@dataclass(frozen=True)
class ModelSpec:
    preset: str | None = None
    overrides: ModelOverrides = field(default_factory=ModelOverrides)
    entrypoint: str | None = None
    pretrained: Pretrained | None = None
    lora: Lora | None = None


@dataclass(frozen=True)
class DataPrepare:
    """Raw files turned into a prepared directory (``data.path``) before training, once."""

    inputs: tuple[str, ...] = ()
    format: str | None = None  # jsonl | parquet | text | arrow; None: from the file names
    text_field: str = "text"
    messages_field: str | None = None  # chat data: a list of {role, content}; loss on the answers only
    tokenizer: str | None = None  # a directory with tokenizer.json; default: model.pretrained.path
    eval_fraction: float = 0.0
    eval_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataSpec:
    source: str = "synthetic"
    path: str | None = None
    dtype: str = "uint16"
    seq_len: int = 256
    prepare: DataPrepare | None = None


@dataclass(frozen=True)
class LrSchedule:
    warmup_steps: int = 0
    decay: str = "cosine"
    min_lr_ratio: float = 0.1


@dataclass(frozen=True)
class EvalSpec:
    """Held-out evaluation: ``batches`` global batches of the eval split every ``every_steps`` steps
    (0: only at the end) and at the end."""

    every_steps: int = 0
    batches: int = 4


@dataclass(frozen=True)
class TrainingSpec:
    steps: int = 100
    global_batch_size: int = 8
    micro_batch_size: int = 1
    lr: float = 3e-4
    weight_decay: float = 0.1
    lr_schedule: LrSchedule = field(default_factory=LrSchedule)
    precision: str = "bf16"
    activation_checkpointing: str = "none"
    grad_clip: float = 1.0
    grad_compression: str = "none"
    seed: int = 1234
    log_every: int = 1
    eval: EvalSpec | None = None


@dataclass(frozen=True)
class LocalTierSpec:
    enabled: bool = True


@dataclass(frozen=True)
class StorageSpec:
    """checkpoint.storage as the runtime reads it: whether saves go through the pod-local tier
    (where the bucket is comes as ``$PHALANX_CHECKPOINT_URI``, the credentials as the SDKs' env)."""

    local_tier: LocalTierSpec = field(default_factory=LocalTierSpec)


@dataclass(frozen=True)
class CheckpointSpec:
    """Where checkpoints go is ``$PHALANX_CHECKPOINT_URI`` (checkpoint.storage) or
    ``$PHALANX_CHECKPOINT_DIR`` (the volume's mount in a pod)."""

    interval_steps: int = 0
    keep_last: int = 3
    async_save: bool = field(default=True, metadata={WIRE: "async"})
    resume: bool = True
    export_consolidated: bool = False
    export_hugging_face: bool = False
    storage: StorageSpec | None = None


@dataclass(frozen=True)
class FailurePolicySpec:
    """The part of ``failurePolicy`` the runtime acts on: the pre-flight check (preflight.py)."""

    preflight: bool = False
    preflight_timeout_seconds: int = 60


@dataclass(frozen=True)
class Resources:
    gpus: int = 0


@dataclass(frozen=True)
class JobSpec:
    """The spec as the runtime reads it: a command job runs ``command`` (the runtime's launcher
    only wraps it); a built-in job trains ``model``."""

    command: tuple[str, ...] | None = None
    nodes: int = 1
    procs_per_node: int = 1
    resources: Resources = field(default_factory=Resources)
    parallelism: Parallelism = field(default_factory=Parallelism)
    model: ModelSpec | None = None
    data: DataSpec = field(default_factory=DataSpec)
    training: TrainingSpec = field(default_factory=TrainingSpec)
    checkpoint: CheckpointSpec = field(default_factory=CheckpointSpec)
    failure_policy: FailurePolicySpec = field(default_factory=FailurePolicySpec)

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def data_degree(self) -> int:
        p = self.parallelism
        if p.parameter_server is not None:
            return self.world_size - p.parameter_server.servers  # the workers
        return p.data if p.data is not None else self.world_size // (p.tensor * p.pipeline)


def wire_name(attr: dataclasses.Field) -> str:
    head, *rest = attr.name.split("_")
    return attr.metadata.get(WIRE, head + "".join(word.capitalize() for word in rest))


def dataclass_of(hint: Any) -> type | None:
    """The dataclass a field holds (``X`` or ``X | None``), or None for a plain value."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return next((t for t in options if dataclasses.is_dataclass(t)), None)


def from_wire(cls: type, doc: dict[str, Any]):
    """An instance of the dataclass ``cls`` from its camelCase JSON: nested dataclasses built the
    same way, lists as tuples, absent or null fields left at their defaults, unknown keys ignored."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for attr in dataclasses.fields(cls):
        value = doc.get(wire_name(attr))
        if value is None:
            continue
        nested = dataclass_of(hints[attr.name])
        if nested is not None:
            value = from_wire(nested, value)
        elif isinstance(value, list):
            value = tuple(value)
        values[attr.name] = value
    return cls(**values)


@dataclass(frozen=True)
class RuntimeConfig:
    """What the workers need: the spec plus job identity."""

    spec: JobSpec
    name: str = "job"
    namespace: str = "default"

    @property
    def layout(self) -> Layout:
        return layout_of(self.spec)

    @cached_property
    def shape(self) -> ModelShape | None:
        """The built-in transformer's shape: from ``model.pretrained.path``'s config.json (read
        once: the spec is frozen), else the preset with its overrides; None for an entrypoint model."""
        path = pretrained_path(self.spec)
        if path is not None:
            return shape_from_hf_config(read_hf_config(path))
        return model_shape(self.spec)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RuntimeConfig:
        meta = doc.get("metadata") or {}
        return cls(spec=from_wire(JobSpec, doc["spec"]), name=meta.get("name", "job"),
                   namespace=meta.get("namespace", "default"))


def default_config_path() -> str:
    return os.environ.get(ENV_CONFIG_PATH, f"{RUNTIME_CONFIG_DIR}/{RUNTIME_CONFIG_FILE}")


def load_config(path: str | os.PathLike | None = None) -> RuntimeConfig:
    path = Path(path or default_config_path())
    return RuntimeConfig.from_dict(json.loads(path.read_text()))
