"""lifecycle/deadline.py: activeDeadlineSeconds from status.startTime."""

from __future__ import annotations

from datetime import timedelta

import pytest

from phalanx.lifecycle.deadline import deadline, seconds_left
from tests.lifecycle_pass import NOW, ago, gang, job, pod, prepared


@pytest.mark.parametrize(("started", "limit", "left"), [
    (None, 60, None),
    (NOW, None, None),
    (NOW, 0, None),
    (NOW, 60, 60.0),
    (NOW - timedelta(seconds=45), 60, 15.0),
    (NOW - timedelta(seconds=60), 60, 0.0),
    (NOW - timedelta(seconds=90), 60, -30.0),
])
def test_seconds_left(started, limit, left):
    assert seconds_left(started, limit, NOW) == left


@pytest.mark.parametrize(("limit", "ran", "pods", "failed", "requeue", "deleted"), [
    pytest.param(None, 1000, gang(2, phase="Running"), False, None, [], id="no-deadline"),
    pytest.param(60, None, gang(2), False, None, [], id="not-started"),
    pytest.param(60, 45, gang(2, phase="Running"), False, 15.0, [], id="requeued-for-the-deadline"),
    pytest.param(60, 60, gang(2, phase="Running"), True, None, ["job-node-0-0", "job-node-1-0"], id="at-the-deadline"),
    pytest.param(60, 90, [pod(0, phase="Running"), pod(1, phase="Succeeded")], True, None, ["job-node-0-0"],
                 id="only-alive-pods-are-deleted"),
])
def test_deadline(limit, ran, pods, failed, requeue, deleted):
    status = {"phase": "Running", "startTime": ago(ran)} if ran is not None else {"phase": "Pending"}
    ctx = prepared(job({"activeDeadlineSeconds": limit} if limit else {}, status), pods)
    plan = deadline(ctx)
    assert (plan is not None) == failed
    assert ctx.plan.requeue_after == requeue
    assert ctx.plan.delete_pods == deleted
    if failed:
        assert ctx.view.status.phase == "Failed"
        assert {c.type: c.reason for c in ctx.view.status.conditions}["Failed"] == "DeadlineExceeded"
