"""Creating the current attempt's children: only what is missing (children are deterministic, so a
409 on replay is fine), the gang's pods behind the gate — or, for a native gang placed before any
pod exists, pinned to their nodes and ungated (pure)."""

from __future__ import annotations

from phalanx.api.slots import slot_pod_name, slots
from phalanx.api.types import Phase, PlacementStatus
from phalanx.constants import ConditionType, Reason
from phalanx.gang.pins import pin_pod
from phalanx.gang.quota import quota_shortfall
from phalanx.lifecycle.conditions import reason_of
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import is_gated
from phalanx.render.job import render_children
from phalanx.render.names import config_map_name, service_name, spec_hash

STALE_REQUEUE_SECONDS = 1.0  # how soon to look again while an earlier attempt's pods terminate


def create_missing(ctx: Pass) -> None:
    """Create what is missing and say how far the creation is (Created, Creating/Created Events)."""
    plan, spec, view = ctx.plan, ctx.spec, ctx.view
    have = {p["metadata"]["name"] for p in ctx.current}
    plan_children(ctx, have)
    plan.dry_run = not ctx.current and any(child["kind"] == "Pod" for child in plan.create)
    pinned = create_pinned(ctx)
    if view.status.phase == Phase.PENDING and not ctx.current:
        how = ", pinned to their nodes" if pinned else ""
        view.events.append(("Normal", Reason.CREATING, f"creating {spec.gang_size} pods (attempt {ctx.attempt}){how}"))
    if ctx.stale:
        view.cond(ConditionType.CREATED, False, Reason.WAITING_FOR_OLD_PODS,
                  f"{len(ctx.stale)} pods of an earlier attempt still terminating")
    elif not any(child["kind"] == "Pod" for child in plan.create):
        if not view.status.attempt_created:
            view.events.append(("Normal", Reason.CREATED, f"all {spec.gang_size} pods of attempt {ctx.attempt} created"))
        view.status.attempt_created = True
        view.cond(ConditionType.CREATED, True, Reason.PODS_CREATED, f"{spec.gang_size} pods (attempt {ctx.attempt})")
    else:
        view.cond(ConditionType.CREATED, False, Reason.CREATING_PODS, f"{len(have)}/{spec.gang_size} pods created")
        if not pinned:  # a gated gang: placement is undecided until every pod exists (and the clock restarts)
            view.cond(ConditionType.SCHEDULABLE, "Unknown", Reason.GANG_INCOMPLETE, "waiting for every pod of the gang")


def create_pinned(ctx: Pass) -> bool:
    """A whole new native gang, placed before any pod exists: each pod is created pinned to its
    node and without the gate — one request per pod and no release pass. The placement is booked
    like a release's (the gang step). A gang that is not placed now, or whose last pinned creation
    was interrupted, or that the namespace's quotas might refuse part-way, is created gated and
    placed by ``placement.place_gang`` once every pod exists."""
    pods = [child for child in ctx.plan.create if child["kind"] == "Pod"]
    if (not ctx.config.create_pinned or ctx.current or ctx.stale or len(pods) != ctx.spec.gang_size
            or not all(is_gated(p) for p in pods)
            or reason_of(ctx.view.status.conditions, ConditionType.SCHEDULABLE) == Reason.CREATE_INTERRUPTED
            or quota_shortfall(pods, ctx.observed.quotas) is not None):
        return False
    decision = ctx.gang(ctx.job, pods)
    if not (decision.release and all(p["metadata"]["name"] in decision.pins for p in pods)):
        return False  # not placed (or a gang step that leaves placement to the scheduler)
    for pod in pods:
        pin_pod(pod, decision.pins[pod["metadata"]["name"]])
    ctx.plan.pins = dict(decision.pins)
    if decision.placement is not None:
        ctx.view.status.placement = PlacementStatus.model_validate(decision.placement)
    ctx.view.cond(ConditionType.SCHEDULABLE, True, decision.reason, decision.message)
    return True


def plan_children(ctx: Pass, have: set[str]) -> None:
    """Render only what is missing; a drifted ConfigMap (the gang was resized) is updated."""
    job, spec, observed, plan, config = ctx.job, ctx.spec, ctx.observed, ctx.plan, ctx.config
    assert job is not None
    name = job.metadata.name
    missing = [slot for slot in slots(spec) if slot_pod_name(name, slot, ctx.attempt) not in have]
    if ctx.stale:
        # BlockingRecreate: a new gang reuses the hostnames, so the old one must be gone first.
        missing = []
        plan.requeue_after = STALE_REQUEUE_SECONDS
    config_drift = observed.config_map_hash is not None and observed.config_map_hash != spec_hash(spec.model_dump(by_alias=True, mode="json"))
    policy_missing = config.network_policy.enabled and not observed.network_policy_exists
    if not (missing or not observed.service_exists or not observed.config_map_exists or policy_missing or config_drift):
        return
    children = render_children(job, config, ctx.attempt, only=missing)
    if config_drift:  # the gang was resized: the runtime config must say the new size
        plan.update += [child for child in children if child["kind"] == "ConfigMap"]
    for child in children:
        kind, child_name = child["kind"], child["metadata"]["name"]
        if kind == "Service" and not observed.service_exists and child_name == service_name(name):
            plan.create.append(child)
        elif kind == "ConfigMap" and not observed.config_map_exists and child_name == config_map_name(name):
            plan.create.append(child)
        elif kind == "Pod" and child_name not in have:
            plan.create.append(child)
        elif kind == "NetworkPolicy":  # rendered only when config.network_policy.enabled
            if not observed.network_policy_exists:
                plan.create.append(child)
        elif kind not in ("Service", "ConfigMap", "Pod") and len(have) < spec.gang_size:
            plan.create.append(child)  # gang-backend objects (PodGroup, Workload) before pods
