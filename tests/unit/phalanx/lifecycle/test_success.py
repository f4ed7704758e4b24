"""lifecycle/success.py: every pod of the roles that decide success exited 0."""

from __future__ import annotations

import pytest

from phalanx.lifecycle.success import succeeded
from tests.lifecycle_pass import gang, job, pod, prepared


@pytest.mark.parametrize(("pods", "done", "message"), [
    pytest.param(gang(2, phase="Succeeded"), True, "all 2 nodes completed", id="every-pod-exited-0"),
    pytest.param([pod(0, phase="Succeeded"), pod(1, phase="Running")], False, None, id="one-still-runs"),
    pytest.param([pod(0, phase="Succeeded")], False, None, id="one-missing"),
    pytest.param([], False, None, id="no-pods"),
    pytest.param([pod(0, phase="Succeeded"), pod(1, phase="Failed")], False, None, id="one-failed"),
])
def test_succeeded(pods, done, message):
    ctx = prepared(job(status={"phase": "Running", "readyNodes": 2}), pods)
    plan = succeeded(ctx)
    assert (plan is not None) == done
    if done:
        assert ctx.view.status.phase == "Succeeded" and ctx.view.status.message == message
        kinds = {c.type: (c.status, c.reason) for c in ctx.view.status.conditions}
        assert kinds["Succeeded"] == ("True", "Succeeded") and kinds["Failed"][0] == "False"
        assert ctx.view.status.ready_nodes == 0 and ctx.view.status.completion_time
    else:
        assert ctx.view.status.phase == "Running"
