"""The one verdict on a sweep's bad input: unknown paths, wrong types, grids that make invalid
TrainingJobs, names too long for their trials' names, problems bounded."""

from __future__ import annotations

import pytest

from phalanx.api.sweep import MAX_TRIALS
from phalanx.sweep.check import check_sweep
from tests.unit.phalanx.sweep.test_params import sweep


def messages(obj) -> list[str]:
    return [str(p) for p in check_sweep(obj).problems]


@pytest.mark.parametrize(("spec", "words"), [
    ({"parameters": [{"path": "training.lrr", "values": [0.1]}]}, "spec.parameters[0].path: training.lrr: unknown field 'lrr'"),
    ({"template": {"spec": {"image": "x", "model": {"pretrained": {"path": "/m"}}}},
      "parameters": [{"path": "model.lora.rank", "values": [8, 4096]}]}, "model.lora.rank=4096"),
    ({"template": {"spec": {"image": "x", "model": {"entrypoint": "m:f"}}},
      "parameters": [{"path": "model.lora.rank", "values": [8]}]},
     "spec.parameters[0].values[0]: model.lora.rank=8: model.lora adds adapters"),
    ({"parameters": [{"path": "model.lora.targets", "values": ["q_proj"]}]}, "model.lora.targets is a list"),
    ({"parameters": [{"path": "training.lr", "values": [0.1, "fast"]}]}, "spec.parameters[0].values[1]: training.lr=\"fast\": Input should be a valid number"),
    ({"parameters": [{"path": "training.lr", "values": ["1e-3"]}]}, "YAML 1.1 reads an exponent without a '.' as a string"),
    ({"parameters": [{"path": "training.lr", "values": [-1.0]}]}, "spec.parameters[0].values[0]: training.lr=-1.0: Input should be greater than 0"),
    ({"parameters": [{"path": "parallelism.zero", "values": [1.5]}]}, "parallelism.zero=1.5"),
    ({"parameters": [{"path": "training.precision", "values": ["fp8"]}]}, "(one of: fp32, bf16)"),
    ({"parameters": [{"path": "parallelism.tensor", "values": [1, 2]}]}, "spec.parameters[0].values[1]: parallelism.tensor=2"),
    ({"parameters": [{"path": "training.precision", "range": {"min": 0, "max": 1}}], "algorithm": "random", "maxTrials": 2},
     "a range needs a number field"),
    ({"parameters": [{"path": "training.lr", "range": {"min": 0.1, "max": 0.2}}]}, "algorithm grid needs values"),
    ({"parameters": [{"path": "training.lr", "values": [0.1], "range": {"min": 0.1, "max": 0.2}}], "algorithm": "random",
      "maxTrials": 1}, "set exactly one of values or range"),
    ({"parameters": [{"path": "training.lr", "values": [0.1]}], "algorithm": "random"}, "algorithm random needs maxTrials"),
    ({"maxParallel": 0}, "spec.maxParallel: Input should be greater than or equal to 1"),
    ({"parameters": []}, "set parameters to vary"),
    ({"algorithm": "list"}, "trials is set exactly when algorithm is list"),
    ({"parameters": [{"path": "training.lr", "values": [0.1]}, {"path": "training.lr", "values": [0.2]}]}, "duplicate parameter path"),
    ({"ensemble": {"size": 2}, "parameters": [{"path": "training.seed", "values": [1]}]}, "ensemble sets training.seed"),
    ({"parameters": [{"path": "training.lr", "values": [x / 1000 for x in range(1, 31)]},
                     {"path": "training.seed", "values": list(range(10))}]}, f"300 trials; a sweep runs at most {MAX_TRIALS}"),
    ({"typo": 1}, "spec.typo: unknown field"),
    ({"template": {"spec": {"image": "x", "model": {"preset": "debug"}, "parallelism": {"tensor": 3}}}},
     "spec.template.spec.parallelism"),
    ({"objective": {"metric": "finalLoss", "aggregate": "best"}},
     "spec.objective.aggregate: objective.aggregate is for a reported metric; finalLoss, bestLoss, tokensPerSecond are built in"),
    ({"objective": {"metric": "eval loss"}}, "spec.objective.metric: String should match pattern"),
    ({"objective": {"metric": "m" * 65}}, "spec.objective.metric: String should"),
    ({"objective": {"metric": "eval_loss", "aggregate": "mean"}}, "spec.objective.aggregate: Input should be 'last' or 'best'"),
    ({"parameters": [{"path": "env.PHALANX_LR", "values": [0.1]}]},
     "spec.parameters[0].path: env.PHALANX_LR: spec.env: PHALANX_LR: PHALANX_* variables are set by the operator"),
    ({"parameters": [{"path": "env.A.B", "values": [0.1]}]}, "spec.parameters[0].path: env.A.B: spec.env: env.A.B names one"),
    ({"parameters": [{"path": "env.1A", "values": [0.1]}]}, "spec.parameters[0].path: String should match pattern"),
    ({"algorithm": "list", "parameters": [], "trials": [{"env.bad-name": 1}]},
     "spec.trials[0]: env.bad-name: not a field path like training.lr or env.LR"),
    ({"algorithm": "list", "parameters": [], "trials": [{"env.PHALANX_X": 1}]}, "spec.trials[0]: env.PHALANX_X: spec.env: PHALANX_X"),
])
def test_bad_sweeps_are_refused_naming_the_field(spec, words):
    found = messages(sweep(**spec))
    assert any(words in m for m in found), found


@pytest.mark.parametrize("spec", [
    {"objective": {"metric": "eval_loss"}},
    {"objective": {"metric": "eval_accuracy", "aggregate": "best", "goal": "maximize"}},
    {"objective": {"metric": "loss", "aggregate": "last"}},
    {"objective": {"metric": "lr/group0"}},
    {"parameters": [{"path": "env.LR", "range": {"min": 0.001, "max": 0.1, "scale": "log"}}], "algorithm": "random", "maxTrials": 2},
    {"algorithm": "list", "parameters": [], "trials": [{"env.LR": "0.1", "training.lr": 0.1}, {"env.LR": 1}]},
    {"template": {"spec": {"image": "x", "command": ["python3", "train.py"]}},
     "parameters": [{"path": "env.LR", "values": [0.1, 0.01]}], "ensemble": {"size": 2}},
    # fine-tuning: adapters' rank and alpha, the learning rate, ranked by the held-out loss
    {"template": {"spec": {"image": "x", "model": {"pretrained": {"path": "/models/llama"}, "lora": {}},
                           "training": {"eval": {"everySteps": 10}}}},
     "parameters": [{"path": "model.lora.rank", "values": [4, 16]}, {"path": "model.lora.alpha", "values": [8, 32.0]},
                    {"path": "training.lr", "values": [1e-4, 3e-4]}],
     "objective": {"metric": "eval_loss", "aggregate": "best"}},
    # a parameter may set a field the template leaves out
    {"template": {"spec": {"image": "x", "model": {"pretrained": {"path": "/models/llama"}}}},
     "parameters": [{"path": "model.lora.rank", "values": [8]}, {"path": "model.lora.dropout", "values": [0.0, 0.1]}]},
])
def test_reported_metrics_and_env_parameters_are_valid(spec):
    expansion = check_sweep(sweep(**spec))
    assert expansion.valid, expansion.problems


def test_a_problem_of_another_parameter_is_named_beside_an_env_parameter():
    obj = sweep(parameters=[{"path": "env.LR", "values": [0.1]}, {"path": "training.lr", "values": [-1.0]}])
    assert any(m.startswith("spec.parameters[1].values[0]: training.lr=-1.0: Input should be greater than 0")
               for m in messages(obj)), messages(obj)


def test_a_cross_field_problem_of_one_combination_names_the_trial():
    obj = sweep(parameters=[{"path": "nodes", "values": [1, 2]}, {"path": "procsPerNode", "values": [2, 3]}])
    obj["spec"]["template"]["spec"].update(procsPerNode=2, parallelism={"tensor": 2})
    found = messages(obj)
    assert any(m.startswith("spec: trial 1 (nodes=1, procsPerNode=3) would be an invalid TrainingJob: spec.parallelism")
               for m in found), found
    assert check_sweep(obj).trials == []  # nothing to create


@pytest.mark.parametrize(("meta", "words"), [
    ({"name": "x" * 42}, "at most 41"), ({"name": "Bad_Name"}, "DNS-1035"), ({"generateName": "x-"}, "generateName is not supported"),
])
def test_sweep_names_leave_room_for_trial_names(meta, words):
    obj = sweep()
    obj["metadata"] = meta
    assert any(words in m for m in messages(obj))


def test_problems_are_deduplicated_and_bounded():
    values = [-float(i) for i in range(1, 60)]
    found = messages(sweep(parameters=[{"path": "training.lr", "values": values}]))
    assert len(found) == 21 and "more problems" in found[-1]
