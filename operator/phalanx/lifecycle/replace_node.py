"""Replace only the failed node (pure): when one node of a running, placed gang whose pods restart
in place is lost (gone, NotReady) or quarantined, that node-rank's pod moves to a spare node of the
gang's topology domain (gang/spare.py, booked through the scheduler) and the other pods restart in
place; otherwise the gang restarts the usual way (a lost node recreates it; a quarantined one keeps
running) and status.nodeReplacement says why the node was not replaced alone.

A replacement runs over several passes, each replayable from the status it wrote
(status.nodeReplacement, ``done`` false while it runs):

1. the spare is chosen and booked, status.placement.nodes names it for the node-rank, the lost pod
   is deleted (with grace period 0 when its node is lost: no kubelet will confirm), one restart is
   counted (maxRestarts applies; status.lastRestartMode ReplaceNode) and every other pod is asked
   to restart in place (lifecycle/inplace.py: the runtime rendezvouses again and resumes from the
   last checkpoint);
2. once the old pod is gone, the same pod (name, labels, rank env: its DNS name and the rendezvous
   stay) is created pinned to the spare, its trainer told the gang's restart count
   (ENV_RESTART_BASE) so it is not asked to restart again;
3. once the pod shows on the spare, the replacement is done.

No new attempt starts: the other pods, their names and UIDs stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.api.slots import slot_pod_name, worker
from phalanx.api.types import NodeReplacementStatus, Phase
from phalanx.backends import backend_for
from phalanx.constants import (
    ANNOTATION_RESTART_REQUEST,
    ENV_RESTART_BASE,
    ConditionType,
    FailureCategory,
    Reason,
    RestartMode,
)
from phalanx.decision import Plan
from phalanx.gang.pins import pin_pod, pinned_node
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.failure_cause import Cause
from phalanx.lifecycle.failures import Failure, classify_pod, pod_rank
from phalanx.lifecycle.inplace import laggards, restarts_in_place, trainer_restarts
from phalanx.lifecycle.pods import is_alive, pod_phase
from phalanx.render.job import render_children

REPLACE_REQUEUE_SECONDS = 0.5  # how soon to look again while the lost pod goes
REPLACED_POD_GRACE_SECONDS = 5  # a replaced pod on a node that still runs (quarantined): SIGTERM, then SIGKILL


@dataclass(frozen=True)
class Lost:
    """One node of the gang that its pod must leave."""

    rank: int  # node-rank (-1: a pod of another role)
    pod: str
    node: str
    cause: str  # Reason.NODE_LOST or Reason.NODE_QUARANTINED
    present: bool  # the pod still exists


def replace_node(ctx: Pass) -> Plan | None:
    """Carry on with a replacement under way, or start one for a lost or quarantined node."""
    record = ctx.view.status.node_replacement
    if record is not None and not record.done and record.new_node and record.attempt == ctx.attempt:
        return carry_on(ctx, record)
    lost = lost_nodes_of_gang(ctx)
    if not lost or not ctx.view.status.attempt_created or not ran(ctx, lost):
        return None
    return start(ctx, lost)


def ran(ctx: Pass, lost: list[Lost]) -> bool:
    """Whether the gang was running: every pod Running, those on the lost nodes aside (the status
    may not say Running yet: ready counts are written at a pace)."""
    gone = {item.pod for item in lost}
    return ctx.view.status.phase in (Phase.RUNNING, Phase.SCHEDULING) and all(
        pod_phase(p) == "Running" for p in ctx.current if p["metadata"]["name"] not in gone)


def node_of(pod: dict[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or pinned_node(spec)


def lost_nodes_of_gang(ctx: Pass) -> list[Lost]:
    """The gang's pods on a lost or quarantined node, and its workers missing whose placed node is
    lost (the pod garbage collector removed the pod first)."""
    observed, out = ctx.observed, []
    for pod in ctx.current:
        node = node_of(pod)
        if node and not pod["metadata"].get("deletionTimestamp") and (
                (node in observed.lost_nodes and lost_with_its_node(ctx, pod))
                or (node in observed.quarantined_nodes and is_alive(pod))):
            cause = Reason.NODE_LOST if node in observed.lost_nodes else Reason.NODE_QUARANTINED
            out.append(Lost(pod_rank(pod), pod["metadata"]["name"], node, cause, True))
    placed = ctx.view.status.placement.nodes if ctx.view.status.placement else []
    present = {pod_rank(p) for p in ctx.current}
    name = ctx.meta.get("name", "")
    for rank, node in enumerate(placed):
        if rank not in present and node in observed.lost_nodes:
            out.append(Lost(rank, slot_pod_name(name, worker(rank), ctx.attempt), node, Reason.NODE_LOST, False))
    return out


def lost_with_its_node(ctx: Pass, pod: dict[str, Any]) -> bool:
    """A pod on a lost node, alive or marked Failed for it (the pod garbage collector marks the
    pods of a deleted node); one that failed of its own (an exit code) is a failure to classify."""
    failure = classify_pod(pod, ctx.spec.failure_policy)
    return failure is None or (failure.exit_code is None and failure.retryable)


def why_not(ctx: Pass, lost: list[Lost]) -> str | None:
    """Why the node cannot be replaced alone (None: it can, given a spare)."""
    if not ctx.config.replace_lost_nodes:
        return "replacing a single node is turned off (operator config replaceLostNodes)"
    if not ctx.config.in_place_restarts:
        return "the gang's pods do not restart in place"
    if len(lost) > 1:
        return f"{len(lost)} of the gang's nodes are lost or quarantined"
    if lost[0].rank < 0:
        return "the pod is not a worker"
    placement = ctx.view.status.placement
    if not backend_for(ctx.spec).admits_itself or ctx.spare is None or placement is None or len(placement.nodes) != ctx.spec.nodes:
        return "the gang's placement is not the operator's own (scheduling backend)"
    for pod in ctx.current:
        if pod["metadata"]["name"] != lost[0].pod and not (
                is_alive(pod) and pod_phase(pod) == "Running" and restarts_in_place(pod)):
            return f"pod {pod['metadata']['name']} cannot restart in place"
    if len(ctx.current) - (1 if lost[0].present else 0) != ctx.spec.gang_size - 1:
        return "another pod of the gang is missing"
    return None


def start(ctx: Pass, lost: list[Lost]) -> Plan | None:
    """Book a spare and replace the lost pod, or record why not and hand on (a lost node then
    restarts the gang in ``restart.failed``; a quarantined one is left running)."""
    view, policy = ctx.view, ctx.spec.failure_policy
    if view.status.restarts >= policy.max_restarts:
        return None  # restart.failed ends the job (a quarantined node is left as it is)
    gone = lost[0]
    reason = why_not(ctx, lost)
    spare = None
    if reason is None:
        keep = tuple(node for rank, node in enumerate(view.status.placement.nodes) if rank != gone.rank)
        spare = ctx.spare(ctx.job, gone.rank, keep, gone.node)
        reason = None if spare.node else spare.reason
    if reason is not None:
        not_replaced(ctx, gone, reason)
        return None
    replace(ctx, gone, spare.node, spare.domain)
    return ctx.done()


def describe(gone: Lost) -> str:
    what = "lost" if gone.cause == Reason.NODE_LOST else "quarantined"
    return f"node-rank {gone.rank}: node {gone.node} {what}"


def not_replaced(ctx: Pass, gone: Lost, reason: str) -> None:
    """Status and an Event say why the node was not replaced alone (once per node and attempt)."""
    view = ctx.view
    record = view.status.node_replacement
    if record is not None and (record.old_node, record.attempt, record.new_node) == (gone.node, ctx.attempt, None):
        return
    then = "the gang restarts" if gone.cause == Reason.NODE_LOST else "the gang keeps running"
    message = f"{describe(gone)}; not replaced alone: {reason}; {then}"
    view.status.node_replacement = NodeReplacementStatus(
        node_rank=gone.rank, pod=gone.pod, old_node=gone.node, cause=gone.cause, message=message,
        attempt=ctx.attempt, done=True, time=view.now)
    view.events.append(("Warning", Reason.NODE_NOT_REPLACED, message))


def replace(ctx: Pass, gone: Lost, spare: str, domain: str) -> None:
    """Pass 1: the spare takes the node-rank, the lost pod goes, the others restart in place."""
    view, plan = ctx.view, ctx.plan
    others = [p for p in ctx.current if p["metadata"]["name"] != gone.pod]
    target = max([view.status.in_place_restarts, *(trainer_restarts(p) for p in others)]) + 1
    view.status.restarts += 1
    view.status.in_place_restarts = target
    view.status.last_restart_mode = RestartMode.REPLACE_NODE
    view.status.resumed_step = None  # the restarted script says where it resumed
    view.status.last_progress_time = view.now  # the hang clock starts afresh with each restart
    state = "is gone or NotReady" if gone.cause == Reason.NODE_LOST else "is quarantined"
    # No node-rank (status.placement names the spare for it now); the node is the lost one, which
    # node health may count against it (gang/nodehealth.py failure_evidence).
    failure = Failure(gone.pod, -1, gone.cause, f"node-rank {gone.rank}: node {gone.node} {state}", None, True,
                      Cause(FailureCategory.INFRASTRUCTURE))
    view.status.last_failure = failure.record(view.now, gone.node)
    view.status.placement.nodes[gone.rank] = spare
    where = f" in {domain}" if domain else ""
    message = (f"{describe(gone)}; replaced by {spare}{where}; {len(others)} pods restart in place "
               f"(restart {view.status.restarts}/{ctx.spec.failure_policy.max_restarts})")
    view.status.node_replacement = NodeReplacementStatus(
        node_rank=gone.rank, pod=gone.pod, old_node=gone.node, new_node=spare, domain=domain or None,
        cause=gone.cause, message=message, attempt=ctx.attempt, time=view.now)
    view.cond(ConditionType.RESTARTING, True, Reason.NODE_REPLACED, message)
    view.events.append(("Warning", Reason.NODE_REPLACED, message))
    for name in laggards(others, target):
        plan.annotate_pods[name] = {ANNOTATION_RESTART_REQUEST: str(target)}
    remove_old(ctx, gone.pod, gone.node)


def remove_old(ctx: Pass, pod_name: str, node: str) -> None:
    """Delete the replaced pod; with grace period 0 on a lost node (no kubelet will confirm),
    else with a short one: the gang resumes from its last checkpoint whatever the pod does on
    SIGTERM, and its replacement (the same name) waits until it is gone."""
    pod = next((p for p in ctx.current if p["metadata"]["name"] == pod_name), None)
    if pod is None:
        return
    if node in ctx.observed.lost_nodes:
        ctx.plan.force_delete_pods.append(pod_name)
        ctx.plan.requeue_after = REPLACE_REQUEUE_SECONDS
    elif not pod["metadata"].get("deletionTimestamp"):
        ctx.plan.delete_pods.append(pod_name)
        ctx.plan.delete_grace[pod_name] = REPLACED_POD_GRACE_SECONDS
    else:
        ctx.plan.requeue_after = REPLACE_REQUEUE_SECONDS


def carry_on(ctx: Pass, record: NodeReplacementStatus) -> Plan | None:
    """Passes 2 and 3: create the pod on the spare once the old one is gone; done once it shows.
    Another failure meanwhile ends the replacement: the gang restarts (restart.failed)."""
    pod = next((p for p in ctx.current if p["metadata"]["name"] == record.pod), None)
    if pod is not None and node_of(pod) == record.new_node:
        record.done = True
        return None
    for other in ctx.current:
        if other is not pod and not (is_alive(other) and pod_phase(other) != "Failed"
                                     and node_of(other) not in ctx.observed.lost_nodes):
            record.done = True
            record.message += f"; abandoned: pod {other['metadata']['name']} failed or lost"
            return None
    if pod is not None:
        remove_old(ctx, record.pod, record.old_node)
        return ctx.done()
    assert ctx.job is not None
    created = [child for child in render_children(ctx.job, ctx.config, ctx.attempt, only=[worker(record.node_rank)])
               if child["kind"] == "Pod" and child["metadata"]["name"] == record.pod]
    for child in created:
        pin_pod(child, record.new_node)
        for container in child["spec"]["containers"]:
            if restarts_in_place({"spec": {"containers": [container]}}):
                container.setdefault("env", []).append({"name": ENV_RESTART_BASE, "value": str(ctx.view.status.in_place_restarts)})
    ctx.plan.create += created
    return ctx.done()
