"""lifecycle/placement.py: a gated gang is placed once every pod exists; one that cannot be placed
waits or fails at its gang timeout."""

from __future__ import annotations

import pytest

from phalanx.decision import GangDecision, Schedulable
from phalanx.lifecycle.placement import place_gang, seconds_unschedulable
from tests.lifecycle_pass import NOW, condition, conditions, gang, job, pod, prepared

CREATED = {"phase": "Pending", "restartAttempt": 0, "attemptCreated": True}
PLACED = GangDecision(release=True, pins={"job-node-0-0": "a", "job-node-1-0": "b"}, message="placed on 2 nodes",
                      placement={"nodes": ["a", "b"], "span": {}})
NO_ROOM = GangDecision(release=False, schedulable=False, reason="Insufficient", message="needs 2 nodes; 1 fits")
FAIL_AT_60 = {"scheduling": {"gangTimeoutSeconds": 60, "onGangTimeout": "Fail"}}


def unschedulable_for(seconds: float) -> dict:
    return {**CREATED, "conditions": [condition("Schedulable", "False", "Insufficient", since=seconds)]}


@pytest.mark.parametrize(("status", "pods", "decision", "spec", "observed", "release", "schedulable", "phase"), [
    pytest.param(CREATED, gang(2, gated=True), PLACED, {}, {}, ["job-node-0-0", "job-node-1-0"], ("True", "Placed"),
                 "Pending", id="placed-gates-lifted-together"),
    pytest.param({**CREATED, "attemptCreated": False}, gang(2, gated=True), PLACED, {}, {}, [], None, "Pending",
                 id="not-all-created-yet"),
    pytest.param(CREATED, [pod(0, gated=True)], PLACED, {}, {}, [], None, "Pending", id="a-pod-missing"),
    pytest.param(CREATED, gang(2, gated=True), NO_ROOM, {}, {}, [], ("False", "Insufficient"), "Pending",
                 id="no-room-waits"),
    pytest.param(unschedulable_for(30), gang(2, gated=True), NO_ROOM, FAIL_AT_60, {}, [], ("False", "Insufficient"),
                 "Pending", id="before-the-gang-timeout"),
    pytest.param(unschedulable_for(60), gang(2, gated=True), NO_ROOM, FAIL_AT_60, {}, [], ("False", "Insufficient"),
                 "Failed", id="gang-timeout-fails"),
    pytest.param(unschedulable_for(600), gang(2, gated=True), NO_ROOM, {"scheduling": {"gangTimeoutSeconds": 60}}, {},
                 [], ("False", "Insufficient"), "Pending", id="gang-timeout-waits-by-default"),
    pytest.param(CREATED, gang(2), PLACED, {}, {}, [], ("True", "GatesLifted"), "Pending", id="released-earlier"),
    pytest.param(CREATED, gang(2), PLACED, {}, {"backend_schedulable": Schedulable("False", "Unschedulable", "no room")}, [],
                 ("False", "Unschedulable"), "Pending", id="the-schedulers-own-verdict"),
])
def test_place_gang(status, pods, decision, spec, observed, release, schedulable, phase):
    ctx = prepared(job(spec, status), pods, **observed)
    ctx.gang = lambda job_, pods_: decision
    plan = place_gang(ctx)
    assert (plan is not None) == (phase == "Failed")
    assert ctx.plan.release == release
    assert ctx.plan.pins == (dict(decision.pins) if release else {})
    assert conditions(ctx).get("Schedulable") == schedulable
    assert ctx.view.status.phase == phase
    if phase == "Failed":
        assert conditions(ctx)["Failed"] == ("True", "GangTimeout") and ctx.plan.delete_pods == ["job-node-0-0", "job-node-1-0"]


@pytest.mark.parametrize(("conds", "seconds"), [
    ([], 0.0),
    ([condition("Schedulable", "True", since=100)], 0.0),
    ([condition("Schedulable", "Unknown", since=100)], 0.0),
    ([condition("Schedulable", "False", since=100)], 100.0),
])
def test_seconds_unschedulable(conds, seconds):
    ctx = prepared(job(status={"conditions": conds}), [])
    assert seconds_unschedulable(ctx.view, NOW) == seconds
