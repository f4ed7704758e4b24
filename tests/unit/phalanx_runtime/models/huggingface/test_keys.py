"""Our parameter names ↔ Hugging Face's and PEFT's (models/huggingface/keys.py)."""

from __future__ import annotations

import pytest

from phalanx_runtime.models.huggingface.keys import (
    LAYER_MODULES,
    from_hf,
    from_peft,
    to_hf,
    to_peft,
)

OURS = ["tok_embeddings.weight", "output.weight", "norm.weight"] + [
    f"layers.{layer}.{module}.{kind}" for layer in (0, 11) for module in LAYER_MODULES for kind in ("weight", "bias")]
LORA = [f"layers.{layer}.{module}.lora_{which}.weight" for layer in (0, 11)
        for module in ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
                       "feed_forward.w1", "feed_forward.w2", "feed_forward.w3") for which in ("a", "b")]


@pytest.mark.parametrize("name", OURS)
def test_hf_names_round_trip(name):
    assert from_hf(to_hf(name)) == name


@pytest.mark.parametrize("name", LORA)
def test_peft_names_round_trip(name):
    assert from_peft(to_peft(name)) == name


def test_peft_names_are_pefts():
    assert to_peft("layers.3.attention.wq.lora_a.weight") == "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"
    assert from_peft("base_model.model.model.layers.2.mlp.down_proj.lora_B.weight") == "layers.2.feed_forward.w2.lora_b.weight"


@pytest.mark.parametrize("name", ["base_model.model.model.layers.0.self_attn.q_proj.weight",
                                  "base_model.model.model.layers.0.self_attn.rotary.lora_A.weight",
                                  "model.layers.0.self_attn.q_proj.lora_A.weight"])
def test_what_is_no_peft_adapter_has_no_name(name):
    assert from_peft(name) is None
