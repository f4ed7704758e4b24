"""The launcher with a ``model.pretrained`` job: the runtime's shape comes from the directory's
config.json (``RuntimeConfig.shape``), and ``validate`` refuses a model it cannot train (an
invalid job: nothing started)."""

from __future__ import annotations

import json

import pytest

from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.launch import validate

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
          "max_position_embeddings": 128, "tie_word_embeddings": True}


def runtime_config(path, parallelism: dict | None = None, world: int = 1) -> RuntimeConfig:
    return RuntimeConfig.from_dict({"spec": {
        "procsPerNode": world, "parallelism": parallelism or {}, "model": {"pretrained": {"path": str(path)}},
        "data": {"seqLen": 16}, "training": {"globalBatchSize": 8}}})


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


def test_shape_comes_from_config_json(model_dir):
    shape = runtime_config(model_dir).shape
    assert (shape.family, shape.dim, shape.n_kv_heads, shape.qkv_bias, shape.tie_embeddings, shape.rope_style) == (
        "qwen2", 64, 2, True, True, "half")


def test_a_preset_job_keeps_its_preset_shape():
    cfg = RuntimeConfig.from_dict({"spec": {"model": {"preset": "debug"}}})
    assert cfg.shape.rope_style == "interleaved" and cfg.shape.family == "llama"


@pytest.mark.parametrize("parallelism, world, message", [
    ({"tensor": 4}, 4, "parallelism.tensor: tensor 4 does not divide config.json num_key_value_heads 2"),
    ({"pipeline": 2, "microbatches": 2}, 2, "parallelism.pipeline: config.json tie_word_embeddings true"),
])
def test_launcher_refuses_what_the_model_cannot_do(model_dir, parallelism, world, message):
    errors = validate(runtime_config(model_dir, parallelism, world), cuda_available=False)
    assert any(message in e for e in errors), errors


def test_launcher_refuses_an_unreadable_directory(tmp_path):
    errors = validate(runtime_config(tmp_path / "absent"), cuda_available=False)
    assert any(e.startswith("model.pretrained.path: cannot read") for e in errors), errors


def test_launcher_accepts_a_supported_model(model_dir):
    assert validate(runtime_config(model_dir, {"tensor": 2}, 2), cuda_available=False) == []
