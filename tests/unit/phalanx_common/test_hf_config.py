"""Hugging Face config.json → the built-in transformer's shape (phalanx_common/hf_config.py): the
mapping per family (Llama, Mistral, Qwen2, Qwen3; transformers 5's ``rope_parameters`` and older
``rope_scaling``), and every refusal naming its field."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from phalanx_common.hf_config import (
    check_hf_config,
    check_pretrained,
    read_hf_config,
    shape_from_hf_config,
    sliding_window_in_use,
)

BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
ARCH = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM"}
LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def config(family: str = "llama", **fields) -> dict:
    doc = {**BASE, "architectures": [ARCH[family]], "model_type": family, **fields}
    return {key: value for key, value in doc.items() if value is not None}


def job(tensor: int = 1, pipeline: int = 1, seq_len: int = 16, sequence_parallel: bool = False,
        schedule: str = "1F1B", virtual_stages: int = 1, path: str = ""):
    """The attributes check_hf_config reads (a TrainingJob spec and the runtime's JobSpec both have them)."""
    parallelism = SimpleNamespace(tensor=tensor, pipeline=pipeline, sequence_parallel=sequence_parallel,
                                  pipeline_schedule=schedule, virtual_stages=virtual_stages)
    model = SimpleNamespace(pretrained=SimpleNamespace(path=path) if path else None)
    return SimpleNamespace(parallelism=parallelism, data=SimpleNamespace(seq_len=seq_len), model=model)


@pytest.mark.parametrize("doc, expected", [
    (config("llama"), {"family": "llama", "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 256,
                       "ffn_hidden": 128, "max_seq_len": 128, "norm_eps": 1e-6, "rope_style": "half",
                       "head_dim_override": None, "qkv_bias": False, "o_bias": False, "qk_norm": False,
                       "tie_embeddings": False, "rope_scaling": ()}),
    (config("llama", rope_parameters=LLAMA3),
     {"rope_theta": 500000.0, "rope_scaling": (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                                               ("original_max_position_embeddings", 64), ("rope_type", "llama3"))}),
    # transformers 4's spelling: rope_scaling with "type", rope_theta beside it
    (config("llama", rope_parameters=None, rope_theta=1e6, rope_scaling={"type": "linear", "factor": 2.0}),
     {"rope_theta": 1e6, "rope_scaling": (("factor", 2.0), ("rope_type", "linear"))}),
    # llama3 without original_max_position_embeddings: max_position_embeddings, as transformers
    (config("llama", rope_parameters={k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}),
     {"rope_scaling": (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                       ("original_max_position_embeddings", 128), ("rope_type", "llama3"))}),
    (config("llama", attention_bias=True), {"qkv_bias": True, "o_bias": True}),
    (config("llama", num_key_value_heads=None), {"n_kv_heads": 4}),
    (config("mistral", head_dim=32, sliding_window=4096), {"family": "mistral", "head_dim_override": 32, "qkv_bias": False}),
    (config("mistral", attention_bias=True), {"qkv_bias": False, "o_bias": False}),  # not a Mistral field
    (config("qwen2", tie_word_embeddings=True), {"family": "qwen2", "qkv_bias": True, "o_bias": False,
                                                 "tie_embeddings": True}),
    (config("qwen3", head_dim=32), {"family": "qwen3", "qk_norm": True, "head_dim_override": 32, "qkv_bias": False}),
    (config("qwen3"), {"head_dim_override": 128}),  # Qwen3Config's default head_dim
    (config("qwen3", attention_bias=True, head_dim=16), {"qkv_bias": True, "o_bias": True, "head_dim_override": None}),
    ({**config("qwen2"), "architectures": None}, {"family": "qwen2"}),  # model_type when no architectures
    (config("llama", max_position_embeddings=None, rms_norm_eps=None), {"max_seq_len": 2048, "norm_eps": 1e-6}),
])
def test_shape_from_config(doc, expected):
    shape = shape_from_hf_config({k: v for k, v in doc.items() if v is not None})
    assert {name: getattr(shape, name) for name in expected} == expected


def test_head_dim_and_parameter_count_follow_the_explicit_head_dim():
    shape = shape_from_hf_config(config("qwen3", head_dim=32))
    assert shape.head_dim == 32
    q_dim, kv_dim = 4 * 32, 2 * 32
    per_layer = 64 * q_dim * 2 + 64 * kv_dim * 2 + 2 * 32 + 3 * 64 * 128 + 2 * 64
    assert shape.num_params() == 2 * per_layer + 64 + 2 * 256 * 64


def test_biases_count_in_the_parameters():
    plain, qwen2 = shape_from_hf_config(config("llama")), shape_from_hf_config(config("qwen2"))
    biased = shape_from_hf_config(config("llama", attention_bias=True))
    assert qwen2.num_params() - plain.num_params() == 2 * (4 * 16 + 2 * 2 * 16)  # q, k, v per layer
    assert biased.num_params() - qwen2.num_params() == 2 * 64  # o_proj's


FIELD = "model.pretrained.path: config.json"


@pytest.mark.parametrize("doc, spec, message", [
    (config("llama", architectures=["GPT2LMHeadModel"]), job(),
     f"{FIELD} architectures 'GPT2LMHeadModel' is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
     "Qwen2ForCausalLM, Qwen3ForCausalLM)"),
    ({**config("llama", model_type="gpt2"), "architectures": []}, job(),
     f"{FIELD} model_type 'gpt2' is not supported (supported: llama, mistral, qwen2, qwen3)"),
    (config("llama", rope_parameters={"rope_type": "yarn", "factor": 4.0}), job(),
     f"{FIELD} rope_parameters.rope_type 'yarn' is not supported (supported: default, linear, llama3)"),
    (config("llama", rope_parameters=None, rope_scaling={"type": "dynamic", "factor": 2.0}), job(),
     f"{FIELD} rope_scaling.rope_type 'dynamic' is not supported (supported: default, linear, llama3)"),
    (config("llama", rope_parameters={"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}), job(),
     f"{FIELD} rope_parameters.low_freq_factor is required by rope_type 'llama3'"),
    (config("llama", rope_parameters={"rope_type": "linear"}), job(),
     f"{FIELD} rope_parameters.factor is required by rope_type 'linear'"),
    (config("llama", rope_parameters={"full_attention": {"rope_type": "default"}}), job(),
     f"{FIELD} rope_parameters per layer type is not supported"),
    (config("llama", partial_rotary_factor=0.5), job(), f"{FIELD} partial_rotary_factor 0.5 is not supported"),
    (config("llama", hidden_act="gelu"), job(), f"{FIELD} hidden_act 'gelu' is not supported"),
    (config("llama", mlp_bias=True), job(), f"{FIELD} mlp_bias true is not supported"),
    (config("llama", num_key_value_heads=3), job(), f"{FIELD} num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
    (config("llama", head_dim=15), job(), f"{FIELD} head dimension 15 must be even"),
    (config("llama", hidden_size=None), job(), f"{FIELD} has no positive integer hidden_size"),
    (config("llama"), job(tensor=4), "parallelism.tensor: tensor 4 does not divide config.json num_key_value_heads 2"),
    (config("llama", intermediate_size=129, num_key_value_heads=4), job(tensor=2),
     "parallelism.tensor: tensor 2 does not divide config.json intermediate_size 129"),
    (config("llama"), job(pipeline=4), "parallelism.pipeline: config.json num_hidden_layers 2 cannot split into 4 pipeline stages"),
    (config("llama"), job(pipeline=2, schedule="Interleaved1F1B", virtual_stages=2),
     "parallelism.pipeline: config.json num_hidden_layers 2 cannot split into 4 pipeline stages"),
    (config("qwen2", tie_word_embeddings=True), job(pipeline=2),
     "parallelism.pipeline: config.json tie_word_embeddings true: tied embeddings cannot be split"),
    (config("llama"), job(seq_len=256), "data.seqLen: 256 exceeds config.json max_position_embeddings 128"),
    (config("mistral", sliding_window=8), job(seq_len=16), f"{FIELD} sliding_window 8 is in use and shorter than data.seqLen 16"),
    (config("mistral"), job(seq_len=5000), f"{FIELD} sliding_window 4096 is in use and shorter than data.seqLen 5000"),
    (config("qwen2", use_sliding_window=True, sliding_window=8, layer_types=["full_attention", "sliding_attention"]),
     job(seq_len=16), f"{FIELD} sliding_window 8 is in use"),
    (config("llama"), job(tensor=2, sequence_parallel=True, seq_len=15),
     "parallelism.sequenceParallel: seqLen 15 is not divisible by tensor 2"),
])
def test_refusals_name_the_field(doc, spec, message):
    errors = check_hf_config(doc, spec)
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize("doc, spec", [
    (config("llama", rope_parameters=LLAMA3), job(tensor=2, pipeline=2, seq_len=128)),
    (config("mistral", sliding_window=16), job(seq_len=16)),  # the window covers the whole sequence
    (config("mistral", sliding_window=None), job(seq_len=16)),
    (config("qwen2", use_sliding_window=False, sliding_window=8), job(seq_len=16)),  # configured, not in use
    (config("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=2), job(seq_len=16)),  # no layer past it
    (config("qwen3", head_dim=32, tie_word_embeddings=True), job(tensor=2)),
])
def test_supported_configs_pass(doc, spec):
    assert check_hf_config(doc, spec) == []


def test_sliding_window_defaults_like_transformers():
    assert sliding_window_in_use({**config("mistral")}, "mistral") == 4096  # MistralConfig's default
    assert sliding_window_in_use(config("qwen2", use_sliding_window=True, sliding_window=8), "qwen2") is None  # layers < 28
    assert sliding_window_in_use(config("llama", sliding_window=8), "llama") is None


def test_shape_from_an_unsupported_config_raises_every_reason():
    with pytest.raises(ValueError) as e:
        shape_from_hf_config(config("llama", hidden_act="gelu", rope_parameters={"rope_type": "yarn", "factor": 2.0}))
    assert "hidden_act 'gelu'" in str(e.value) and "rope_type 'yarn'" in str(e.value)


def test_read_config_from_the_directory_or_the_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(config("qwen2")))
    assert read_hf_config(tmp_path) == read_hf_config(tmp_path / "config.json") == config("qwen2")
    with pytest.raises(ValueError, match=r"model.pretrained.path: cannot read .*missing/config.json"):
        read_hf_config(tmp_path / "missing")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="is not a JSON object"):
        read_hf_config(tmp_path / "list.json")


def test_check_pretrained_reads_the_job_path(tmp_path):
    assert check_pretrained(job()) == []
    assert check_pretrained(job(path=str(tmp_path)))[0].startswith("model.pretrained.path: cannot read")
    (tmp_path / "config.json").write_text(json.dumps(config("llama")))
    assert check_pretrained(job(path=str(tmp_path))) == []
    assert "tensor 4" in check_pretrained(job(path=str(tmp_path), tensor=4))[0]


@pytest.mark.parametrize("field, value, message", [
    ("num_key_value_heads", "2", 'num_key_value_heads "2" must be a positive integer'),
    ("num_key_value_heads", 0, "num_key_value_heads 0 must be a positive integer"),
    ("num_attention_heads", 0, "has no positive integer num_attention_heads"),
    ("hidden_size", True, "has no positive integer hidden_size"),
    ("rms_norm_eps", "1e-6", 'rms_norm_eps "1e-6" must be a positive number'),
    ("rms_norm_eps", -1.0, "rms_norm_eps -1.0 must be a positive number"),
    ("max_position_embeddings", "x", 'max_position_embeddings "x" must be a positive integer'),
    ("head_dim", 16.0, "head_dim 16.0 must be a positive integer"),
    ("tie_word_embeddings", "false", 'tie_word_embeddings "false" must be true or false'),
    ("architectures", "LlamaForCausalLM", 'architectures "LlamaForCausalLM" must be a list of strings'),
    ("rope_parameters", [1], "rope_parameters [1] must be an object"),
    ("rope_parameters", {"rope_type": "linear", "factor": "2"}, 'rope_parameters.factor "2" must be a positive number'),
    ("rope_parameters", {"rope_type": "default", "rope_theta": 0}, "rope_parameters.rope_theta 0 must be a positive number"),
    ("sliding_window", "8", 'sliding_window "8" must be a positive integer'),
])
def test_a_value_of_the_wrong_type_or_range_is_named(field, value, message):
    doc = {**config("llama"), field: value}
    errors = check_hf_config(doc, job())
    assert any(f"{FIELD} {message}" in e for e in errors), errors
    with pytest.raises(ValueError, match="must be|has no positive integer"):
        shape_from_hf_config(doc)


@pytest.mark.parametrize("field", ["num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps",
                                   "rope_theta", "tie_word_embeddings", "attention_bias", "rope_scaling",
                                   "sliding_window"])
def test_an_optional_key_set_to_null_takes_the_default(field):
    doc = {**config("llama", rope_parameters=None, rope_theta=10000.0), field: None}
    assert check_hf_config(doc, job()) == []
    shape_from_hf_config(doc)


BAD_VALUES = ["2", 0, -1, 1.5, None, True, [], {}, float("nan")]
FUZZED_KEYS = sorted({*BASE, "architectures", "model_type", "head_dim", "tie_word_embeddings", "attention_bias",
                      "sliding_window", "use_sliding_window", "layer_types", "max_window_layers", "rope_scaling",
                      "rope_theta", "partial_rotary_factor"})


@pytest.mark.parametrize("field", FUZZED_KEYS)
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_no_malformed_value_raises_from_the_checks(field, family):
    for value in BAD_VALUES:
        doc = {**config(family), field: value}
        check_hf_config(doc, job())  # a list of messages, never an exception
        try:
            shape_from_hf_config(doc)
        except ValueError:
            pass


def test_a_config_larger_than_the_cap_is_refused_unparsed(tmp_path):
    from phalanx_common.hf_config import MAX_CONFIG_BYTES

    (tmp_path / "config.json").write_text(json.dumps({**config("llama"), "padding": "x" * MAX_CONFIG_BYTES}))
    with pytest.raises(ValueError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        read_hf_config(tmp_path)
