"""Early-stopping rules: milestones, the median rule, ASHA."""

from __future__ import annotations

import pytest

from phalanx.api.sweep import EarlyStopping
from phalanx.sweep.earlystop import median_verdict, milestones, verdict


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
