"""lifecycle/replace_node.py: one lost or quarantined node of a running gang is replaced alone, or
the status says why not and the gang restarts the usual way."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.constants import ANNOTATION_RESTART_REQUEST, ENV_RESTART_BASE
from phalanx.gang.nodehealth import failure_evidence
from phalanx.gang.pins import pinned_node
from phalanx.gang.spare import Spare
from phalanx.lifecycle import replace_node
from phalanx.lifecycle.inplace import trainer_restarts
from phalanx.lifecycle.restart import failed
from tests.lifecycle_pass import ago, conditions, job, pod, prepared

IN_PLACE = OperatorConfig().with_restart_all_containers(True)
POLICY = {"failurePolicy": {"maxRestarts": 3, "backoffSeconds": 10}}
PLACED = {"nodes": ["n0", "n1"], "span": {"block": 1}}


def running(**status: Any) -> dict[str, Any]:
    return {"phase": "Running", "restartAttempt": 0, "attemptCreated": True, "startTime": ago(100),
            "lastProgressTime": ago(5), "placement": PLACED, **status}


def trainer(rank: int, node: str, *, phase: str = "Running", rules: bool = True, deleting: bool = False) -> dict[str, Any]:
    """A worker pod on ``node`` whose trainer carries the restart rule."""
    p = pod(rank, phase=phase, node=node, deleting=deleting)
    p["spec"]["containers"] = [{"name": "trainer", **({"restartPolicyRules": [{"action": "RestartAllContainers"}]}
                                                      if rules else {})}]
    p["status"]["containerStatuses"] = [{"name": "trainer", "restartCount": 0, "state": {"running": {}}}]
    return p


def spare_on(node: str | None, domain: str = "block=b1", reason: str = "no free node in block=b1"):
    asked = []

    def find(job, rank, keep, lost):
        asked.append((rank, keep, lost))
        return Spare(node, domain, "" if node else reason)

    find.asked = asked
    return find


def pass_for(pods, status=None, config=IN_PLACE, spare=None, **observed):
    ctx = prepared(job(POLICY, status or running()), pods, config=config, **observed)
    ctx.spare = spare if spare is not None else spare_on("n5")
    return ctx


GANG = [trainer(0, "n0"), trainer(1, "n1")]
OFF = OperatorConfig(replace_lost_nodes=False).with_restart_all_containers(True)


def collected(rank: int, node: str, exit_code: int | None = None) -> dict[str, Any]:
    """A pod the pod garbage collector marked Failed (its node deleted), or one that exited."""
    p = trainer(rank, node, phase="Failed")
    p["status"]["reason"] = "DeletionByPodGC" if exit_code is None else None
    if exit_code is not None:
        p["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": exit_code}}
    return p


def test_a_pod_marked_failed_with_its_lost_node_is_replaced_but_not_one_that_exited():
    ctx = pass_for([trainer(0, "n0"), collected(1, "n1")], lost_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(ctx) is not None and ctx.view.status.node_replacement.new_node == "n5"
    ctx = pass_for([trainer(0, "n0"), collected(1, "n1", exit_code=1)], lost_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(ctx) is None and ctx.view.status.node_replacement is None


def test_a_gang_whose_status_still_says_scheduling_but_whose_pods_all_ran_is_replaced():
    ctx = pass_for(GANG, status=running(phase="Scheduling"), lost_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(ctx) is not None
    starting = [trainer(0, "n0", phase="Pending"), trainer(1, "n1")]
    ctx = pass_for(starting, status=running(phase="Scheduling"), lost_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(ctx) is None and ctx.view.status.node_replacement is None


@pytest.mark.parametrize(("pods", "observed", "force", "graceful", "cause"), [
    pytest.param(GANG, {"lost_nodes": frozenset({"n1"})}, ["job-node-1-0"], [], "NodeLost", id="lost-node-force-deleted"),
    pytest.param(GANG, {"quarantined_nodes": frozenset({"n1"})}, [], ["job-node-1-0"], "NodeQuarantined",
                 id="quarantined-node-deleted-with-a-short-grace"),
    pytest.param(GANG[:1], {"lost_nodes": frozenset({"n1"})}, [], [], "NodeLost", id="pod-already-gone"),
])
def test_one_lost_node_is_replaced_in_its_domain(pods, observed, force, graceful, cause):
    ctx = pass_for(pods, **observed)
    plan = replace_node.replace_node(ctx)
    assert plan is not None
    status = ctx.view.status
    assert ctx.spare.asked == [(1, ("n0",), "n1")]
    assert plan.force_delete_pods == force and plan.delete_pods == graceful and plan.create == []
    assert plan.delete_grace == {p: replace_node.REPLACED_POD_GRACE_SECONDS for p in graceful}  # not the trainer's 120 s
    assert plan.annotate_pods == {"job-node-0-0": {ANNOTATION_RESTART_REQUEST: "1"}}  # the other pod restarts in place
    assert (status.restarts, status.in_place_restarts, status.restart_attempt) == (1, 1, 0)  # no new attempt
    assert status.last_restart_mode == "ReplaceNode" and status.placement.nodes == ["n0", "n5"]
    record = status.node_replacement
    assert (record.node_rank, record.old_node, record.new_node, record.domain, record.cause, record.done) == (
        1, "n1", "n5", "block=b1", cause, False)
    assert status.last_failure.reason == cause and "node-rank 1: node n1" in status.last_failure.message
    blamed = failure_evidence({"status": status.model_dump(by_alias=True, mode="json")})
    assert (blamed.node if blamed else None) == ("n1" if cause == "NodeLost" else None)  # never the spare
    assert conditions(ctx)["Restarting"] == ("True", "NodeReplaced")
    what = "lost" if cause == "NodeLost" else "quarantined"
    assert ctx.view.events == [("Warning", "NodeReplaced", f"node-rank 1: node n1 {what}; replaced by n5 in "
                                "block=b1; 1 pods restart in place (restart 1/3)")]


@pytest.mark.parametrize(("pods", "observed", "config", "spare", "why"), [
    pytest.param(GANG, {"lost_nodes": frozenset({"n1"})}, IN_PLACE, spare_on(None), "no free node in block=b1",
                 id="no-spare-in-the-block"),
    pytest.param(GANG, {"lost_nodes": frozenset({"n0", "n1"})}, IN_PLACE, None, "2 of the gang's nodes",
                 id="two-nodes-lost"),
    pytest.param(GANG, {"lost_nodes": frozenset({"n1"})}, OperatorConfig(), None, "do not restart in place",
                 id="in-place-unsupported"),
    pytest.param(GANG, {"lost_nodes": frozenset({"n1"})}, OFF, None, "turned off", id="turned-off"),
    pytest.param([trainer(0, "n0", rules=False), trainer(1, "n1")], {"lost_nodes": frozenset({"n1"})}, IN_PLACE, None,
                 "pod job-node-0-0 cannot restart in place", id="other-pod-without-the-rule"),
])
def test_a_lost_node_not_replaced_alone_restarts_the_gang(pods, observed, config, spare, why):
    ctx = pass_for(pods, config=config, spare=spare, **observed)
    assert replace_node.replace_node(ctx) is None
    record = ctx.view.status.node_replacement
    assert record.new_node is None and record.done and why in record.message, record.message
    assert [e[1] for e in ctx.view.events] == ["NodeNotReplaced"] and why in ctx.view.events[0][2]
    assert failed(ctx) is not None  # today's path: the whole gang as a new attempt
    assert ctx.view.status.last_restart_mode == "Recreate" and ctx.view.status.restart_attempt == 1


def test_a_quarantined_node_not_replaced_leaves_the_gang_running_and_says_so_once():
    ctx = pass_for(GANG, spare=spare_on(None), quarantined_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(ctx) is None and failed(ctx) is None
    record = ctx.view.status.node_replacement
    assert "keeps running" in record.message and ctx.view.status.restarts == 0
    again = pass_for(GANG, status=running(nodeReplacement=record.model_dump(by_alias=True, mode="json")),
                     spare=spare_on(None), quarantined_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(again) is None and again.view.events == []


def test_max_restarts_used_up_leaves_the_failure_to_restart():
    ctx = pass_for(GANG, status=running(restarts=3), lost_nodes=frozenset({"n1"}))
    assert replace_node.replace_node(ctx) is None and ctx.view.status.node_replacement is None
    assert failed(ctx) is not None and ctx.view.status.phase == "Failed"


def test_nothing_lost_nothing_done():
    ctx = pass_for(GANG)
    assert replace_node.replace_node(ctx) is None and ctx.spare.asked == []


IN_FLIGHT = {"nodeRank": 1, "pod": "job-node-1-0", "oldNode": "n1", "newNode": "n5", "domain": "block=b1",
             "cause": "NodeLost", "message": "m", "attempt": 0, "done": False}


def in_flight(pods, **observed):
    status = running(restarts=1, inPlaceRestarts=1, lastRestartMode="ReplaceNode",
                     placement={"nodes": ["n0", "n5"]}, nodeReplacement=IN_FLIGHT)
    return pass_for(pods, status=status, **observed)


def test_the_old_pod_still_terminating_on_a_lost_node_is_force_deleted_first():
    ctx = in_flight([trainer(0, "n0"), trainer(1, "n1", deleting=True)], lost_nodes=frozenset({"n1"}))
    plan = replace_node.replace_node(ctx)
    assert plan is not None and plan.force_delete_pods == ["job-node-1-0"] and plan.create == []
    assert not ctx.view.status.node_replacement.done and ctx.view.status.restarts == 1  # counted once


def test_once_the_old_pod_is_gone_the_same_pod_is_created_on_the_spare():
    ctx = in_flight([trainer(0, "n0")])
    plan = replace_node.replace_node(ctx)
    assert plan is not None and [p["metadata"]["name"] for p in plan.create] == ["job-node-1-0"]
    created = plan.create[0]
    assert pinned_node(created["spec"]) == "n5" and not created["spec"].get("schedulingGates")
    assert created["metadata"]["labels"]["phalanx.dev/node-rank"] == "1"
    assert created["metadata"]["labels"]["phalanx.dev/restart-attempt"] == "0"
    trainer_env = {e["name"]: e.get("value") for c in created["spec"]["containers"] if c["name"] == "trainer"
                   for e in c["env"]}
    assert trainer_env[ENV_RESTART_BASE] == "1"  # the gang's restarts: no request makes it restart again
    assert trainer_env["MASTER_ADDR"] == "job-node-0.job"  # the same rendezvous
    assert ctx.view.status.restarts == 1 and ctx.view.status.restart_attempt == 0


def test_the_replacement_pod_counts_from_the_gangs_restarts():
    p = trainer(1, "n5")
    p["spec"]["containers"][0]["env"] = [{"name": ENV_RESTART_BASE, "value": "2"}]
    assert trainer_restarts(p) == 2


def test_the_pod_on_the_spare_ends_the_replacement():
    new = trainer(1, "n5")
    ctx = in_flight([trainer(0, "n0"), new])
    assert replace_node.replace_node(ctx) is None and ctx.view.status.node_replacement.done


def test_another_failure_meanwhile_abandons_the_replacement_for_a_gang_restart():
    ctx = in_flight([trainer(0, "n0", phase="Failed")])
    assert replace_node.replace_node(ctx) is None
    assert ctx.view.status.node_replacement.done and "abandoned" in ctx.view.status.node_replacement.message
    assert failed(ctx) is not None and ctx.view.status.restart_attempt == 1
