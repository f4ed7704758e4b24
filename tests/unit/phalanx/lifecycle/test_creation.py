"""lifecycle/creation.py: only what is missing is created; a placed native gang is created pinned."""

from __future__ import annotations

import pytest

from phalanx.decision import GangDecision
from phalanx.gang.pins import pinned_node
from phalanx.lifecycle.creation import STALE_REQUEUE_SECONDS, create_missing
from phalanx.lifecycle.pods import is_gated
from tests.lifecycle_pass import condition, conditions, gang, job, pod, prepared

PENDING = {"phase": "Pending", "restartAttempt": 1, "attemptCreated": False}
INTERRUPTED = {**PENDING, "conditions": [condition("Schedulable", "False", "PinnedCreateInterrupted")]}
NOTHING = {"service_exists": False, "config_map_exists": False, "network_policy_exists": False}
PLACED = GangDecision(release=True, pins={"job-node-0-1": "a", "job-node-1-1": "b"}, message="placed on 2 nodes")
NOT_PLACED = GangDecision(release=False, schedulable=False, reason="Insufficient", message="needs 2 nodes; 1 fits")


@pytest.mark.parametrize(("status", "pods", "observed", "decision", "kinds", "created", "schedulable", "pinned"), [
    pytest.param(PENDING, [], NOTHING, NOT_PLACED, ["Service", "ConfigMap", "Pod", "Pod", "NetworkPolicy"],
                 ("False", "CreatingPods"), ("Unknown", "GangIncomplete"), False, id="a-new-gang-behind-the-gate"),
    pytest.param(PENDING, [], {}, PLACED, ["Pod", "Pod"], ("False", "CreatingPods"), ("True", "Placed"), True,
                 id="a-placed-gang-is-created-pinned"),
    pytest.param(INTERRUPTED, [], {}, PLACED, ["Pod", "Pod"], ("False", "CreatingPods"),
                 ("Unknown", "GangIncomplete"), False, id="after-an-interrupted-pinned-creation-gated"),
    pytest.param(PENDING, [pod(0, 1, gated=True)], {}, PLACED, ["Pod"], ("False", "CreatingPods"),
                 ("Unknown", "GangIncomplete"), False, id="a-part-missing-is-created-gated"),
    pytest.param(PENDING, gang(2, attempt=1, gated=True), {}, PLACED, [], ("True", "PodsCreated"), None, False,
                 id="all-created"),
    pytest.param(PENDING, [pod(0, 0, phase="Running")], {}, PLACED, [], ("False", "WaitingForOldPods"), None, False,
                 id="waits-for-the-earlier-attempt"),
])
def test_create_missing(status, pods, observed, decision, kinds, created, schedulable, pinned):
    ctx = prepared(job(status=status), pods, **observed)
    ctx.gang = lambda job_, pods_: decision
    create_missing(ctx)
    assert [c["kind"] for c in ctx.plan.create] == kinds
    assert conditions(ctx).get("Created") == created
    assert conditions(ctx).get("Schedulable", (None, None))[:2] == (schedulable or (None, None))
    new_pods = [c for c in ctx.plan.create if c["kind"] == "Pod"]
    assert all(not is_gated(p) and pinned_node(p["spec"]) for p in new_pods) if pinned else all(map(is_gated, new_pods))
    assert ctx.plan.pins == (PLACED.pins if pinned else {})
    assert ctx.view.status.attempt_created == (created == ("True", "PodsCreated"))
    assert ctx.plan.requeue_after == (STALE_REQUEUE_SECONDS if created[1] == "WaitingForOldPods" else None)
    events = [e[1] for e in ctx.view.events]
    # Creating when the attempt has no pod yet (an earlier attempt's may still terminate); Created once
    assert events == (["Creating"] if not ctx.current else ["Created"] if created[0] == "True" else [])
