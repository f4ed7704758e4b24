"""A Hugging Face model directory's config.json against a job's spec (pure but for reading the
file; standard library only): which architectures the built-in transformer expresses and whether
the spec's parallel layout splits the model. Messages are ``"<field>: <rule>"`` as
``phalanx_common.layout``'s are; the spec is the operator's TrainingJobSpec or the runtime's JobSpec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
PRETRAINED = "model.pretrained.path"


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The config.json of the model directory ``path`` (or the file itself); OSError or
    ValueError when it cannot be read as a JSON object."""
    path = Path(path)
    file = path / CONFIG_FILE if path.is_dir() else path
    doc = json.loads(file.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{file} holds {type(doc).__name__}, not a JSON object")
    return doc


def check_hf_config(doc: dict[str, Any], spec: Any) -> list[str]:
    """Every reason the model of config.json ``doc`` cannot train under ``spec`` (empty: fine)."""
    architectures = doc.get("architectures") or []
    supported = [a for a in architectures if a in ARCHITECTURES]
    if not supported:
        return [f"{PRETRAINED}: config.json architectures {architectures} is not supported "
                f"(the built-in transformer expresses {', '.join(ARCHITECTURES)})"]
    errors: list[str] = []
    p = spec.parallelism
    heads = doc.get("num_attention_heads")
    kv_heads = doc.get("num_key_value_heads") or heads
    for what, size in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if isinstance(size, int) and size % p.tensor != 0:
            errors.append(f"parallelism.tensor: tensor {p.tensor} does not divide the model's {what} {size} (config.json)")
    layers = doc.get("num_hidden_layers")
    if isinstance(layers, int) and p.pipeline > layers:
        errors.append(f"parallelism.pipeline: the model has {layers} layers (config.json) and cannot split into "
                      f"{p.pipeline} pipeline stages")
    positions = doc.get("max_position_embeddings")
    if isinstance(positions, int) and spec.data.seq_len > positions:
        errors.append(f"data.seqLen: {spec.data.seq_len} exceeds the model's max_position_embeddings {positions} (config.json)")
    return errors
