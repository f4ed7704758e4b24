"""A Hugging Face model directory's ``config.json`` → the built-in transformer's shape, and every
reason a job cannot train it (pure, standard library only: the operator's validator and the
runtime's launcher both check a job with it).

The decoder families the built-in transformer expresses exactly (transformers 5's
``modeling_llama`` / ``_mistral`` / ``_qwen2`` / ``_qwen3``): RMSNorm, SwiGLU, GQA, RoPE over halves
of a head (``rotate_half``) with default, linear or llama3 frequency scaling, optional biases on
the attention projections (Qwen2: q/k/v; Llama and Qwen3 ``attention_bias``: q/k/v/o), RMSNorm on
each query and key head (Qwen3), an explicit ``head_dim``, tied embeddings. Sliding-window attention
is refused where it would mask anything within a training sequence.

Messages read ``"<field>: <rule>"`` like ``phalanx_common.layout``'s; config.json's own keys are
named as they are spelled there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from phalanx_common.presets import ModelShape

FIELD = "model.pretrained.path"
CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 2**20  # a config.json is a few KiB
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
ROPE_TYPES = ("default", "linear", "llama3")
# Keys a rope type needs besides rope_type and rope_theta (llama3's original context defaults to
# max_position_embeddings, as in transformers).
ROPE_REQUIRED: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
}
REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
# transformers' defaults for keys a config.json may leave out, per family.
MAX_POSITIONS_DEFAULT = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768, "qwen3": 32768}
MISTRAL_SLIDING_WINDOW_DEFAULT = 4096
QWEN3_HEAD_DIM_DEFAULT = 128
RMS_NORM_EPS_DEFAULT = 1e-6
ROPE_THETA_DEFAULT = 10000.0
MULTI_STAGE_SCHEDULES = ("Interleaved1F1B", "ZBVZeroBubble")
ROPE_FACTORS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _positive_int(value: Any) -> bool:
    return type(value) is int and value > 0  # type(): true is no count


def _positive_number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_list_of_text(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


# Optional keys the shape or a check reads: (valid, the rule a message states).
OPTIONAL_KEYS: dict[str, tuple[Any, str]] = {
    "num_key_value_heads": (_positive_int, "a positive integer"),
    "head_dim": (_positive_int, "a positive integer"),
    "max_position_embeddings": (_positive_int, "a positive integer"),
    "rms_norm_eps": (_positive_number, "a positive number"),
    "rope_theta": (_positive_number, "a positive number"),
    "partial_rotary_factor": (_positive_number, "a positive number"),
    "tie_word_embeddings": (_is_bool, "true or false"),
    "attention_bias": (_is_bool, "true or false"),
    "mlp_bias": (_is_bool, "true or false"),
    "use_sliding_window": (_is_bool, "true or false"),
    "sliding_window": (_positive_int, "a positive integer"),
    "max_window_layers": (_is_count, "a non-negative integer"),
    "layer_types": (_is_list_of_text, "a list of strings"),
    "architectures": (_is_list_of_text, "a list of strings"),
    "model_type": (_is_text, "a string"),
    "hidden_act": (_is_text, "a string"),
    "rope_parameters": (lambda v: isinstance(v, dict), "an object"),
    "rope_scaling": (lambda v: isinstance(v, dict), "an object"),
}


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` of a model directory (or the file itself). Raises ValueError
    naming the field and the file when it cannot be read."""
    file = Path(path)
    if file.suffix != ".json":
        file = file / CONFIG_FILE
    try:
        with open(file, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ValueError(f"larger than {MAX_CONFIG_BYTES} bytes; not a model config")
        doc = json.loads(data)
    except (OSError, ValueError) as e:
        raise ValueError(f"{FIELD}: cannot read {file}: {type(e).__name__}: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{FIELD}: {file} is not a JSON object")
    return doc


def family_of(doc: dict[str, Any]) -> str | None:
    """llama | mistral | qwen2 | qwen3 from ``architectures`` (else ``model_type``); None if unknown."""
    archs = doc.get("architectures") or []
    if archs:
        return ARCHITECTURES.get(archs[0])
    model_type = doc.get("model_type")
    return model_type if model_type in ARCHITECTURES.values() else None


def rope_parameters(doc: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the key it came from, the RoPE parameters): transformers 5 writes ``rope_parameters``
    (rope_theta inside), older configs ``rope_scaling`` (``type`` or ``rope_type``) beside a
    top-level ``rope_theta``."""
    key = "rope_parameters" if doc.get("rope_parameters") else "rope_scaling"
    params = dict(doc.get(key) or {})
    if "type" in params:
        params.setdefault("rope_type", params.pop("type"))
    params.setdefault("rope_type", "default")
    if params.get("rope_theta") is None:
        params["rope_theta"] = doc.get("rope_theta") or ROPE_THETA_DEFAULT
    return key, params


def head_dim_of(doc: dict[str, Any], family: str | None) -> int:
    default = QWEN3_HEAD_DIM_DEFAULT if family == "qwen3" else doc["hidden_size"] // doc["num_attention_heads"]
    return int(doc.get("head_dim") or default)


def sliding_window_in_use(doc: dict[str, Any], family: str | None) -> int | None:
    """The attention window some layer applies, or None when every layer attends to all tokens."""
    if family == "mistral":
        return doc.get("sliding_window", MISTRAL_SLIDING_WINDOW_DEFAULT)
    if family not in ("qwen2", "qwen3") or not doc.get("use_sliding_window"):
        return None
    window = doc.get("sliding_window")
    layers = doc.get("layer_types") or [
        "sliding_attention" if i >= doc.get("max_window_layers", 28) else "full_attention"
        for i in range(doc["num_hidden_layers"])]
    return window if window is not None and "sliding_attention" in layers else None


def _architecture_errors(doc: dict[str, Any]) -> list[str]:
    archs = doc.get("architectures") or []
    if archs and archs[0] not in ARCHITECTURES:
        return [f"{FIELD}: {CONFIG_FILE} architectures {archs[0]!r} is not supported "
                f"(supported: {', '.join(ARCHITECTURES)})"]
    if not archs and family_of(doc) is None:
        return [f"{FIELD}: {CONFIG_FILE} model_type {doc.get('model_type')!r} is not supported "
                f"(supported: {', '.join(ARCHITECTURES.values())})"]
    return []


def _rope_errors(doc: dict[str, Any]) -> list[str]:
    key, params = rope_parameters(doc)
    rope_type = params["rope_type"]
    if any(isinstance(value, dict) for value in params.values()):
        return [f"{FIELD}: {CONFIG_FILE} {key} per layer type is not supported (one RoPE for every layer)"]
    if rope_type not in ROPE_TYPES:
        return [f"{FIELD}: {CONFIG_FILE} {key}.rope_type {rope_type!r} is not supported "
                f"(supported: {', '.join(ROPE_TYPES)})"]
    errors = [f"{FIELD}: {CONFIG_FILE} {key}.{name} is required by rope_type {rope_type!r}"
              for name in ROPE_REQUIRED[rope_type] if params.get(name) is None]
    partial = params.get("partial_rotary_factor", doc.get("partial_rotary_factor"))
    if partial not in (None, 1, 1.0):
        errors.append(f"{FIELD}: {CONFIG_FILE} partial_rotary_factor {partial} is not supported "
                      "(RoPE over the whole head only)")
    return errors


def _value_errors(doc: dict[str, Any]) -> list[str]:
    """Every key the shape is read from, of the type and range it must have (an optional key may
    be absent or null: transformers' default applies), so that nothing after this raises."""
    errors = [f"{FIELD}: {CONFIG_FILE} has no positive integer {key}" for key in REQUIRED_KEYS
              if not _positive_int(doc.get(key))]
    for key, (valid, rule) in OPTIONAL_KEYS.items():
        if doc.get(key) is not None and not valid(doc[key]):
            errors.append(f"{FIELD}: {CONFIG_FILE} {key} {json.dumps(doc[key])[:60]} must be {rule}")
    for key in ("rope_parameters", "rope_scaling"):
        params = doc.get(key)
        if not isinstance(params, dict):
            continue
        for name in ("rope_theta", *ROPE_FACTORS):
            value = params.get(name)
            if value is not None and not isinstance(value, dict) and not _positive_number(value):
                errors.append(f"{FIELD}: {CONFIG_FILE} {key}.{name} {json.dumps(value)[:60]} must be a positive number")
    return errors


def config_errors(doc: dict[str, Any]) -> list[str]:
    """Every reason the built-in transformer cannot express this config (whatever the layout)."""
    errors = _value_errors(doc)
    if errors:
        return errors
    errors = _architecture_errors(doc)
    family = family_of(doc)
    act = doc.get("hidden_act", "silu")
    if act != "silu":
        errors.append(f"{FIELD}: {CONFIG_FILE} hidden_act {act!r} is not supported (SwiGLU with silu only)")
    if doc.get("mlp_bias"):
        errors.append(f"{FIELD}: {CONFIG_FILE} mlp_bias true is not supported (MLP projections without biases only)")
    heads = doc["num_attention_heads"]
    kv_heads = doc.get("num_key_value_heads") or heads
    if heads % kv_heads != 0:
        errors.append(f"{FIELD}: {CONFIG_FILE} num_attention_heads {heads} is not a multiple of "
                      f"num_key_value_heads {kv_heads}")
    head_dim = head_dim_of(doc, family)
    if head_dim % 2 != 0:
        errors.append(f"{FIELD}: {CONFIG_FILE} head dimension {head_dim} must be even (RoPE rotates halves of a head)")
    return errors + _rope_errors(doc)


def shape_from_hf_config(doc: dict[str, Any]) -> ModelShape:
    """The shape of the built-in transformer that computes what transformers computes with this
    config. Raises ValueError (every reason, one per line) for a config it cannot express."""
    errors = config_errors(doc)
    if errors:
        raise ValueError("\n".join(errors))
    family = family_of(doc)
    heads, dim = doc["num_attention_heads"], doc["hidden_size"]
    head_dim = head_dim_of(doc, family)
    attention_bias = bool(doc.get("attention_bias", False)) and family != "mistral"
    max_positions = doc.get("max_position_embeddings") or MAX_POSITIONS_DEFAULT[family]
    return ModelShape(
        dim=dim, n_layers=doc["num_hidden_layers"], n_heads=heads,
        n_kv_heads=doc.get("num_key_value_heads") or heads, vocab_size=doc["vocab_size"],
        ffn_hidden=doc["intermediate_size"], max_seq_len=max_positions,
        tie_embeddings=bool(doc.get("tie_word_embeddings", False)),
        rope_theta=float(rope_parameters(doc)[1]["rope_theta"]),
        norm_eps=float(doc.get("rms_norm_eps") or RMS_NORM_EPS_DEFAULT),
        head_dim_override=None if dim % heads == 0 and head_dim == dim // heads else head_dim,
        qkv_bias=family == "qwen2" or attention_bias, o_bias=family != "qwen2" and attention_bias,
        qk_norm=family == "qwen3", rope_style="half", rope_scaling=rope_scaling_items(doc, max_positions),
        family=family)


def rope_scaling_items(doc: dict[str, Any], max_positions: int) -> tuple[tuple[str, float | str], ...]:
    """``ModelShape.rope_scaling``: the sorted RoPE parameters but rope_theta; () for default RoPE."""
    params = rope_parameters(doc)[1]
    if params["rope_type"] == "default":
        return ()
    if params["rope_type"] == "llama3":
        params.setdefault("original_max_position_embeddings", max_positions)
    return tuple(sorted((name, value) for name, value in params.items()
                        if name not in ("rope_theta", "partial_rotary_factor") and value is not None))


def check_hf_config(doc: dict[str, Any], spec: Any) -> list[str]:
    """Every reason ``spec`` (a TrainingJob's spec or the runtime's JobSpec) cannot train the model
    this config describes, as ``"<field>: <rule>"`` messages (empty = fine)."""
    errors = config_errors(doc)
    if errors:
        return errors
    family = family_of(doc)
    p = spec.parallelism
    tp, pp, seq_len = p.tensor, p.pipeline, spec.data.seq_len
    heads = doc["num_attention_heads"]
    sizes = (("num_attention_heads", heads), ("num_key_value_heads", doc.get("num_key_value_heads") or heads),
             ("intermediate_size", doc["intermediate_size"]), ("vocab_size", doc["vocab_size"]))
    errors += [f"parallelism.tensor: tensor {tp} does not divide {CONFIG_FILE} {name} {size} ({FIELD})"
               for name, size in sizes if size % tp != 0]
    stages = pp * (p.virtual_stages if p.pipeline_schedule in MULTI_STAGE_SCHEDULES else 1)
    layers = doc["num_hidden_layers"]
    if stages > layers:
        errors.append(f"parallelism.pipeline: {CONFIG_FILE} num_hidden_layers {layers} cannot split into "
                      f"{stages} pipeline stages; each stage needs at least one layer")
    if pp > 1 and doc.get("tie_word_embeddings", False):
        errors.append(f"parallelism.pipeline: {CONFIG_FILE} tie_word_embeddings true: tied embeddings cannot "
                      "be split across pipeline stages (pipeline must be 1)")
    max_positions = doc.get("max_position_embeddings") or MAX_POSITIONS_DEFAULT[family]
    if seq_len > max_positions:
        errors.append(f"data.seqLen: {seq_len} exceeds {CONFIG_FILE} max_position_embeddings {max_positions}")
    window = sliding_window_in_use(doc, family)
    if window is not None and window < seq_len:
        errors.append(f"{FIELD}: {CONFIG_FILE} sliding_window {window} is in use and shorter than data.seqLen "
                      f"{seq_len}; sliding-window attention is not supported (seqLen must be <= the window)")
    if p.sequence_parallel and tp > 1 and seq_len % tp != 0:
        errors.append(f"parallelism.sequenceParallel: seqLen {seq_len} is not divisible by tensor {tp}")
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
