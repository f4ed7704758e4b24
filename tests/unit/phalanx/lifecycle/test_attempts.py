"""lifecycle/attempts.py: the one way a new attempt starts, and which pods belong to the current one."""

from __future__ import annotations

import pytest

from phalanx.lifecycle.attempts import split_attempts, start_new_attempt
from tests.lifecycle_pass import gang, job, pod, prepared


@pytest.mark.parametrize(("status", "pods", "attempt", "deleted"), [
    pytest.param({"restartAttempt": 0, "attemptCreated": True}, gang(2), 1, ["job-node-0-0", "job-node-1-0"],
                 id="a-created-gang-is-deleted"),
    pytest.param({"restartAttempt": 4, "attemptCreated": True}, gang(2, attempt=4), 5, ["job-node-0-4", "job-node-1-4"],
                 id="the-number-follows-the-last"),
    pytest.param({"restartAttempt": 2, "attemptCreated": False}, [pod(0, 2), pod(1, 2, deleting=True)], 3,
                 ["job-node-0-2"], id="a-pod-being-deleted-is-not-deleted-twice"),
    pytest.param({"restartAttempt": 1}, [], 2, [], id="no-pods-yet"),
])
def test_start_new_attempt(status, pods, attempt, deleted):
    ctx = prepared(job(status=status), pods)
    start_new_attempt(ctx)
    assert ctx.view.status.restart_attempt == attempt and ctx.attempt == attempt
    assert ctx.view.status.attempt_created is False
    assert ctx.plan.delete_pods == deleted
    assert ctx.current == []


@pytest.mark.parametrize(("attempt", "pods", "current", "stale"), [
    pytest.param(0, gang(2), ["job-node-0-0", "job-node-1-0"], [], id="all-current"),
    pytest.param(1, gang(2) + gang(1, attempt=1), ["job-node-0-1"], ["job-node-0-0", "job-node-1-0"],
                 id="earlier-attempt-is-stale"),
    pytest.param(1, [pod(0, 0, "Succeeded", deleting=True), pod(1, 0, "Running", deleting=True)], [],
                 ["job-node-1-0"], id="an-ended-pod-being-deleted-blocks-nothing"),
])
def test_split_attempts(attempt, pods, current, stale):
    ctx = prepared(job(status={"restartAttempt": attempt}), [])
    ctx.observed.pods = pods
    ctx.plan.delete_pods = []
    split_attempts(ctx)
    assert [p["metadata"]["name"] for p in ctx.current] == current
    assert [p["metadata"]["name"] for p in ctx.stale] == stale
    assert ctx.plan.delete_pods == [p["metadata"]["name"] for p in ctx.stale if not p["metadata"].get("deletionTimestamp")]
