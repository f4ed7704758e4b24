"""Early-stopping rules and the status records they read: milestones, the median rule, ASHA,
metric values, best trial."""

from __future__ import annotations

import pytest

from phalanx.api.sweep import EarlyStopping, TrialStatus
from phalanx.sweep.earlystop import median_verdict, milestones, verdict
from phalanx.sweep.status import best_trial, metric_value, record_progress


@pytest.mark.parametrize(("rule", "steps", "expected"), [
    ({"rule": "none"}, 100, []),
    ({"rule": "median", "graceSteps": 10}, 45, [10, 20, 30, 40]),
    ({"rule": "median", "graceSteps": 10, "intervalSteps": 25}, 100, [10, 35, 60, 85]),
    ({"rule": "median", "graceSteps": 1}, 10**6, list(range(1, 13))),  # bounded
    ({"rule": "asha", "graceSteps": 5, "reductionFactor": 3}, 200, [5, 15, 45, 135]),
    ({"rule": "asha", "graceSteps": 100}, 100, []),  # no rung below the last step
])
def test_milestones(rule, steps, expected):
    assert milestones(EarlyStopping.model_validate(rule), steps) == expected


@pytest.mark.parametrize(("goal", "value", "others", "min_trials", "stop"), [
    ("minimize", 4.0, [3.0, 3.5], 2, True),
    ("minimize", 3.2, [3.0, 3.5], 2, False),  # 3.2 < median 3.25
    ("minimize", 3.25, [3.0, 3.5], 2, False),  # equal to the median: continues
    ("minimize", 9.0, [3.0], 2, False),  # too few others
    ("maximize", 900.0, [1000.0, 1100.0, 800.0], 3, True),
    ("maximize", 1000.0, [1000.0, 1100.0, 800.0], 3, False),
])
def test_median_rule(goal, value, others, min_trials, stop):
    assert (median_verdict(goal, value, others, min_trials) is not None) is stop


def test_verdict_only_for_new_milestones_after_grace():
    rule = EarlyStopping(rule="median", grace_steps=20, interval_steps=10, min_trials=1)
    values = {"a": {10: 9.0, 20: 9.0}, "b": {10: 1.0, 20: 1.0}}
    assert verdict(rule, "minimize", "a", [10], values) is None  # before graceSteps
    assert verdict(rule, "minimize", "a", [], values) is None  # nothing new
    assert "at step 20" in verdict(rule, "minimize", "a", [20], values)
    assert verdict(rule, "minimize", "b", [20], values) is None
    assert verdict(EarlyStopping(rule="none"), "minimize", "a", [20], values) is None


def test_asha_rung_includes_finished_and_stopped_trials():
    rule = EarlyStopping(rule="asha", grace_steps=10, reduction_factor=2)
    values = {"done": {10: 2.0}, "stopped": {10: 5.0}, "new": {10: 3.0}}
    # 3 values at the rung, keep ceil(3/2) = 2: 'new' is second → continues
    assert verdict(rule, "minimize", "new", [10], values) is None
    values["late"] = {10: 4.0}  # 4 values, keep 2: two are better
    assert "top 1/2" in verdict(rule, "minimize", "late", [10], values)


def test_metric_values_and_best_loss_tracking():
    assert metric_value("finalLoss", {"loss": 3.0}, 2.0) == (3.0, 2.0)
    assert metric_value("bestLoss", {"loss": 3.0}, 2.0) == (2.0, 2.0)
    assert metric_value("bestLoss", {"loss": 1.5}, 2.0) == (1.5, 1.5)
    assert metric_value("tokensPerSecond", {"tokensPerSecond": 900}, None) == (900.0, None)
    assert metric_value("finalLoss", {"loss": float("nan")}, None) == (None, None)
    assert metric_value("finalLoss", {"loss": "3"}, None) == (None, None)  # not a number: ignored


def test_record_progress_records_each_milestone_once():
    rec = TrialStatus(name="t", index=0)
    assert record_progress(rec, {"step": 5, "loss": 4.0}, "finalLoss", [10, 20]) == []
    assert record_progress(rec, {"step": 23, "loss": 3.0}, "finalLoss", [10, 20]) == [10, 20]
    assert [(m.step, m.value, m.at) for m in rec.milestones] == [(10, 3.0, 23), (20, 3.0, 23)]
    assert record_progress(rec, {"step": 30, "loss": 2.0}, "finalLoss", [10, 20]) == []
    assert rec.step == 30 and rec.value == 2.0 and rec.best_loss == 2.0


def test_best_trial_is_among_succeeded_lowest_index_on_ties():
    recs = [TrialStatus(name="a", index=0, phase="Succeeded", value=2.0),
            TrialStatus(name="b", index=1, phase="Running", value=1.0),
            TrialStatus(name="c", index=2, phase="Succeeded", value=2.0),
            TrialStatus(name="d", index=3, phase="Stopped", value=0.5)]
    assert best_trial(recs, "minimize").name == "a"
    assert best_trial(recs, "maximize").name == "a"
    assert best_trial(recs[1:2], "minimize") is None
