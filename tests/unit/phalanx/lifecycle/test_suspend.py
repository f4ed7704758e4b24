"""lifecycle/suspend.py: spec.suspend deletes the gang; unsuspending starts a new attempt."""

from __future__ import annotations

import pytest

from phalanx.lifecycle.suspend import suspend_or_resume
from tests.lifecycle_pass import conditions, gang, job, pod, prepared

RUNNING = {"phase": "Running", "restartAttempt": 0, "attemptCreated": True}
SUSPENDED = {"phase": "Suspended", "restartAttempt": 0, "attemptCreated": True}


@pytest.mark.parametrize(("suspend", "status", "pods", "final", "phase", "attempt", "deleted", "suspended"), [
    pytest.param(True, RUNNING, gang(2, phase="Running"), True, "Suspended", 0, ["job-node-0-0", "job-node-1-0"],
                 ("True", "Suspended"), id="suspend-deletes-the-gang"),
    pytest.param(True, RUNNING, [pod(0, deleting=True), pod(1)], True, "Suspended", 0, ["job-node-1-0"],
                 ("True", "Suspended"), id="suspend-skips-pods-being-deleted"),
    pytest.param(True, SUSPENDED, [], True, "Suspended", 0, [], ("True", "Suspended"), id="stays-suspended"),
    pytest.param(False, SUSPENDED, [pod(0, deleting=True)], False, "Pending", 1, [], ("False", "Resumed"),
                 id="resume-starts-a-new-attempt"),
    pytest.param(False, RUNNING, gang(2, phase="Running"), False, "Running", 0, [], None, id="not-suspended"),
])
def test_suspend_or_resume(suspend, status, pods, final, phase, attempt, deleted, suspended):
    ctx = prepared(job({"suspend": suspend}, status), pods)
    plan = suspend_or_resume(ctx)
    assert (plan is not None) == final
    assert ctx.view.status.phase == phase
    assert ctx.view.status.restart_attempt == attempt
    assert ctx.plan.delete_pods == deleted
    assert conditions(ctx).get("Suspended") == suspended
    if suspend:
        assert conditions(ctx)["Running"] == ("False", "Suspended") and ctx.view.status.ready_nodes == 0
    if phase == "Pending":
        assert ctx.view.status.attempt_created is False and ctx.current == []
