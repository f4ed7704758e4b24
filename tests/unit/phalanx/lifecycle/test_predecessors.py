"""lifecycle/predecessors.py: pods of an earlier job of this name are set aside and waited for."""

from __future__ import annotations

import pytest

from phalanx.lifecycle.predecessors import (
    PREDECESSOR_REQUEUE_SECONDS,
    set_aside_predecessors,
    wait_for_predecessors,
)
from tests.lifecycle_pass import ago, job, pod, prepared


def owned_by(uid: str, **kwargs) -> dict:
    owned = pod(0, **kwargs)
    owned["metadata"]["ownerReferences"] = [{"uid": uid, "controller": True}]
    return owned


@pytest.mark.parametrize(("pods", "phase", "kept", "waits"), [
    pytest.param([owned_by("uid-1")], "Pending", 1, False, id="our-own-pod"),
    pytest.param([owned_by("uid-0")], "Pending", 0, True, id="an-earlier-jobs-pod"),
    pytest.param([owned_by("uid-0")], "Failed", 0, False, id="a-finished-job-does-not-wait"),
    pytest.param([pod(0)], "Pending", 1, False, id="no-owner-is-not-a-predecessor"),
])
def test_predecessors(pods, phase, kept, waits):
    ctx = prepared(job(status={"phase": phase}), [])
    ctx.observed.pods = pods
    ctx.observed.progress = {"step": 3}
    set_aside_predecessors(ctx)
    assert len(ctx.observed.pods) == kept
    assert ctx.observed.progress == ({"step": 3} if kept else None)  # an earlier job's rank 0 says nothing of ours
    plan = wait_for_predecessors(ctx)
    assert (plan is not None) == waits
    assert ctx.plan.requeue_after == (PREDECESSOR_REQUEUE_SECONDS if waits else None)


@pytest.mark.parametrize(("node", "deleting_since", "forced"), [
    pytest.param("lost", 120, True, id="stuck-on-a-lost-node"),
    pytest.param("lost", 10, False, id="within-the-grace"),
    pytest.param("fine", 120, False, id="its-kubelet-will-confirm"),
])
def test_force_delete_stuck_pods(node, deleting_since, forced):
    stuck = pod(0, node=node)
    stuck["metadata"]["deletionTimestamp"] = ago(deleting_since)
    ctx = prepared(job(status={"phase": "Running"}), [], lost_nodes=frozenset({"lost"}))
    ctx.observed.pods = [stuck]
    set_aside_predecessors(ctx)
    assert ctx.plan.force_delete_pods == (["job-node-0-0"] if forced else [])
    assert [e[1] for e in ctx.view.events] == (["ForceDeleted"] if forced else [])
