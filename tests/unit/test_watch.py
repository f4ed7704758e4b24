"""`phalanx watch`: the status line and the exit codes."""

from __future__ import annotations

import io

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
