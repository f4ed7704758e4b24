"""The Hugging Face config a checkpoint directory records for a model without one of its own
(``models/huggingface/provenance.hf_config_for_shape``): every field of the shape is in it, so
``shape_from_hf_config`` reads the same shape back (with RoPE in halves, as the export writes the
weights); a shape its family's model cannot have is refused."""

from __future__ import annotations

from dataclasses import replace

import pytest

from phalanx_common.hf_config import shape_from_hf_config
from phalanx_common.presets import PRESETS, ModelShape
from phalanx_runtime.models.huggingface.provenance import hf_config_for_shape, model_record

BASE = ModelShape(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, ffn_hidden=128, max_seq_len=128)
LLAMA3 = (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
          ("original_max_position_embeddings", 64), ("rope_type", "llama3"))

ROUND_TRIPS = {
    # id: shape
    "preset_1b": PRESETS["1b"],
    "preset_debug": PRESETS["debug"],
    "llama_biases_llama3_rope": replace(BASE, qkv_bias=True, o_bias=True, rope_scaling=LLAMA3, rope_theta=5e5),
    "llama_linear_rope": replace(BASE, rope_scaling=(("factor", 2.0), ("rope_type", "linear"))),
    "mistral": replace(BASE, family="mistral", norm_eps=1e-6),
    "qwen2_tied": replace(BASE, family="qwen2", qkv_bias=True, tie_embeddings=True),
    "qwen3_head_dim": replace(BASE, family="qwen3", qk_norm=True, head_dim_override=32),
    "qwen3_biases": replace(BASE, family="qwen3", qk_norm=True, qkv_bias=True, o_bias=True),
}


@pytest.mark.parametrize("shape", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_synthesized_config_gives_the_shape_back(shape):
    assert shape_from_hf_config(hf_config_for_shape(shape)) == replace(shape, rope_style="half")


@pytest.mark.parametrize(("family", "qkv_bias", "o_bias", "attention_bias"), [
    ("llama", False, False, False),
    ("llama", True, True, True),
    ("qwen3", True, True, True),
])
def test_attention_bias_is_written_where_the_family_reads_it(family, qkv_bias, o_bias, attention_bias):
    shape = replace(BASE, family=family, qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=family == "qwen3")
    assert hf_config_for_shape(shape)["attention_bias"] is attention_bias


REFUSED = {
    # id: (shape, message)
    "llama_qkv_without_o": (replace(BASE, qkv_bias=True), "a llama model cannot have qkv_bias True, o_bias False"),
    "llama_qk_norm": (replace(BASE, qk_norm=True), "qk_norm True"),
    "mistral_biases": (replace(BASE, family="mistral", qkv_bias=True, o_bias=True), "a mistral model"),
    "qwen2_without_biases": (replace(BASE, family="qwen2"), "a qwen2 model"),
    "qwen3_without_norms": (replace(BASE, family="qwen3"), "a qwen3 model"),
    "unknown_family": (replace(BASE, family="gpt2"), "model family 'gpt2' has no Hugging Face architecture"),
}


@pytest.mark.parametrize(("shape", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_shape_the_family_cannot_have_is_refused(shape, message):
    with pytest.raises(ValueError, match=message):
        hf_config_for_shape(shape)


def test_record_keeps_the_rope_layout_and_the_pretrained_directory():
    record = model_record(replace(BASE, rope_style="half"), pretrained="/models/base")
    assert (record["rope_style"], record["pretrained"], record["shape"]["head_dim"]) == ("half", "/models/base", 16)
    assert model_record(PRESETS["debug"], preset="debug")["rope_style"] == "interleaved"
