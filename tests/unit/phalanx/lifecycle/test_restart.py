"""lifecycle/restart.py: restart the whole gang after a retryable failure, until maxRestarts."""

from __future__ import annotations

import pytest

from phalanx.lifecycle.restart import MIN_REQUEUE_SECONDS, failed, restart_backoff
from tests.lifecycle_pass import ago, gang, job, pod, prepared

RUNNING = {"phase": "Running", "restartAttempt": 0, "attemptCreated": True, "startTime": ago(100)}
POLICY = {"failurePolicy": {"maxRestarts": 2, "backoffSeconds": 10, "maxBackoffSeconds": 300}}


@pytest.mark.parametrize(("pods", "restarts", "spec", "phase", "reason", "requeue"), [
    pytest.param([pod(0, phase="Failed", exit_code=137), pod(1, phase="Running")], 0, POLICY, "Restarting", "Restarting",
                 10.0, id="retryable-restarts"),
    pytest.param([pod(0, phase="Failed", exit_code=137), pod(1, phase="Running")], 1, POLICY, "Restarting", "Restarting",
                 20.0, id="backoff-doubles"),
    pytest.param([pod(0, phase="Failed", exit_code=143), pod(1, phase="Running")], 0,
                 {"failurePolicy": {"backoffSeconds": 0}}, "Restarting", "Restarting", MIN_REQUEUE_SECONDS,
                 id="zero-backoff-still-requeues"),
    pytest.param([pod(0, phase="Failed", exit_code=137), pod(1, phase="Running")], 2, POLICY, "Failed",
                 "MaxRestartsExceeded", None, id="max-restarts-used-up"),
    pytest.param([pod(0, phase="Failed", exit_code=1), pod(1, phase="Running")], 0, POLICY, "Failed", "PermanentFailure",
                 None, id="permanent-exit-code"),
    pytest.param([pod(0, phase="Failed", reason="Evicted"), pod(1, phase="Running")], 0, POLICY, "Restarting",
                 "Restarting", 10.0, id="evicted-is-retryable"),
    pytest.param([pod(0, phase="Running")], 0, POLICY, "Restarting", "Restarting", 10.0, id="a-lost-pod"),
    pytest.param(gang(2, phase="Running"), 0, POLICY, "Running", None, None, id="no-failure"),
])
def test_failed(pods, restarts, spec, phase, reason, requeue):
    ctx = prepared(job(spec, {**RUNNING, "restarts": restarts}), pods)
    plan = failed(ctx)
    status = ctx.view.status
    assert (plan is not None) == (reason is not None)
    assert status.phase == phase and ctx.plan.requeue_after == requeue
    if phase == "Restarting":
        assert status.restarts == restarts + 1 and status.restart_attempt == 1 and status.attempt_created is False
        assert status.next_restart_time is not None and status.last_failure is not None
        assert sorted(ctx.plan.delete_pods) == sorted(p["metadata"]["name"] for p in pods)
    if phase == "Failed":
        assert status.restarts == restarts and status.restart_attempt == 0
        assert {c.type: c.reason for c in status.conditions}["Failed"] == reason
        assert ctx.plan.delete_pods == ["job-node-1-0"]  # the pods still alive


@pytest.mark.parametrize(("restart_at", "waits", "requeue"), [
    pytest.param(None, False, None, id="no-restart-pending"),
    pytest.param(-5, True, 5.0, id="backoff-not-over"),
    pytest.param(5, False, None, id="backoff-over"),
])
def test_restart_backoff(restart_at, waits, requeue):
    status = {"phase": "Restarting", "restartAttempt": 1}
    if restart_at is not None:
        status["nextRestartTime"] = ago(restart_at)
    ctx = prepared(job(status=status), [])
    plan = restart_backoff(ctx)
    assert (plan is not None) == waits and ctx.plan.requeue_after == requeue
    assert (ctx.view.status.next_restart_time is not None) == waits
