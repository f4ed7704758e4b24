"""Fine-tuning fields of the built-in runtime (docs/pretrained.md): a Hugging Face model directory
to start from (``model.pretrained``), low-rank adapters (``model.lora``), raw files prepared into
a token directory (``data.prepare``), held-out evaluation (``training.eval``) and the Hugging Face
export of the final checkpoint (``checkpoint.exportHuggingFace``).

The models here are the wire form of ``phalanx_runtime.config``'s Pretrained, Lora, DataPrepare
and EvalSpec (same names, same defaults; tests/unit/phalanx_runtime/test_config.py holds them
equal). ``FINETUNE_RULES`` are rules of the whole spec, each with its CEL twin (``self`` is the
spec); api/types.py adds them to the spec's checks. This module imports no other API model
(api/types.py imports it): values compare as strings (the enums are StrEnums).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from phalanx.api import patterns
from phalanx.api.base import Model, bounded_str
from phalanx.api.rules import Rule

MAX_INPUTS = 256
MAX_PATH = 4096
MAX_INPUT_PATH = 1024  # an input list's paths: 256 of them stay cheap for the CRD's CEL equality checks
MAX_FIELD_NAME = 256
MAX_EVAL_FRACTION = 0.5

InputPath = Annotated[str, bounded_str(patterns.ABSOLUTE_PATH, MAX_INPUT_PATH)]


class LoraTarget(StrEnum):
    """The projections adapters can wrap, by their Hugging Face / PEFT module names."""

    Q_PROJ = "q_proj"
    K_PROJ = "k_proj"
    V_PROJ = "v_proj"
    O_PROJ = "o_proj"
    GATE_PROJ = "gate_proj"
    UP_PROJ = "up_proj"
    DOWN_PROJ = "down_proj"


class DataFormat(StrEnum):
    JSONL = "jsonl"
    PARQUET = "parquet"
    TEXT = "text"
    ARROW = "arrow"  # a Hugging Face `datasets` directory written by save_to_disk


class Pretrained(Model):
    """A Hugging Face model directory inside the pod: config.json, the safetensors shards (with
    model.safetensors.index.json when sharded) and the tokenizer files."""

    path: str = bounded_str(patterns.ABSOLUTE_PATH, MAX_PATH, description=(
        "The model directory, an absolute path in the pod: on a volume of spec.volumes mounted by "
        "spec.volumeMounts, on the checkpoint volume, or in the image. Its config.json gives the "
        "model's shape (Llama, Mistral, Qwen2 and Qwen3 families)."))


class Lora(Model):
    """Low-rank adapters on the named projections: only they train, the base model stays frozen."""

    rank: int = Field(8, ge=1, le=1024, description="The adapters' rank r.")
    alpha: float = Field(16.0, gt=0.0, le=1e6, description="Scaling: an adapter's update is multiplied by alpha / rank.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input while training.")
    targets: list[LoraTarget] = Field(
        default_factory=lambda: list(LoraTarget), min_length=1, max_length=len(LoraTarget),
        description="The projections that get adapters (Hugging Face module names), each at most once.",
        json_schema_extra={"x-kubernetes-list-type": "set"})

    @field_validator("targets")
    @classmethod
    def _unique_targets(cls, v: list[str]) -> list[str]:
        repeated = sorted({t for t in v if v.count(t) > 1})
        if repeated:
            raise ValueError(f"duplicate target {repeated[0]!r}: each projection at most once")
        return v


class DataPrepare(Model):
    """Raw files tokenized with the model's tokenizer, packed and written to data.path before
    training (what `phalanx data prepare` does offline); nothing to do when data.path holds the
    same preparation already."""

    inputs: list[InputPath] = Field(
        ..., min_length=1, max_length=MAX_INPUTS,
        description="Files or directories to prepare (absolute paths in the pod; a text file is one document).")
    format: DataFormat | None = Field(
        None, description="jsonl | parquet | text | arrow (a `datasets` save_to_disk directory); default: from the file names.")
    text_field: str = Field("text", min_length=1, max_length=MAX_FIELD_NAME,
                            description="The field holding a record's text (jsonl, parquet, arrow).")
    messages_field: str | None = Field(
        None, min_length=1, max_length=MAX_FIELD_NAME,
        description="Chat data: the field holding a record's list of {role, content} messages, rendered with the "
        "tokenizer's chat template; the loss counts the assistant's tokens only.")
    tokenizer: str | None = bounded_str(patterns.ABSOLUTE_PATH, MAX_PATH, default=None, description=(
        "A directory with tokenizer.json (absolute path in the pod). Default: model.pretrained.path."))
    eval_fraction: float = Field(0.0, ge=0.0, le=MAX_EVAL_FRACTION, description=(
        "Share of the inputs' documents held out as the eval split (training.eval), chosen by a hash of each "
        "document's content."))
    eval_inputs: list[InputPath] = Field(
        default_factory=list, max_length=MAX_INPUTS,
        description="Files or directories whose documents all go to the eval split.")


class EvalSpec(Model):
    """Held-out evaluation: eval_loss and perplexity in the job's metrics (status.metrics)."""

    every_steps: int = Field(0, ge=0, le=1 << 31, description="Evaluate every N steps; 0: only at the end (always at the end).")
    batches: int = Field(4, ge=1, le=10000, description="Global batches of the eval split per evaluation.")


# --- Rules of the whole spec ------------------------------------------------------------------
# Built-in runtime only ("!has(self.model) || "): a command job's script reads none of these.
_RUNTIME = "!has(self.model) || "
_PS = "!has(self.parallelism.parameterServer) || "
_EXPORT = "!self.checkpoint.exportHuggingFace || "
_EVAL = "!has(self.training.eval) || "
_PREPARE = "!has(self.data.prepare) || "


def _runtime(holds):
    return lambda s: s.model is None or holds(s)


def _ps(holds):
    return lambda s: s.parallelism.parameter_server is None or holds(s)


def _has(obj, attr: str) -> bool:
    return obj is not None and getattr(obj, attr) is not None


def _outside(path: str | None, inputs: list[str]) -> bool:
    """``path`` is none of ``inputs`` and in none of them (as strings: what the CEL can compare)."""
    return path is None or all(path != i and not path.startswith(i if i.endswith("/") else i + "/") for i in inputs)


_OUTSIDE = "(i, self.data.path != i && !self.data.path.startsWith(i.endsWith('/') ? i : i + '/'))"


def _eval_split_made(s) -> bool:
    """training.eval with data.prepare: the preparation writes an eval split."""
    p = s.data.prepare
    return p is None or p.eval_fraction > 0 or bool(p.eval_inputs)


FINETUNE_RULES = (
    Rule(_RUNTIME + "!has(self.model.lora) || !has(self.model.entrypoint)",
         "model.lora adds adapters to the built-in transformer: set model.preset or model.pretrained, not model.entrypoint",
         _runtime(lambda s: s.model.lora is None or s.model.entrypoint is None), ".model.lora"),
    Rule(_RUNTIME + "self.data.source != 'prepared' || has(self.data.path)",
         "data.path is required when source is prepared (the prepared directory; data.prepare writes it)",
         _runtime(lambda s: s.data.source != "prepared" or s.data.path is not None), ".data.path"),
    Rule(_RUNTIME + _PREPARE + "self.data.source == 'prepared'",
         "data.prepare needs data.source prepared (it writes the prepared directory at data.path that training reads)",
         _runtime(lambda s: s.data.prepare is None or s.data.source == "prepared"), ".data.prepare"),
    Rule(_RUNTIME + _PREPARE + "has(self.data.prepare.tokenizer) || has(self.model.pretrained)",
         "data.prepare.tokenizer is required unless model.pretrained is set (then the model directory's tokenizer is the default)",
         _runtime(lambda s: s.data.prepare is None or s.data.prepare.tokenizer is not None or s.model.pretrained is not None),
         ".data.prepare.tokenizer"),
    Rule(_RUNTIME + _PREPARE + "!has(self.data.prepare.messagesField) || !has(self.data.prepare.format) || "
         "self.data.prepare.format != 'text'",
         "data.prepare.messagesField needs records with fields: format jsonl, parquet or arrow (a text file is one "
         "document with no fields)",
         _runtime(lambda s: s.data.prepare is None or s.data.prepare.messages_field is None
                  or s.data.prepare.format != "text"), ".data.prepare.messagesField"),
    Rule(_RUNTIME + _PREPARE + "!has(self.data.path) || (self.data.prepare.inputs.all" + _OUTSIDE + " && "
         "(!has(self.data.prepare.evalInputs) || self.data.prepare.evalInputs.all" + _OUTSIDE + "))",
         "data.path must be outside data.prepare.inputs and evalInputs (a directory input is read recursively: "
         "the prepared files would become inputs)",
         _runtime(lambda s: s.data.prepare is None or _outside(s.data.path, [*s.data.prepare.inputs,
                                                                            *s.data.prepare.eval_inputs])),
         ".data.path"),
    Rule(_RUNTIME + _EVAL + "self.data.source != 'tokens'",
         "training.eval needs a held-out split: data.source prepared (its eval split), synthetic or corpus "
         "(the samples after the training ones); a tokens file has none",
         _runtime(lambda s: s.training.eval is None or s.data.source != "tokens"), ".training.eval"),
    Rule(_RUNTIME + _EVAL + _PREPARE + "self.data.prepare.evalFraction > 0.0 || "
         "(has(self.data.prepare.evalInputs) && size(self.data.prepare.evalInputs) > 0)",
         "training.eval: data.prepare writes no eval split; set data.prepare.evalFraction (> 0) or data.prepare.evalInputs",
         _runtime(lambda s: s.training.eval is None or _eval_split_made(s)), ".training.eval"),
    Rule(_EXPORT + "(has(self.model) && !has(self.model.entrypoint))",
         "checkpoint.exportHuggingFace writes the built-in transformer as a Hugging Face directory: set model.preset "
         "or model.pretrained (not model.entrypoint, not a command job)",
         lambda s: not s.checkpoint.export_hugging_face or (s.model is not None and s.model.entrypoint is None),
         ".checkpoint.exportHuggingFace"),
    # The parameter servers build, hold and checkpoint the model their own way (phalanx_runtime.ps).
    Rule(_PS + "!has(self.model) || !has(self.model.lora)",
         "parallelism.parameterServer: model.lora is not supported (the servers update every parameter)",
         _ps(lambda s: not _has(s.model, "lora")), ".model.lora"),
    Rule(_PS + "!has(self.model) || !has(self.model.pretrained)",
         "parallelism.parameterServer: model.pretrained is not supported (the servers build a preset's parameters)",
         _ps(lambda s: not _has(s.model, "pretrained")), ".model.pretrained"),
    Rule(_PS + "!has(self.training.eval)",
         "parallelism.parameterServer: training.eval is not supported (the workers run no evaluation)",
         _ps(lambda s: s.training.eval is None), ".training.eval"),
    Rule(_PS + "!self.checkpoint.exportHuggingFace",
         "parallelism.parameterServer: checkpoint.exportHuggingFace is not supported (the servers' checkpoints "
         "are sharded by rows)",
         _ps(lambda s: not s.checkpoint.export_hugging_face), ".checkpoint.exportHuggingFace"),
)
