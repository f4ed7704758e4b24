"""The status records of a sweep's trials: metric values (built in and reported), milestones
recorded once, the best trial."""

from __future__ import annotations

import pytest

from phalanx.api.sweep import Objective, TrialStatus
from phalanx.sweep.status import (
    aggregate,
    best_trial,
    metric_value,
    new_milestones,
    record_progress,
    reported_value,
)

FINAL_LOSS = Objective()


def objective(metric: str, aggregate: str | None = None, goal: str = "minimize") -> Objective:
    return Objective.model_validate({"metric": metric, "goal": goal, **({"aggregate": aggregate} if aggregate else {})})


def test_metric_values_and_best_loss_tracking():
    assert metric_value("finalLoss", {"loss": 3.0}, 2.0) == (3.0, 2.0)
    assert metric_value("bestLoss", {"loss": 3.0}, 2.0) == (2.0, 2.0)
    assert metric_value("bestLoss", {"loss": 1.5}, 2.0) == (1.5, 1.5)
    assert metric_value("tokensPerSecond", {"tokensPerSecond": 900}, None) == (900.0, None)
    assert metric_value("finalLoss", {"loss": float("nan")}, None) == (None, None)
    assert metric_value("finalLoss", {"loss": "3"}, None) == (None, None)  # not a number: ignored


@pytest.mark.parametrize(("name", "status", "value"), [
    ("eval_loss", {"metrics": {"eval_loss": 2.5}}, 2.5),
    ("eval_loss", {"metrics": {"eval_accuracy": 0.5}}, None),  # not reported (yet)
    ("eval_loss", {}, None),  # a status without metrics (an older operator's, or nothing reported)
    ("eval_loss", {"metrics": None}, None),
    ("eval_loss", {"metrics": {"eval_loss": float("inf")}}, None),
    ("eval_loss", {"metrics": {"eval_loss": True}}, None),  # not a number
    ("eval_loss", {"metrics": ["eval_loss"]}, None),
    ("eval_loss", {"loss": 1.0}, None),  # the training loss is not eval_loss
    ("loss", {"loss": 1.0}, 1.0),  # loss: the status's training loss ...
    ("loss", {"loss": 1.0, "metrics": {"loss": 0.9}}, 0.9),  # ... unless reported among the metrics
    ("eval_accuracy", {"metrics": {"eval_accuracy": 1}}, 1.0),
])
def test_reported_value(name, status, value):
    assert reported_value(name, status) == value


@pytest.mark.parametrize(("aggregate_", "goal", "kept", "latest", "value"), [
    (None, "minimize", 2.0, 3.0, 3.0),  # last (the default): the latest
    ("last", "minimize", 2.0, 3.0, 3.0),
    ("best", "minimize", 2.0, 3.0, 2.0),
    ("best", "minimize", 2.0, 1.0, 1.0),
    ("best", "maximize", 0.5, 0.7, 0.7),
    ("best", "maximize", 0.5, 0.4, 0.5),
    ("best", "minimize", None, 3.0, 3.0),  # the first value
    ("best", "minimize", 2.0, None, 2.0),  # no new sample: kept
    ("last", "minimize", 2.0, None, 2.0),
    ("last", "minimize", None, None, None),
])
def test_aggregate(aggregate_, goal, kept, latest, value):
    assert aggregate(objective("eval_loss", aggregate_, goal), kept, latest) == value


@pytest.mark.parametrize(("steps", "recorded", "step", "value", "new"), [
    ([10, 20], set(), 5, 1.0, []),  # not there yet
    ([10, 20], set(), 10, 1.0, [10]),  # at the milestone
    ([10, 20], set(), 23, 1.0, [10, 20]),  # first seen past two: both, with the same value
    ([10, 20], {10}, 23, 1.0, [20]),  # each once
    ([10, 20], {10, 20}, 30, 1.0, []),
    ([10, 20], set(), 23, None, []),  # nothing reported yet: recorded at the first sample with a value
    ([10, 20], set(), None, 1.0, []),
])
def test_new_milestones(steps, recorded, step, value, new):
    assert new_milestones(steps, recorded, step, value) == new


def test_record_progress_records_each_milestone_once():
    rec = TrialStatus(name="t", index=0)
    assert record_progress(rec, {"step": 5, "loss": 4.0}, FINAL_LOSS, [10, 20]) == []
    assert record_progress(rec, {"step": 23, "loss": 3.0}, FINAL_LOSS, [10, 20]) == [10, 20]
    assert [(m.step, m.value, m.at) for m in rec.milestones] == [(10, 3.0, 23), (20, 3.0, 23)]
    assert record_progress(rec, {"step": 30, "loss": 2.0}, FINAL_LOSS, [10, 20]) == []
    assert rec.step == 30 and rec.value == 2.0 and rec.best_loss == 2.0


def test_a_reported_metric_not_reported_at_a_milestone_is_recorded_when_it_first_is():
    rec = TrialStatus(name="t", index=0)
    eval_loss = objective("eval_loss")
    assert record_progress(rec, {"step": 12, "loss": 4.0}, eval_loss, [10, 20]) == []  # no eval yet
    assert rec.value is None and rec.best_loss == 4.0
    assert record_progress(rec, {"step": 15, "loss": 3.5, "metrics": {"eval_loss": 3.9}}, eval_loss, [10, 20]) == [10]
    assert [(m.step, m.value, m.at) for m in rec.milestones] == [(10, 3.9, 15)]
    # past 20: the latest value then, though it was reported at an earlier step
    assert record_progress(rec, {"step": 21, "loss": 3.0, "metrics": {"eval_loss": 3.9}}, eval_loss, [10, 20]) == [20]
    assert rec.milestones[-1].value == 3.9 and rec.value == 3.9


def test_best_of_a_reported_metric_is_over_the_samples_milestones_take_the_latest():
    rec = TrialStatus(name="t", index=0)
    best_accuracy = objective("eval_accuracy", "best", "maximize")
    for step, accuracy in ((10, 0.6), (20, 0.8), (30, 0.7)):
        record_progress(rec, {"step": step, "metrics": {"eval_accuracy": accuracy}}, best_accuracy, [10, 20, 30])
    assert rec.value == 0.8
    assert [(m.step, m.value) for m in rec.milestones] == [(10, 0.6), (20, 0.8), (30, 0.7)]


def test_a_builtin_metric_ignores_reported_metrics():
    rec = TrialStatus(name="t", index=0)
    record_progress(rec, {"step": 10, "loss": 3.0, "metrics": {"finalLoss": 1.0, "loss": 0.5}}, FINAL_LOSS, [10])
    assert rec.value == 3.0 and rec.milestones[0].value == 3.0


def test_best_trial_is_among_succeeded_lowest_index_on_ties():
    recs = [TrialStatus(name="a", index=0, phase="Succeeded", value=2.0),
            TrialStatus(name="b", index=1, phase="Running", value=1.0),
            TrialStatus(name="c", index=2, phase="Succeeded", value=2.0),
            TrialStatus(name="d", index=3, phase="Stopped", value=0.5),
            TrialStatus(name="e", index=4, phase="Succeeded", value=None)]  # never reported the metric
    assert best_trial(recs, "minimize").name == "a"
    assert best_trial(recs, "maximize").name == "a"
    assert best_trial(recs[1:2], "minimize") is None
    assert best_trial(recs[4:], "minimize") is None
