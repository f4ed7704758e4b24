"""`phalanx watch tsw/NAME` (phalanx/sweep/watch.py): a sweep's summary line, a line per changed
trial, and the exit codes."""

from __future__ import annotations

import io

import pytest

from phalanx.sweep.watch import sweep_line, watch_sweep


def test_watch_lines():
    from phalanx.sweep.local import trial_line
    from phalanx.sweep.watch import sweep_line

    status = {"phase": "Running", "progress": "1/4", "runningTrials": 2, "stoppedTrials": 1,
              "bestTrial": {"name": "lr-0", "value": 3.14159}}
    assert sweep_line(status) == "Running     done 1/4  running 2  stopped 1  best lr-0 3.1416"
    line = trial_line({"name": "lr-1", "phase": "Stopped", "step": 12, "value": 5.0, "parameters": {"training.lr": 1e-05}})
    assert line.split() == ["lr-1", "Stopped", "step", "12", "value", "5.0000", "training.lr=1e-05"]



@pytest.mark.parametrize("status, line", [
    ({}, "Pending     done 0/0  running 0"),
    ({"phase": "Running", "progress": "2/4", "runningTrials": 1, "failedTrials": 1},
     "Running     done 2/4  running 1  failed 1"),
    ({"phase": "Succeeded", "progress": "4/4", "stoppedTrials": 0, "bestTrial": {"name": "lr-2", "value": 2.0}},
     "Succeeded   done 4/4  running 0  best lr-2 2.0000"),  # no stopped trials: not shown
])
def test_sweep_line(status, line):
    assert sweep_line(status) == line


class SweepApi:
    """The TrainingSweep as the API server returns it, one status per read (the last one repeats)."""

    def __init__(self, statuses):
        self.statuses = list(statuses)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        assert (group, version, plural) == ("phalanx.dev", "v1alpha1", "trainingsweeps")
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"status": status}


def trial(name, phase, step=None, value=None):
    return {"name": name, "phase": phase, "step": step, "value": value, "parameters": {"training.lr": 0.1}}


def test_watch_sweep_prints_changes_only_and_skips_waiting_trials():
    out = io.StringIO()
    statuses = [
        {"phase": "Running", "trials": [trial("t-0", "Running", 1), trial("t-1", "Waiting")]},
        {"phase": "Running", "trials": [trial("t-0", "Running", 1), trial("t-1", "Waiting")]},  # nothing new
        {"phase": "Running", "trials": [trial("t-0", "Running", 2), trial("t-1", "Waiting")]},  # a trial moved
        {"phase": "Succeeded", "message": "best t-0", "trials": [trial("t-0", "Succeeded", 3, 1.5), trial("t-1", "Stopped")]},
    ]
    assert watch_sweep(SweepApi(statuses), "s", "ns", timeout=10, out=out, every=0) == 0
    lines = [line.split(None, 1)[1] for line in out.getvalue().splitlines()[:-1]]  # without the time stamps
    assert [line.split()[:3] for line in lines] == [
        ["s", "Running", "done"], ["t-0", "Running", "step"], ["t-0", "Running", "step"],
        ["s", "Succeeded", "done"], ["t-0", "Succeeded", "step"], ["t-1", "Stopped", "step"]]
    assert out.getvalue().splitlines()[-1] == "s: best t-0"


@pytest.mark.parametrize("status, timeout, code", [
    ({"phase": "Succeeded"}, 10, 0),
    ({"phase": "Failed", "message": "all trials failed"}, 10, 1),
    ({"phase": "Running"}, 0.05, 3),
])
def test_watch_sweep_exit_codes(status, timeout, code):
    assert watch_sweep(SweepApi([status]), "s", "ns", timeout=timeout, out=io.StringIO(), every=0.01) == code
