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


@pytest.mark.parametrize("lines, record", [
    ([], None),
    (['{"step": 1, "loss": 5.0}', '{"step": 2, "loss": 4.0}'], {"step": 2, "loss": 4.0}),
    (['{"step": 1, "loss": 5.0}', '{"step": 2, "lo'], {"step": 1, "loss": 5.0}),  # a torn last line
    (['{"step": 1}', '{"step": "2"}', "[1, 2]"], {"step": 1}),  # a record has an integer step
    (["not json"], None),
])
def test_the_last_record_of_a_metrics_log(tmp_path, lines, record):
    path = tmp_path / constants.METRICS_LOG_FILE
    path.write_text("\n".join(lines))
    assert local._last_record(path) == record


def test_a_missing_metrics_log_has_no_record(tmp_path):
    assert local._last_record(tmp_path / constants.METRICS_LOG_FILE) is None


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
