"""Parameter names of the built-in transformer ↔ Hugging Face's (Llama, Mistral, Qwen2, Qwen3:
one naming scheme) and PEFT's adapter names. Pure string maps: a name the other side does not
have maps to None (the caller decides whether that is an error)."""

from __future__ import annotations

import re

# Per-layer module paths: ours → Hugging Face's (under ``model.layers.<i>.``).
LAYER_MODULES: dict[str, str] = {
    "attention.wq": "self_attn.q_proj",
    "attention.wk": "self_attn.k_proj",
    "attention.wv": "self_attn.v_proj",
    "attention.wo": "self_attn.o_proj",
    "attention.q_norm": "self_attn.q_norm",
    "attention.k_norm": "self_attn.k_norm",
    "attention_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w2": "mlp.down_proj",
    "feed_forward.w3": "mlp.up_proj",
}
TOP_LEVEL: dict[str, str] = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# LoRA targets as PEFT names them (``target_modules``) → our module path in a layer.
LORA_TARGET_MODULES: dict[str, str] = {hf.split(".")[-1]: ours for ours, hf in LAYER_MODULES.items()
                                       if ours.split(".")[-1].startswith("w")}
PEFT_PREFIX = "base_model.model."
_OURS_LAYER = re.compile(r"^layers\.(\d+)\.(.+)\.(weight|bias)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_OURS_LORA = re.compile(r"^layers\.(\d+)\.(.+)\.lora_([ab])\.weight$")
_PEFT_LORA = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(.+)\.lora_([AB])\.weight$")
_HF_MODULES = {hf: ours for ours, hf in LAYER_MODULES.items()}
_TOP_HF = {hf: ours for ours, hf in TOP_LEVEL.items()}


def _rename(pattern: re.Pattern[str], modules: dict[str, str], name: str, out: str,
            last_case=str) -> str | None:
    """``name`` matched by ``pattern`` (layer, module, last part) with its module renamed through
    ``modules`` and its last part through ``last_case``, formatted by ``out``; None when it does not
    match or names no known module."""
    match = pattern.match(name)
    if not match or match.group(2) not in modules:
        return None
    layer, module, last = match.groups()
    return out.format(layer=layer, module=modules[module], last=last_case(last))


def to_hf(name: str) -> str | None:
    """``layers.3.attention.wq.weight`` → ``model.layers.3.self_attn.q_proj.weight``."""
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    return _rename(_OURS_LAYER, LAYER_MODULES, name, "model.layers.{layer}.{module}.{last}")


def from_hf(name: str) -> str | None:
    """The inverse of :func:`to_hf`."""
    if name in _TOP_HF:
        return _TOP_HF[name]
    return _rename(_HF_LAYER, _HF_MODULES, name, "layers.{layer}.{module}.{last}")


def to_peft(name: str) -> str | None:
    """``layers.3.attention.wq.lora_a.weight`` → PEFT's
    ``base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight``."""
    return _rename(_OURS_LORA, LAYER_MODULES, name, PEFT_PREFIX + "model.layers.{layer}.{module}.lora_{last}.weight",
                   str.upper)


def from_peft(name: str) -> str | None:
    """The inverse of :func:`to_peft`."""
    return _rename(_PEFT_LORA, _HF_MODULES, name, "layers.{layer}.{module}.lora_{last}.weight", str.lower)
