"""components/progress.py: a phase without steps is reported with a heartbeat, and undone after."""

from __future__ import annotations

import time

import pytest

from phalanx_runtime.components.progress import Progress, reporting_phase


def test_a_phase_is_reported_with_a_heartbeat_and_the_previous_phase_comes_back():
    progress = Progress(10, 1)
    progress.update(phase="Running")
    with reporting_phase(progress, "Exporting", every=0.01):
        assert progress.snapshot()["phase"] == "Exporting"
        first = progress.snapshot()["updatedAt"]
        deadline = time.time() + 5
        while progress.snapshot()["updatedAt"] == first and time.time() < deadline:
            time.sleep(0.01)
        assert progress.snapshot()["updatedAt"] > first  # refreshed with no update of the caller's
    assert progress.snapshot()["phase"] == "Running"


def test_the_phase_ends_when_the_work_fails():
    progress = Progress(10, 1)
    with pytest.raises(RuntimeError), reporting_phase(progress, "Preparing", every=0.01):
        raise RuntimeError("tokenizer missing")
    assert progress.snapshot()["phase"] == "Starting"
