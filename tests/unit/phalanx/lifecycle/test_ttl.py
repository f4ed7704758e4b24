"""lifecycle/ttl.py: a finished job frees what still runs and is deleted ttlSecondsAfterFinished later."""

from __future__ import annotations

from datetime import timedelta

import pytest

from phalanx.lifecycle.ttl import finished, seconds_to_deletion
from tests.lifecycle_pass import NOW, ago, job, pod, prepared


@pytest.mark.parametrize(("completed", "ttl", "left"), [
    (None, 60, None),
    (NOW, None, None),
    (NOW, 0, 0.0),
    (NOW - timedelta(seconds=20), 60, 40.0),
    (NOW - timedelta(seconds=61), 60, -1.0),
])
def test_seconds_to_deletion(completed, ttl, left):
    assert seconds_to_deletion(completed, ttl, NOW) == left


@pytest.mark.parametrize(("phase", "ttl", "done_ago", "decided", "delete_job", "requeue"), [
    pytest.param("Running", 0, None, False, False, None, id="not-finished"),
    pytest.param("Succeeded", None, 3600, True, False, None, id="kept-without-a-ttl"),
    pytest.param("Succeeded", 60, 20, True, False, 40.0, id="waits-for-the-ttl"),
    pytest.param("Failed", 60, 60, True, True, None, id="deleted-at-the-ttl"),
    pytest.param("Failed", 0, 0, True, True, None, id="ttl-zero-deletes-at-once"),
    pytest.param("Succeeded", 60, None, True, False, None, id="no-completion-time-recorded"),
])
def test_finished(phase, ttl, done_ago, decided, delete_job, requeue):
    status = {"phase": phase, "readyNodes": 2}
    if done_ago is not None:
        status["completionTime"] = ago(done_ago)
    pods = [pod(0, phase="Running"), pod(1, phase="Succeeded"), pod(2, phase="Running", deleting=True)]
    ctx = prepared(job({"ttlSecondsAfterFinished": ttl} if ttl is not None else {}, status), pods)
    plan = finished(ctx)
    assert (plan is not None) == decided
    assert ctx.plan.delete_job == delete_job
    assert ctx.plan.requeue_after == requeue
    if decided:
        assert ctx.plan.delete_pods == ["job-node-0-0"]  # what still runs: not ended, not being deleted
        assert ctx.view.status.ready_nodes == 0
