"""`phalanx local SWEEP.yaml` (phalanx/sweep/local.py): a trial's TrainingJob status as its local
run would have it (progress from its metrics log, the end from its exit code and --json summary),
and a sweep the operator would refuse starts nothing."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from phalanx import constants
from phalanx.sweep import local
from phalanx.sweep.local import LocalTrial, run_local_sweep, trial_line

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "sweep-lr.yaml"


@pytest.mark.parametrize("lines, progress", [
    ([], {}),
    (['{"step": 1, "loss": 5.0}', '{"step": 2, "loss": 4.0}'], {"step": 2, "loss": 4.0}),
    (['{"step": 1, "loss": 5.0}', '{"step": 2, "lo'], {"step": 1, "loss": 5.0}),  # a torn last line
    (['{"step": 1}', '{"step": "2"}', "[1, 2]"], {"step": 1}),  # a record has an integer step
    (["not json"], {}),
    # the reporter's lines: each metric's latest value, whichever line last carried it
    (['{"step": 10, "loss": 2.0, "eval_loss": 2.5, "time": 1.0, "epoch": 0.5}', '{"step": 11, "loss": 1.9, "tokens_per_s": 900}'],
     {"step": 11, "loss": 1.9, "tokensPerSecond": 900, "metrics": {"eval_loss": 2.5}}),
    (['{"step": 1, "eval_loss": 3.0}', '{"step": 2, "eval_loss": 2.0, "eval_accuracy": 0.5}'],
     {"step": 2, "metrics": {"eval_loss": 2.0, "eval_accuracy": 0.5}}),
    # what the operator would drop: non-finite, not numbers, names outside the pattern
    (['{"step": 1, "eval_loss": NaN, "flag": true, "note": "x", "bad name": 1, "lr/group0": 0.1}'],
     {"step": 1, "metrics": {"lr/group0": 0.1}}),
    (['{"step": 1, "loss": NaN}'], {"step": 1, "loss": pytest.approx(float("nan"), nan_ok=True)}),  # LossNotFinite's input
])
def test_the_progress_a_metrics_log_shows(tmp_path, lines, progress):
    path = tmp_path / constants.METRICS_LOG_FILE
    path.write_text("\n".join(lines))
    assert local.MetricsLog(path).read(final=True) == progress


def test_a_missing_metrics_log_shows_nothing(tmp_path):
    assert local.MetricsLog(tmp_path / constants.METRICS_LOG_FILE).read() == {}


def test_reported_metrics_are_bounded():
    progress: dict = {}
    local.apply_record(progress, {"step": 1, **{f"m{i}": i for i in range(constants.MAX_REPORTED_METRICS + 5)}})
    assert len(progress["metrics"]) == constants.MAX_REPORTED_METRICS
    local.apply_record(progress, {"step": 2, "m0": 7.0, "late": 1.0})  # a known name updates; no new one
    assert progress["metrics"]["m0"] == 7.0 and "late" not in progress["metrics"]


def test_the_log_is_read_as_it_grows_a_partial_line_once_complete(tmp_path):
    path = tmp_path / constants.METRICS_LOG_FILE
    log = local.MetricsLog(path)
    path.write_text('{"step": 1, "eval_loss": 3.0}\n{"step": 2, "eval_')
    assert log.read() == {"step": 1, "metrics": {"eval_loss": 3.0}}
    with path.open("a") as f:
        f.write('loss": 2.0}\n{"step": 3, "loss": 1.0}\n')
    assert log.read() == {"step": 3, "loss": 1.0, "metrics": {"eval_loss": 2.0}}
    assert log.offset == path.stat().st_size


@pytest.mark.parametrize("summary, progress", [
    ({"final_loss": 2.5, "steps": 40, "tokens_per_s": 1200.0, "world_size": 2},  # the built-in runtime's
     {"step": 40, "loss": 2.5, "tokensPerSecond": 1200.0}),
    ({"mode": "command", "step": 30, "loss": 1.5, "metrics": {"eval_loss": 1.7, "bad": "x"}},  # a command job's
     {"step": 30, "loss": 1.5, "metrics": {"eval_loss": 1.7}}),
    ({"mode": "command", "world_size": 1, "exit_codes": [0]}, {}),  # a command job that reported nothing
    ({"step": None, "loss": None, "metrics": None}, {}),
])
def test_the_final_progress_of_a_summary(summary, progress):
    assert local.final_progress(summary) == progress


@pytest.mark.parametrize("trial, words", [
    ({"name": "t-0", "phase": "Waiting"}, ["t-0", "Waiting", "step", "-", "value", "-"]),
    ({"name": "t-1", "phase": "Running", "step": 0, "value": 0.0, "parameters": {"a": 1, "b": "x"}},
     ["t-1", "Running", "step", "0", "value", "0.0000", "a=1", "b=x"]),  # 0 is a step and a value, not "-"
])
def test_trial_line(trial, words):
    assert trial_line(trial).split() == words


def _finished(tmp_path, code, output="", suspended=False, metrics=None):
    """A trial whose process (a real one, standing in for `phalanx local`) printed ``output`` and exited."""
    trial = LocalTrial({"metadata": {"name": "t-0"}, "spec": {}}, tmp_path)
    if metrics is not None:
        (trial.dir / constants.METRICS_LOG_FILE).write_text(json.dumps(metrics) + "\n")
    if suspended:
        trial.stop()
    with trial.log.open("a") as log:
        trial.proc = subprocess.Popen([sys.executable, "-c", f"import sys; print({output!r}); sys.exit({code})"],
                                      stdout=log, stderr=subprocess.STDOUT)
    trial.proc.wait()
    trial.poll()
    return trial


def test_a_trial_that_exits_0_succeeded_with_its_summarys_results(tmp_path):
    summary = json.dumps({"steps": 40, "final_loss": 2.5, "tokens_per_s": 1200.0})
    trial = _finished(tmp_path, 0, output="training...\n" + summary + "\ndone",
                      metrics={"step": 39, "loss": 2.6, "tokens_per_s": 1100.0})
    assert trial.job["status"] == {"phase": "Succeeded", "step": 40, "loss": 2.5, "tokensPerSecond": 1200.0}
    assert trial.proc is None


def test_a_command_trials_summary_metrics_are_the_last_word_over_its_log(tmp_path):
    summary = json.dumps({"mode": "command", "step": 30, "loss": 1.5, "metrics": {"eval_loss": 1.7}})
    trial = _finished(tmp_path, 0, output=summary,
                      metrics={"step": 29, "loss": 1.6, "eval_loss": 1.8, "eval_accuracy": 0.9})
    assert trial.job["status"] == {"phase": "Succeeded", "step": 30, "loss": 1.5,
                                   "metrics": {"eval_loss": 1.7, "eval_accuracy": 0.9}}


def test_a_trial_without_a_summary_keeps_its_last_logged_progress(tmp_path):
    trial = _finished(tmp_path, 0, metrics={"step": 39, "loss": 2.6, "tokens_per_s": 1100.0})
    assert trial.job["status"] == {"phase": "Succeeded", "step": 39, "loss": 2.6, "tokensPerSecond": 1100.0}


@pytest.mark.parametrize("suspended, phase", [(False, "Failed"), (True, "Suspended")])
def test_a_trial_that_exits_non_zero_failed_unless_it_was_stopped(tmp_path, suspended, phase):
    trial = _finished(tmp_path, 143 if suspended else 3, suspended=suspended)
    assert trial.job["status"]["phase"] == phase and trial.job["spec"]["suspend"] is suspended
    if phase == "Failed":
        assert trial.job["status"]["message"] == f"exited with code 3; log: {trial.log}"


def test_a_sweep_the_operator_would_refuse_starts_nothing(tmp_path, capsys):
    sweep = next(yaml.safe_load_all(EXAMPLE.read_text()))
    sweep["spec"]["parameters"].append({"path": "training.lrr", "values": [1]})
    out = io.StringIO()
    assert run_local_sweep(sweep, checkpoint_dir=str(tmp_path / "work"), out=out) == 1
    assert "TrainingSweep lr-sweep: spec.parameters[1].path: training.lrr: unknown field 'lrr'" in capsys.readouterr().err
    assert out.getvalue() == "" and not (tmp_path / "work").exists()
