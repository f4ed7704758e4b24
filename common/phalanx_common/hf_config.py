"""A Hugging Face model directory's ``config.json`` against a job's spec (pure, standard library
only): which architectures the built-in transformer expresses and whether the spec's parallel
layout splits the model. Messages read ``"<field>: <rule>"`` like ``phalanx_common.layout``'s;
config.json's own keys are named as they are spelled there. The spec is the operator's
TrainingJobSpec or the runtime's JobSpec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIELD = "model.pretrained.path"
CONFIG_FILE = "config.json"
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
MULTI_STAGE_SCHEDULES = ("Interleaved1F1B", "ZBVZeroBubble")


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` of a model directory (or the file itself). Raises ValueError
    naming the field and the file when it cannot be read."""
    file = Path(path)
    if file.suffix != ".json":
        file = file / CONFIG_FILE
    try:
        doc = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{FIELD}: cannot read {file}: {type(e).__name__}: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{FIELD}: {file} is not a JSON object")
    return doc


def check_hf_config(doc: dict[str, Any], spec: Any) -> list[str]:
    """Every reason ``spec`` cannot train the model this config describes (empty = fine)."""
    archs = doc.get("architectures") or []
    if not archs or archs[0] not in ARCHITECTURES:
        return [f"{FIELD}: {CONFIG_FILE} architectures {archs[0] if archs else None!r} is not supported "
                f"(supported: {', '.join(ARCHITECTURES)})"]
    p = spec.parallelism
    tp = p.tensor
    heads = doc.get("num_attention_heads")
    sizes = (("num_attention_heads", heads), ("num_key_value_heads", doc.get("num_key_value_heads") or heads))
    errors = [f"parallelism.tensor: tensor {tp} does not divide {CONFIG_FILE} {name} {size} ({FIELD})"
              for name, size in sizes if isinstance(size, int) and size % tp != 0]
    stages = p.pipeline * (p.virtual_stages if p.pipeline_schedule in MULTI_STAGE_SCHEDULES else 1)
    layers = doc.get("num_hidden_layers")
    if isinstance(layers, int) and stages > layers:
        errors.append(f"parallelism.pipeline: {CONFIG_FILE} num_hidden_layers {layers} cannot split into "
                      f"{stages} pipeline stages; each stage needs at least one layer")
    positions = doc.get("max_position_embeddings")
    if isinstance(positions, int) and spec.data.seq_len > positions:
        errors.append(f"data.seqLen: {spec.data.seq_len} exceeds {CONFIG_FILE} max_position_embeddings {positions}")
    return errors


def pretrained_path(spec: Any) -> str | None:
    """``model.pretrained.path`` of a spec, or None."""
    model = getattr(spec, "model", None)
    pretrained = getattr(model, "pretrained", None)
    return getattr(pretrained, "path", None) or None


def check_pretrained(spec: Any) -> list[str]:
    """:func:`check_hf_config` on the job's ``model.pretrained.path`` (read here); [] without one."""
    path = pretrained_path(spec)
    if path is None:
        return []
    try:
        doc = read_hf_config(path)
    except ValueError as e:
        return [str(e)]
    return check_hf_config(doc, spec)
