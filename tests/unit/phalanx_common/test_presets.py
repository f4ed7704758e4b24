"""The built-in transformer shapes (phalanx_common/presets.py): exact parameter counts, FLOPs per
token, and presets with overrides resolved or refused naming the bad key."""

from __future__ import annotations

import dataclasses

import pytest

from phalanx_common.presets import (
    OVERRIDE_KEYS,
    PRESETS,
    PRETRAINED_FIELDS,
    ModelShape,
    resolve_shape,
)


@pytest.mark.parametrize("preset, params", [
    ("1b", 1_235_814_400),  # Llama 3.2 1B's published count (tied embeddings)
    ("8b", 8_030_261_248),  # Llama 3 8B's
    ("70b", 70_553_706_496),  # Llama 3 70B's
])
def test_parameter_counts_match_the_published_models(preset, params):
    assert PRESETS[preset].num_params() == params


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_without_embeddings_the_count_drops_by_the_embedding_table(preset):
    shape = PRESETS[preset]
    assert shape.num_params() - shape.num_params(include_embedding=False) == shape.vocab_size * shape.dim


def test_tied_embeddings_have_no_separate_output_layer():
    untied = ModelShape(dim=8, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=10, ffn_hidden=16, max_seq_len=4)
    tied = dataclasses.replace(untied, tie_embeddings=True)
    assert untied.num_params() - tied.num_params() == 10 * 8


@pytest.mark.parametrize("seq_len", [1, 2048])
def test_flops_per_token(seq_len):
    shape = PRESETS["debug"]
    expected = 6 * shape.num_params(include_embedding=False) + 6 * 4 * 4 * 16 * seq_len  # layers, heads, head_dim 64/4
    assert shape.head_dim == 16 and shape.flops_per_token(seq_len) == expected


def test_a_preset_without_overrides_is_the_preset():
    assert resolve_shape("8b") is PRESETS["8b"] and resolve_shape("8b", {}) is PRESETS["8b"]


@pytest.mark.parametrize("key, value", [("nLayers", 2), ("vocabSize", 512), ("tieEmbeddings", True), ("ropeTheta", 1e6)])
def test_an_override_changes_its_field_only(key, value):
    shape = resolve_shape("debug", {key: value})
    changed = {f.name for f in dataclasses.fields(ModelShape) if getattr(shape, f.name) != getattr(PRESETS["debug"], f.name)}
    assert changed == {OVERRIDE_KEYS[key]} and getattr(shape, OVERRIDE_KEYS[key]) == value


def test_every_override_key_names_a_field():
    assert set(OVERRIDE_KEYS.values()) == {f.name for f in dataclasses.fields(ModelShape)} - set(PRETRAINED_FIELDS)


@pytest.mark.parametrize("preset, overrides, error, named", [
    ("huge", None, KeyError, "'huge'"),
    ("debug", {"n_layers": 2}, ValueError, "'n_layers'"),  # snake_case: not a TrainingJob's key
    ("debug", {"nLayers": 2, "depth": 3}, ValueError, "'depth'"),
])
def test_a_bad_preset_or_override_is_refused_by_name(preset, overrides, error, named):
    with pytest.raises(error, match=named):
        resolve_shape(preset, overrides)
