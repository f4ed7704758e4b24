"""lifecycle/replacement.py: gangs replaced without a failure — unbound after release, or a pinned
creation cut short."""

from __future__ import annotations

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.lifecycle.replacement import (
    INTERRUPTED_AFTER_SECONDS,
    REFUSED_GRACE_SECONDS,
    recreate_interrupted,
    replan_unbound,
)
from tests.lifecycle_pass import condition, conditions, gang, job, pod, prepared

CONFIG = OperatorConfig(bindTimeoutSeconds=60)


def released(seconds: float, **status) -> dict:
    return {"phase": "Scheduling", "restartAttempt": 0, "attemptCreated": True,
            "conditions": [condition("Schedulable", "True", "Placed", since=seconds)], **status}


@pytest.mark.parametrize(("status", "pods", "replaced"), [
    pytest.param(released(120), gang(2, created=120), True, id="unbound-past-the-timeout"),
    pytest.param(released(30), gang(2, created=30), False, id="within-the-timeout"),
    pytest.param(released(120), gang(2, created=30), False, id="the-clock-runs-from-the-newest-pod"),
    pytest.param(released(120), gang(2, node="n", created=120), False, id="all-bound"),
    pytest.param(released(120), gang(2, gated=True, created=120), False, id="still-gated"),
    pytest.param(released(120), [pod(0, created=120)], False, id="gang-incomplete"),
])
def test_replan_unbound(status, pods, replaced):
    ctx = prepared(job(status=status), pods, config=CONFIG)
    plan = replan_unbound(ctx)
    assert (plan is not None) == replaced
    assert ctx.view.status.restart_attempt == (1 if replaced else 0)
    if replaced:
        assert conditions(ctx)["Schedulable"] == ("False", "Replanning") and ctx.view.status.restarts == 0
        assert ctx.plan.delete_pods == ["job-node-0-0", "job-node-1-0"] and ctx.view.status.phase == "Pending"


PENDING = {"phase": "Pending", "restartAttempt": 0, "attemptCreated": False}
REFUSED = {**PENDING, "conditions": [condition("Created", "False", "CreateRefused")]}


@pytest.mark.parametrize(("status", "pods", "spec", "replaced", "requeue"), [
    pytest.param(PENDING, [pod(0, created=INTERRUPTED_AFTER_SECONDS)], {}, True, None, id="part-of-a-pinned-gang"),
    pytest.param(PENDING, [pod(0, created=5)], {}, False, INTERRUPTED_AFTER_SECONDS - 5, id="the-index-may-lag"),
    pytest.param(REFUSED, [pod(0, created=REFUSED_GRACE_SECONDS)], {}, True, None, id="refused-shorter-grace"),
    pytest.param(PENDING, [pod(0, created=60, gated=True)], {}, False, None, id="gated-pods-wait-safely"),
    pytest.param(PENDING, gang(2, created=60), {}, False, None, id="complete"),
    pytest.param({**PENDING, "attemptCreated": True}, [pod(0, created=60)], {}, False, None, id="a-created-gang-lost-a-pod"),
    pytest.param(PENDING, [pod(0, created=60)], {"scheduling": {"backend": "kueue", "queue": "lq"}}, False, None,
                 id="only-native-gangs-are-pinned"),
])
def test_recreate_interrupted(status, pods, spec, replaced, requeue):
    ctx = prepared(job(spec, status), pods)
    plan = recreate_interrupted(ctx)
    assert (plan is not None) == (replaced or requeue is not None)
    assert ctx.plan.requeue_after == requeue
    assert ctx.view.status.restart_attempt == (1 if replaced else 0)
    if replaced:
        assert conditions(ctx)["Schedulable"] == ("False", "PinnedCreateInterrupted")
        assert ctx.plan.delete_pods == ["job-node-0-0"]
        assert [e[:2] for e in ctx.view.events] == [("Warning", "PinnedCreateInterrupted")]
