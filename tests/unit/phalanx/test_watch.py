"""`phalanx watch`: the status line and the exit codes."""

from __future__ import annotations

import io

import pytest

from phalanx.watch import progress_line, watch


def test_progress_line_running():
    status = {"phase": "Running", "nodes": "2/2", "step": 12, "totalSteps": 30, "loss": 4.56789,
              "tokensPerSecond": 812.4, "lastCheckpoint": {"step": 10},
              "conditions": [{"type": "Created", "status": "True", "reason": "AllPodsCreated", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                             {"type": "Running", "status": "True", "reason": "AllNodesReady", "lastTransitionTime": "2026-01-01T00:01:00Z"}]}
    line = progress_line(status)
    assert line.split() == ["Running", "nodes", "2/2", "step", "12/30", "loss", "4.5679", "812", "tok/s",
                            "checkpoint", "step-10", "(Running=True:", "AllNodesReady)"]


def test_progress_line_empty_status_is_pending():
    assert progress_line({}).split() == ["Pending", "nodes", "0/0"]


def test_progress_line_shows_restarts():
    assert "restarts 2" in progress_line({"phase": "Restarting", "restarts": 2})


class FakeApi:
    def __init__(self, statuses):
        self.statuses = list(statuses)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        assert (group, version, plural) == ("phalanx.dev", "v1alpha1", "trainingjobs")
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"status": status}


def test_watch_prints_changes_only_and_exits_0_on_success():
    out = io.StringIO()
    api = FakeApi([{"phase": "Pending"}, {"phase": "Pending"}, {"phase": "Running", "step": 1},
                   {"phase": "Succeeded", "step": 30, "message": "done"}])
    assert watch(api, "j", "ns", timeout=10, out=out, every=0) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[-1] == "j: done"


def test_watch_exit_codes_failed_and_timeout():
    assert watch(FakeApi([{"phase": "Failed", "message": "x"}]), "j", "ns", timeout=10, out=io.StringIO(), every=0) == 1
    assert watch(FakeApi([{"phase": "Running"}]), "j", "ns", timeout=0.05, out=io.StringIO(), every=0.01) == 3


# ---------------------------------------------------------------- the curves in the terminal

class TtyIO(io.StringIO):
    def isatty(self):
        return True


def running(step, loss, tps=1000.0):
    return {"phase": "Running", "step": step, "totalSteps": 5, "loss": loss, "tokensPerSecond": tps}


def test_watch_sparkline_on_lines_and_charts_at_the_end():
    out = io.StringIO()
    statuses = [running(s, 5.0 - s) for s in range(1, 5)] + [{**running(5, 0.5), "phase": "Succeeded"}]
    assert watch(FakeApi(statuses), "j", "ns", timeout=10, out=out, every=0) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert "loss" not in lines[0].split("tok/s")[1]  # one point: no sparkline yet
    assert lines[3].endswith("loss █▆▃▁")
    assert lines.count("loss") == 1 and lines.count("tokens/s") == 1  # the charts, once, at the end
    assert "\x1b[" not in text  # not a terminal: no cursor movement


def test_watch_on_a_terminal_redraws_the_charts_under_the_lines():
    out = TtyIO()
    statuses = [running(s, 5.0 - s) for s in range(1, 5)] + [{**running(5, 0.5), "phase": "Succeeded"}]
    watch(FakeApi(statuses), "j", "ns", timeout=10, out=out, every=0)
    text = out.getvalue()
    assert text.count("\x1b[J") == 3  # charts erased before each line once drawn (2nd point on)
    last = text.split("\x1b[J")[-1].splitlines()
    assert "Succeeded" in last[0] and last[1] == "loss" and "tokens/s" in last  # redrawn once more, not twice
    assert text.count("\nloss\n") == 4  # drawn under lines 2-5


def test_watch_no_chart():
    out = TtyIO()
    statuses = [running(s, 5.0 - s) for s in range(1, 4)] + [{**running(4, 0.5), "phase": "Succeeded"}]
    watch(FakeApi(statuses), "j", "ns", timeout=10, out=out, every=0, charts=False)
    assert "\x1b[" not in out.getvalue() and "tokens/s\n" not in out.getvalue()


def test_progress_line_shows_each_roles_readiness():
    line = progress_line({"phase": "Running", "nodes": "2/2", "rolesReady": "worker:2/2 ps:1/2"})
    assert "nodes 2/2  roles worker:2/2 ps:1/2" in line


@pytest.mark.parametrize("metrics, words", [
    (None, ""),
    ({}, ""),
    ({"eval_loss": 1.23456, "learning_rate": 2e-5}, "eval_loss 1.235  learning_rate 2e-05"),
    ({f"m{i}": i for i in range(5)}, "m0 0  m1 1  m2 2  +2 metrics"),
    ({"junk": "x", "ok": 1}, "ok 1"),
    ("not a map", ""),
])
def test_progress_line_shows_a_command_jobs_reported_metrics(metrics, words):
    status = {"phase": "Running", "nodes": "2/2", "step": 40, "totalSteps": 80, "loss": 1.5, "metrics": metrics}
    line = progress_line(status)
    assert line.startswith("Running     nodes 2/2  step 40/80  loss 1.5000")
    assert line.endswith(words) if words else line.endswith("loss 1.5000")
