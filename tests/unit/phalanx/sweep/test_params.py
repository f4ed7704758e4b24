"""Sweep sampling (grid, random with a seed, list, ensembles) and parameter paths."""

from __future__ import annotations

import random

import pytest

from phalanx.sweep.check import check_sweep
from phalanx.sweep.params import ENV, Leaf, env_text, get_path, resolve_path, sample_range, set_path


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
    ("env", "is a list; a parameter sets one scalar field (one variable: env.NAME)"),
    ("nodeSelector", "is a map"),
    ("training.lr.x", "is not an object"),
    ("procs_per_node", "unknown field 'procs_per_node'"),
])
def test_resolve_refuses_what_is_not_one_scalar_field(path, words):
    found = resolve_path(path)
    assert isinstance(found, str) and words in found


@pytest.mark.parametrize("path", ["env.LR", "env.LEARNING_RATE", "env._x", "env.lr2"])
def test_env_paths_name_one_variable(path):
    assert resolve_path(path) == Leaf(path, ENV)


@pytest.mark.parametrize(("path", "words"), [
    ("env.A.B", "env.A.B names one environment variable, NAME of letters, digits and '_'"),
    ("env.PHALANX_LR", "spec.env: PHALANX_LR: PHALANX_* variables are set by the operator"),
    ("env.MASTER_ADDR", "spec.env: MASTER_ADDR:"),  # the rendezvous is the operator's
    ("env.NVIDIA_VISIBLE_DEVICES", "spec.env: NVIDIA_VISIBLE_DEVICES:"),
    ("env." + "A" * 300, "String should have at most 256 characters"),  # a list trial's key is unbounded  # device grants are the device plugin's
])
def test_env_paths_the_trainer_cannot_have_are_refused(path, words):
    found = resolve_path(path)
    assert isinstance(found, str) and words in found, found


@pytest.mark.parametrize(("value", "text"), [
    (0.001, "0.001"), (1e-05, "1e-05"), (3, "3"), (True, "true"), (False, "false"), ("adamw", "adamw"), ("", ""),
])
def test_env_values_are_text_a_script_reads_back(value, text):
    assert env_text(value) == text


@pytest.mark.parametrize(("env", "after"), [
    (None, [{"name": "LR", "value": "0.01"}]),  # appended
    ([{"name": "A", "value": "1"}], [{"name": "A", "value": "1"}, {"name": "LR", "value": "0.01"}]),
    ([{"name": "LR", "value": "1"}, {"name": "B", "value": "2"}],  # replaced in place
     [{"name": "LR", "value": "0.01"}, {"name": "B", "value": "2"}]),
    ([{"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],  # the parameter wins
     [{"name": "LR", "value": "0.01"}]),
])
def test_set_an_env_path(env, after):
    spec: dict = {"image": "x"} if env is None else {"image": "x", "env": env}
    set_path(spec, "env.LR", 0.01)
    assert spec["env"] == after and get_path(spec, "env.LR") == "0.01"
    assert get_path(spec, "env.OTHER") is None


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


def test_an_env_parameter_of_a_command_job_sets_the_trials_variable():
    command = {"image": "x", "command": ["python3", "train.py"], "args": ["--lr", "$(LR)"],
               "env": [{"name": "DATA", "value": "/data"}, {"name": "LR", "value": "0.1"}]}
    e = check_sweep(sweep(template={"spec": command}, algorithm="random", maxTrials=3, seed=1,
                          parameters=[{"path": "env.LR", "range": {"min": 1e-4, "max": 1e-1, "scale": "log"}},
                                      {"path": "env.OPTIMIZER", "values": ["adamw", "sgd"]}]))
    assert e.valid, e.problems
    for t in e.trials:
        lr = t.parameters["env.LR"]
        assert type(lr) is float and 1e-4 <= lr <= 1e-1  # the parameter keeps the number
        assert t.spec["env"] == [{"name": "DATA", "value": "/data"}, {"name": "LR", "value": env_text(lr)},
                                 {"name": "OPTIMIZER", "value": t.parameters["env.OPTIMIZER"]}]
        assert t.spec["args"] == ["--lr", "$(LR)"] and "model" not in t.spec


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
