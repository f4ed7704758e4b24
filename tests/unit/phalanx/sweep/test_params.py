"""Sweep sampling (grid, random with a seed, list, ensembles) and parameter paths."""

from __future__ import annotations

import random

import pytest

from phalanx.sweep.check import check_sweep
from phalanx.sweep.params import Leaf, get_path, resolve_path, sample_range, set_path


def sweep(**spec) -> dict:
    base = {
        "template": {"spec": {"image": "phalanx/runtime:0.1.0", "model": {"preset": "debug"},
                              "training": {"steps": 50, "seed": 7}}},
        "parameters": [{"path": "training.lr", "values": [0.001, 0.003]}],
    }
    base.update(spec)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep", "metadata": {"name": "sw"}, "spec": base}


# --- paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "kind"), [
    ("training.lr", "float"), ("parallelism.zero", "int"), ("model.overrides.dim", "int"),
    ("training.precision", "str"), ("parallelism.sequenceParallel", "bool"), ("model.preset", "str"),
    ("nodes", "int"), ("model.overrides.ropeTheta", "float"), ("checkpoint.async", "bool"),
])
def test_resolve_scalar_paths(path, kind):
    leaf = resolve_path(path)
    assert isinstance(leaf, Leaf) and leaf.kind == kind


@pytest.mark.parametrize(("path", "words"), [
    ("training.lrr", "unknown field 'lrr' in spec.training; known: steps"),
    ("training", "is an object; name one of its fields"),
    ("env", "is a list"),
    ("nodeSelector", "is a map"),
    ("training.lr.x", "is not an object"),
    ("procs_per_node", "unknown field 'procs_per_node'"),
])
def test_resolve_refuses_what_is_not_one_scalar_field(path, words):
    found = resolve_path(path)
    assert isinstance(found, str) and words in found


def test_enum_and_literal_choices_are_known():
    assert "bf16" in resolve_path("training.precision").choices
    assert "debug" in resolve_path("model.preset").choices


def test_set_and_get_path_create_intermediate_objects():
    spec: dict = {"model": {"preset": "debug"}}
    set_path(spec, "model.overrides.dim", 128)
    assert spec == {"model": {"preset": "debug", "overrides": {"dim": 128}}}
    assert get_path(spec, "model.overrides.dim") == 128 and get_path(spec, "training.lr") is None


# --- sampling ---------------------------------------------------------------------------------


def test_grid_is_the_product_first_parameter_slowest():
    e = check_sweep(sweep(parameters=[{"path": "training.lr", "values": [0.1, 0.2]},
                                      {"path": "model.overrides.dim", "values": [64, 128, 256]}]))
    assert e.valid, e.problems
    assert [t.parameters for t in e.trials][:4] == [
        {"training.lr": 0.1, "model.overrides.dim": 64}, {"training.lr": 0.1, "model.overrides.dim": 128},
        {"training.lr": 0.1, "model.overrides.dim": 256}, {"training.lr": 0.2, "model.overrides.dim": 64}]
    assert [t.name for t in e.trials] == [f"sw-{i}" for i in range(6)]
    assert e.trials[4].spec["model"]["overrides"]["dim"] == 128 and e.trials[4].spec["training"]["lr"] == 0.2
    assert e.trials[0].spec["training"]["steps"] == 50  # the rest comes from the template


def test_max_trials_takes_the_first_grid_points():
    e = check_sweep(sweep(maxTrials=1))
    assert [t.parameters for t in e.trials] == [{"training.lr": 0.001}]


def test_random_is_seeded_typed_and_in_range():
    params = [{"path": "training.lr", "range": {"min": 1e-5, "max": 1e-2, "scale": "log"}},
              {"path": "parallelism.microbatches", "range": {"min": 1, "max": 8}},
              {"path": "training.precision", "values": ["fp32", "bf16"]}]
    a = check_sweep(sweep(algorithm="random", maxTrials=20, seed=42, parameters=params))
    b = check_sweep(sweep(algorithm="random", maxTrials=20, seed=42, parameters=params))
    c = check_sweep(sweep(algorithm="random", maxTrials=20, seed=43, parameters=params))
    assert a.valid, a.problems
    assert [t.parameters for t in a.trials] == [t.parameters for t in b.trials] != [t.parameters for t in c.trials]
    for t in a.trials:
        assert 1e-5 <= t.parameters["training.lr"] <= 1e-2
        assert type(t.parameters["parallelism.microbatches"]) is int and 1 <= t.parameters["parallelism.microbatches"] <= 8
        assert t.parameters["training.precision"] in ("fp32", "bf16")


def test_sample_range_edges():
    rng = random.Random(0)
    assert all(sample_range(rng, 2, 3, "linear", "int") in (2, 3) for _ in range(50))
    with pytest.raises(ValueError):
        sample_range(rng, 2.2, 2.8, "linear", "int")


def test_list_and_ensemble():
    e = check_sweep(sweep(algorithm="list", parameters=[], ensemble={"size": 2, "firstSeed": 100},
                          trials=[{"training.lr": 0.1}, {"training.lr": 0.2, "parallelism.zero": 1}]))
    assert e.valid, e.problems
    assert [t.parameters for t in e.trials] == [
        {"training.lr": 0.1, "training.seed": 100}, {"training.lr": 0.1, "training.seed": 101},
        {"training.lr": 0.2, "parallelism.zero": 1, "training.seed": 100},
        {"training.lr": 0.2, "parallelism.zero": 1, "training.seed": 101}]


def test_ensemble_alone_seeds_from_the_template():
    e = check_sweep(sweep(parameters=[], ensemble={"size": 3}))
    assert e.valid, e.problems
    assert [t.spec["training"]["seed"] for t in e.trials] == [7, 8, 9]
