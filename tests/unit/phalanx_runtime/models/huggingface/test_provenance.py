"""The Hugging Face config a checkpoint directory records for a model without one of its own
(``models/huggingface/provenance.hf_config_for_shape``): every field of the shape is in it, so
``shape_from_hf_config`` reads the same shape back (with RoPE in halves, as the export writes the
weights); a shape its family's model cannot have is refused."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import pytest

from phalanx_common.hf_config import shape_from_hf_config
from phalanx_common.presets import PRESETS, ModelShape
from phalanx_runtime.models.huggingface.provenance import (
    MAX_JSON_BYTES,
    base_fingerprint,
    base_mismatch,
    copy_regular,
    hf_config_for_shape,
    model_record,
    read_json,
    read_model_dir,
    resumed_base_problems,
    write_model_dir,
)

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


# ---------------------------------------------------------------- what an export reads


def model_dir_with(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(hf_config_for_shape(BASE)))
    (d / "phalanx-model.json").write_text(json.dumps(model_record(BASE)))
    return d


def test_a_symlinked_file_in_the_model_record_is_refused_not_read(tmp_path):
    secret = tmp_path / "kubeconfig"
    secret.write_text("token: hunter2")
    d = model_dir_with(tmp_path)
    (d / "tokenizer.json").symlink_to(secret)
    with pytest.raises(ValueError, match="is a symlink"):
        copy_regular(d / "tokenizer.json", tmp_path / "copied")
    assert not (tmp_path / "copied").exists()
    (d / "config.json").unlink()
    (d / "config.json").symlink_to(secret)
    with pytest.raises(ValueError, match="config.json is a symlink"):
        read_model_dir(d)


def test_a_fifo_or_a_huge_record_is_refused(tmp_path):
    d = model_dir_with(tmp_path)
    (d / "phalanx-model.json").write_text(json.dumps({**model_record(BASE), "pad": "x" * MAX_JSON_BYTES}))
    with pytest.raises(ValueError, match=f"larger than {MAX_JSON_BYTES} bytes"):
        read_model_dir(d)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="not a regular file"):
        read_json(tmp_path / "fifo")


def test_base_fingerprint_names_what_changed(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "model-1.safetensors").write_bytes(b"a" * 10)
    (base / "model-2.safetensors").write_bytes(b"b" * 20)
    (base / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    recorded = base_fingerprint(base)
    assert recorded["files"] == {"model-1.safetensors": 10, "model-2.safetensors": 20}
    assert base_mismatch(recorded, base) == [] and base_mismatch(None, base) == []
    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    assert base_mismatch(recorded, copy) == []  # another copy of the same model
    (copy / "model-1.safetensors").write_bytes(b"a" * 11)
    (copy / "model-2.safetensors").unlink()
    (copy / "model-3.safetensors").write_bytes(b"c")
    (copy / "model.safetensors.index.json").write_text('{"weight_map": {"x": 1}}')
    assert base_mismatch(recorded, copy) == [
        "model-1.safetensors: 10 bytes when the run trained, 11 bytes now",
        "model-2.safetensors: missing (the run trained with it)",
        "model-3.safetensors: not part of the model the run trained",
        "model.safetensors.index.json: its content differs from the one the run trained with"]


def test_the_record_of_a_pretrained_run_carries_its_base_fingerprint(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps(hf_config_for_shape(BASE)))
    (base / "model.safetensors").write_bytes(b"x" * 8)
    write_model_dir(tmp_path / "ckpt" / "model", BASE, pretrained=str(base))
    assert resumed_base_problems(tmp_path / "ckpt", base) == []
    (base / "model.safetensors").write_bytes(b"x" * 9)
    assert resumed_base_problems(tmp_path / "ckpt", base) == [
        "model.safetensors: 8 bytes when the run trained, 9 bytes now"]
    assert resumed_base_problems(tmp_path / "elsewhere", base) == []  # no record: nothing to compare
