"""lifecycle/admission_withdrawn.py: Kueue took the gang's admission back → a new queued attempt."""

from __future__ import annotations

import pytest

from phalanx.decision import Schedulable
from phalanx.lifecycle.admission_withdrawn import admission_withdrawn
from tests.lifecycle_pass import condition, conditions, gang, job, pod, prepared

CREATED = {"phase": "Running", "restartAttempt": 0, "attemptCreated": True}
KUEUE_SUSPENDED = {**CREATED, "conditions": [condition("Suspended", "True", "Preempted")]}
USER_SUSPENDED = {**CREATED, "conditions": [condition("Suspended", "True", "Suspended")]}
ADMITTED = Schedulable(True, "Admitted", "admitted by ClusterQueue cq")


@pytest.mark.parametrize(("status", "pods", "observed", "decided", "attempt", "suspended"), [
    pytest.param(CREATED, [pod(0, phase="Running", deleting=True)], {"backend_evicted": ("Preempted", "preempted")},
                 True, 1, ("True", "Preempted"), id="evicted-while-its-pods-go"),
    pytest.param({**CREATED, "attemptCreated": False}, [pod(0)], {"backend_evicted": ("Preempted", "preempted")},
                 False, 0, None, id="a-gang-still-being-created-is-not-withdrawn"),
    pytest.param(CREATED, gang(2, phase="Running"), {"backend_evicted": ("Preempted", "preempted")}, False, 0, None,
                 id="all-pods-alive-behind-a-stale-eviction"),
    pytest.param(KUEUE_SUSPENDED, gang(2), {"backend_schedulable": ADMITTED}, False, 0, ("False", "Admitted"),
                 id="readmitted-ends-suspended"),
    pytest.param(USER_SUSPENDED, gang(2), {"backend_schedulable": ADMITTED}, False, 0, ("True", "Suspended"),
                 id="spec-suspend-is-not-the-admitters-to-end"),
    pytest.param(KUEUE_SUSPENDED, gang(2), {"backend_schedulable": Schedulable(False, "Pending", "")}, False, 0,
                 ("True", "Preempted"), id="not-readmitted-yet"),
    pytest.param(CREATED, gang(2, phase="Running"), {}, False, 0, None, id="nothing-withdrawn"),
])
def test_admission_withdrawn(status, pods, observed, decided, attempt, suspended):
    ctx = prepared(job(status=status), pods, **observed)
    plan = admission_withdrawn(ctx)
    assert (plan is not None) == decided
    assert ctx.view.status.restart_attempt == attempt
    assert conditions(ctx).get("Suspended") == suspended
    if decided:
        assert ctx.view.status.phase == "Pending" and ctx.view.status.restarts == 0  # not a failure
        assert ctx.view.status.attempt_created is False
        assert ctx.plan.delete_pods == []  # its only pod is being deleted already
