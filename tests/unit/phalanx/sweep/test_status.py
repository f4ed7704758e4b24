"""The status records of a sweep's trials: metric values, milestones recorded once, the best trial."""

from __future__ import annotations

from phalanx.api.sweep import TrialStatus
from phalanx.sweep.status import best_trial, metric_value, record_progress


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
