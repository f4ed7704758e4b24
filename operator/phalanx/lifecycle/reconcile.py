"""The level-based reconcile, as a pure function: (job, what exists, now) → what to do.

The kopf handlers observe (pods from an index, children from the API), call ``decide`` and carry
out the returned ``Plan``. Nothing here talks to the API server, so every branch is unit-tested,
and replaying ``decide`` after a crash at any point converges without duplicates or orphans:
names are deterministic and pods of an older attempt are always deleted.

``decide`` runs ``PHASES`` in order over one ``Pass``: each phase either has the final word (it
returns the Plan, from ``ctx.done()``) or updates the pass and returns None to hand on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from phalanx import constants as C
from phalanx.api.config import OperatorConfig
from phalanx.api.slots import role_counts, slot_pod_name, slots
from phalanx.api.types import TERMINAL_PHASES, GangBackend, Phase, PlacementStatus, TrainingJob
from phalanx.backends.kueue import withdrawal
from phalanx.constants import Reason
from phalanx.decision import Fits, GangDecision, GangStep, Observed, Plan
from phalanx.gang.pins import pin_pod
from phalanx.gang.quota import quota_shortfall
from phalanx.lifecycle import elastic
from phalanx.lifecycle.conditions import get_condition, is_true
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.failures import (
    Failure,
    backoff_seconds,
    created_at,
    first_failure,
    stuck_terminating,
    unbound_too_long,
)
from phalanx.lifecycle.pods import (
    alive_names,
    attempt_of,
    is_gated,
    is_predecessor,
    names,
    pod_phase,
    undeleted_names,
)
from phalanx.lifecycle.progress import final_progress, parse_progress
from phalanx.lifecycle.resume import resume_phrase
from phalanx.lifecycle.status import (
    StatusView,
    count_ready,
    iso,
    parse_iso,
    phase_from_pods,
    succeeded_roles,
)
from phalanx.render.job import render_children
from phalanx.render.names import config_map_name, service_name, spec_hash
from phalanx.validate import validate_job

# A pinned gang seen part-created this long after its newest pod: the creation stopped (the
# index shows our creates within seconds, kopf's expectations wait 5 s).
INTERRUPTED_AFTER_SECONDS = 30.0
REFUSED_GRACE_SECONDS = 10.0  # the same, when the creation's refusal is on record

__all__ = ["PHASES", "Fits", "GangDecision", "GangStep", "Observed", "Plan", "decide", "release_all"]


def release_all(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
    """Default gang step: all pods exist → lift every gate together, the scheduler places them."""
    return GangDecision(release=True, reason=Reason.GANG_COMPLETE, message=f"all {len(pods)} pods created; gates lifted together")


def decide(
    obj: dict[str, Any],
    observed: Observed,
    now: datetime,
    config: OperatorConfig | None = None,
    gang: GangStep = release_all,
    fits: Fits | None = None,
) -> Plan:
    config = config or OperatorConfig()
    meta = obj.get("metadata", {})
    st = StatusView(obj.get("status"), meta.get("generation"), now)
    job, problems = validate_job(obj, config, observed.namespace_labels)
    ctx = Pass(obj=obj, observed=observed, now=now, config=config, gang=gang, fits=fits, st=st, job=job, problems=problems)
    for phase in PHASES:
        plan = phase(ctx)
        if plan is not None:
            return plan
    return ctx.done()


# --- The phases, in order ------------------------------------------------------------------------


def set_aside_predecessors(ctx: Pass) -> None:
    """An earlier job of this name may still be terminating its pods (same names, its own
    checkpoint save on SIGTERM): never adopt or touch them. Pods stuck terminating on a lost node
    are force-deleted. Rank 0's report comes from user code: parsed strictly, once, here."""
    observed, config = ctx.observed, ctx.config
    ctx.predecessors = [p for p in observed.pods if is_predecessor(p, ctx.meta.get("uid"))]
    observed = replace(observed, progress=parse_progress(observed.progress))
    ctx.plan.force_delete_pods = stuck_terminating(observed.pods, observed.lost_nodes, ctx.now, config.force_delete_after_seconds)
    for pod in ctx.plan.force_delete_pods:
        ctx.st.events.append(("Warning", Reason.FORCE_DELETED, f"pod {pod} stuck terminating on a lost node for over "
                              f"{config.force_delete_after_seconds}s; deleted with grace period 0"))
    if ctx.predecessors:
        observed = replace(observed, pods=[p for p in observed.pods if p not in ctx.predecessors], progress=None)
    ctx.observed = observed


def refuse_invalid(ctx: Pass) -> Plan | None:
    """Bad input: say exactly what is wrong, create nothing, never crash-loop."""
    if ctx.job is not None and not ctx.problems:
        return None
    st = ctx.st
    message = "; ".join(str(p) for p in ctx.problems)
    if st.s.phase not in TERMINAL_PHASES:
        st.cond(C.COND_VALID, False, Reason.INVALID_SPEC, message)
        st.finish(Phase.FAILED, Reason.INVALID_SPEC, message)
    ctx.plan.delete_pods = alive_names(ctx.observed.pods)
    return ctx.done()


def accept(ctx: Pass) -> None:
    """A valid job: elastic jobs run at their current gang size; the totals go into the status."""
    st, requested = ctx.st, ctx.job
    assert requested is not None
    ctx.requested = requested
    ctx.active = elastic.active_size(requested, st.s.active_nodes)
    ctx.job = elastic.at_size(requested, ctx.active)
    spec = ctx.spec
    if spec.elastic is not None:
        st.s.active_nodes = ctx.active
    st.cond(C.COND_VALID, True, Reason.VALIDATED, "spec is valid")
    if get_condition(st.s.conditions, C.COND_RECONCILED) is not None:  # recovered from a ReconcileError
        st.cond(C.COND_RECONCILED, True, Reason.RECONCILED, "")
    st.s.total_nodes = spec.nodes
    st.role_totals = role_counts(spec) if spec.roles else None
    st.s.world_size = spec.world_size
    st.s.total_steps = spec.training.steps


def wait_for_predecessors(ctx: Pass) -> Plan | None:
    if not ctx.predecessors or ctx.st.s.phase in TERMINAL_PHASES:
        return None
    ctx.st.s.message = f"waiting for {len(ctx.predecessors)} pods of an earlier job named {ctx.meta.get('name')} to terminate"
    ctx.plan.requeue_after = 2.0
    return ctx.done()


def collect_progress(ctx: Pass) -> None:
    """Progress comes from user code: applied in done(), after suspend, deadline and failure
    checks have decided, so it can change nothing but the progress fields."""
    ctx.reports += [ctx.observed.progress, final_progress(ctx.observed.pods, ctx.attempt)]


def finished(ctx: Pass) -> Plan | None:
    """Finished jobs: free what still runs, then wait for the TTL."""
    st, plan = ctx.st, ctx.plan
    if st.s.phase not in TERMINAL_PHASES:
        return None
    plan.delete_pods = alive_names(ctx.observed.pods)
    count_ready(st, [])
    ttl = ctx.spec.ttl_seconds_after_finished
    done_at = parse_iso(st.s.completion_time)
    if ttl is not None and done_at is not None:
        left = (done_at + timedelta(seconds=ttl) - ctx.now).total_seconds()
        if left <= 0:
            plan.delete_job = True
        else:
            plan.requeue_after = left
    return ctx.done()


def split_attempts(ctx: Pass) -> None:
    """The current attempt's pods; those of earlier attempts are deleted."""
    ctx.current = [p for p in ctx.observed.pods if attempt_of(p) == ctx.attempt]
    # A pod that ended and is being deleted holds no node, IP or endpoint any more; only another
    # controller's finalizer keeps its object (Kueue keeps a stopped group's pods until their
    # replacements exist): it does not block the next gang.
    ctx.stale = [p for p in ctx.observed.pods if attempt_of(p) != ctx.attempt
                 and not (p["metadata"].get("deletionTimestamp") and pod_phase(p) in ("Succeeded", "Failed"))]
    ctx.plan.delete_pods += undeleted_names(ctx.stale)


def suspend_or_resume(ctx: Pass) -> Plan | None:
    st, plan = ctx.st, ctx.plan
    if ctx.spec.suspend:
        plan.delete_pods += undeleted_names(ctx.current)
        st.cond(C.COND_SUSPENDED, True, Reason.SUSPENDED, "spec.suspend is true; pods deleted (checkpoint taken on SIGTERM)")
        st.cond(C.COND_RUNNING, False, Reason.SUSPENDED, "")
        st.phase(Phase.SUSPENDED, Reason.SUSPENDED, "job suspended")
        count_ready(st, [])
        return ctx.done()
    if st.s.phase == Phase.SUSPENDED:
        st.s.restart_attempt += 1
        st.s.attempt_created = False
        st.cond(C.COND_SUSPENDED, False, Reason.RESUMED, "spec.suspend is false")
        st.phase(Phase.PENDING, Reason.RESUMED, "job resumed; creating a new gang")
        plan.delete_pods += undeleted_names(ctx.current)
        ctx.current = []
    return None


def deadline(ctx: Pass) -> Plan | None:
    spec, st = ctx.spec, ctx.st
    started = parse_iso(st.s.start_time)
    if not spec.active_deadline_seconds or started is None:
        return None
    left = (started + timedelta(seconds=spec.active_deadline_seconds) - ctx.now).total_seconds()
    if left > 0:
        ctx.plan.requeue_after = left
        return None
    st.finish(Phase.FAILED, Reason.DEADLINE_EXCEEDED, f"job ran longer than activeDeadlineSeconds {spec.active_deadline_seconds}")
    ctx.plan.delete_pods += alive_names(ctx.current)
    return ctx.done()


def succeeded(ctx: Pass) -> Plan | None:
    """Every pod of the roles that decide success exited 0 (every pod, unless successPolicy or a
    TensorFlow chief says otherwise); the rest are stopped by ``finished``."""
    done = succeeded_roles(ctx.spec, ctx.current)
    if done is None:
        return None
    ctx.st.finish(Phase.SUCCEEDED, Reason.SUCCEEDED, done)
    count_ready(ctx.st, [])
    return ctx.done()


def failed(ctx: Pass) -> Plan | None:
    """A failed pod, a pod lost after the gang was created, or a hang: restart or fail the gang."""
    failure = first_failure(ctx.st, ctx.current, ctx.spec, ctx.now, ctx.observed.lost_nodes, ctx.observed.progress)
    return None if failure is None else _restart_or_fail(ctx, failure)


def admission_withdrawn(ctx: Pass) -> Plan | None:
    """The gang's admitter (Kueue) took its admission back (preempted, deactivated) and stops its
    pods: a new attempt queues again and resumes (lifecycle/resume.py). Not a failure: no
    restart counted. Suspended says so until the admitter admits the gang again."""
    st, observed = ctx.st, ctx.observed
    found = withdrawal(observed.backend_evicted, ctx.current, st.s.attempt_created, ctx.spec.gang_size)
    if found is None:
        readmitted = observed.backend_schedulable is not None and observed.backend_schedulable.is_true
        suspended = get_condition(st.s.conditions, C.COND_SUSPENDED)
        if readmitted and suspended is not None and suspended.status == "True" and suspended.reason != Reason.SUSPENDED:
            st.cond(C.COND_SUSPENDED, False, observed.backend_schedulable.reason, observed.backend_schedulable.message)
        return None
    reason, message = found
    st.s.restart_attempt += 1
    st.s.attempt_created = False
    st.cond(C.COND_SUSPENDED, True, reason, message)
    st.cond(C.COND_RUNNING, False, reason, "")
    st.phase(Phase.PENDING, reason, f"{message}; a new gang queues and {resume_phrase(ctx.spec)}", warning=True)
    ctx.plan.delete_pods += undeleted_names(ctx.current)
    count_ready(st, [])
    return ctx.done()


def _restart_or_fail(ctx: Pass, failure: Failure) -> Plan:
    st, plan, policy = ctx.st, ctx.plan, ctx.spec.failure_policy
    what = failure.describe()
    st.s.last_failure = failure.record(st.now)
    if not failure.retryable or st.s.restarts >= policy.max_restarts:
        if failure.retryable:
            st.finish(Phase.FAILED, Reason.MAX_RESTARTS_EXCEEDED,
                      f"restarted {st.s.restarts} times (maxRestarts {policy.max_restarts}); last failure: {what}")
        else:
            st.finish(Phase.FAILED, Reason.PERMANENT_FAILURE, what)
        plan.delete_pods += alive_names(ctx.current)
        return ctx.done()
    st.s.restarts += 1
    st.s.restart_attempt += 1
    st.s.attempt_created = False
    delay = backoff_seconds(st.s.restarts, policy)
    st.s.next_restart_time = iso(ctx.now + timedelta(seconds=delay))
    message = f"restart {st.s.restarts}/{policy.max_restarts} in {delay}s after {what}"
    st.cond(C.COND_RESTARTING, True, failure.reason, message)
    st.cond(C.COND_RUNNING, False, Reason.RESTARTING, "")
    st.phase(Phase.RESTARTING, Reason.RESTARTING, message, warning=True)
    plan.delete_pods += undeleted_names(ctx.current)
    plan.requeue_after = max(float(delay), 0.5)
    count_ready(st, [])
    return ctx.done()


def replan_unbound(ctx: Pass) -> Plan | None:
    """A released gang the scheduler did not bind in time (its nodes changed under it): the gates
    cannot come back, so replace the gang and plan again. Not a failure: no restart counted."""
    st, timeout = ctx.st, ctx.config.bind_timeout_seconds
    stuck = unbound_too_long(st, ctx.current, ctx.spec.gang_size, ctx.now, timeout)
    if not stuck:
        return None
    message = f"{stuck} pods not bound {timeout}s after release; re-planning the gang"
    st.phase(Phase.PENDING, Reason.REPLANNING, message, warning=True)
    return _replace_gang(ctx, Reason.REPLANNING, message)


def _replace_gang(ctx: Pass, reason: str, message: str) -> Plan:
    """Delete the current gang for a new attempt, placed afresh (Schedulable=False until then)."""
    ctx.st.s.restart_attempt += 1
    ctx.st.s.attempt_created = False
    ctx.st.cond(C.COND_SCHEDULABLE, False, reason, message)
    ctx.plan.delete_pods += undeleted_names(ctx.current)
    return ctx.done()


def restart_backoff(ctx: Pass) -> Plan | None:
    st = ctx.st
    restart_at = parse_iso(st.s.next_restart_time)
    if restart_at is not None and ctx.now < restart_at:
        ctx.plan.requeue_after = (restart_at - ctx.now).total_seconds()
        count_ready(st, ctx.current)
        return ctx.done()
    st.s.next_restart_time = None
    return None


def recreate_interrupted(ctx: Pass) -> Plan | None:
    """A pinned creation (``_create_pinned``) that stopped part-way — refused, an API error, the
    operator restarted — left ungated pods that hold their nodes and would start without their
    peers, and the rest cannot be pinned without the plan. Delete them and create the gang again
    behind the gate. A partial view right after the creates is given INTERRUPTED_AFTER_SECONDS
    (REFUSED_GRACE_SECONDS after a refusal) from the newest pod to catch up. Not a failure: no
    restart counted."""
    st, current, size = ctx.st, ctx.current, ctx.spec.gang_size
    if (st.s.attempt_created or not current or len(current) >= size or ctx.spec.scheduling.backend != GangBackend.NATIVE
            or any(is_gated(p) for p in current)):
        return None
    # after a refusal on record, only the expectations' lag; the body may lag too (a stale refusal)
    grace = REFUSED_GRACE_SECONDS if _reason(st, C.COND_CREATED) == Reason.CREATE_REFUSED else INTERRUPTED_AFTER_SECONDS
    newest = max((created_at(p) or ctx.now for p in current), default=ctx.now)
    wait = grace - (ctx.now - newest).total_seconds()
    if wait > 0:
        ctx.plan.requeue_after = wait
        return ctx.done()
    message = f"{len(current)}/{size} pods of a pinned creation exist; recreating the gang behind the gate"
    st.events.append(("Warning", Reason.CREATE_INTERRUPTED, message))
    st.phase(Phase.PENDING, Reason.CREATE_INTERRUPTED, message)  # it is Pending already: no second event
    return _replace_gang(ctx, Reason.CREATE_INTERRUPTED, message)


def _reason(st: StatusView, cond_type: str) -> str | None:
    cond = get_condition(st.s.conditions, cond_type)
    return cond.reason if cond is not None else None


def create_missing(ctx: Pass) -> None:
    """Create what is missing (children are deterministic: 409 on replay is fine)."""
    plan, spec, st = ctx.plan, ctx.spec, ctx.st
    have = {p["metadata"]["name"] for p in ctx.current}
    _plan_children(ctx, have)
    plan.dry_run = not ctx.current and any(c["kind"] == "Pod" for c in plan.create)
    pinned = _create_pinned(ctx)
    if st.s.phase == Phase.PENDING and not ctx.current:
        how = ", pinned to their nodes" if pinned else ""
        st.events.append(("Normal", Reason.CREATING, f"creating {spec.gang_size} pods (attempt {ctx.attempt}){how}"))
    if ctx.stale:
        st.cond(C.COND_CREATED, False, Reason.WAITING_FOR_OLD_PODS, f"{len(ctx.stale)} pods of an earlier attempt still terminating")
    elif not any(c["kind"] == "Pod" for c in plan.create):
        if not st.s.attempt_created:
            st.events.append(("Normal", Reason.CREATED, f"all {spec.gang_size} pods of attempt {ctx.attempt} created"))
        st.s.attempt_created = True
        st.cond(C.COND_CREATED, True, Reason.PODS_CREATED, f"{spec.gang_size} pods (attempt {ctx.attempt})")
    else:
        st.cond(C.COND_CREATED, False, Reason.CREATING_PODS, f"{len(have)}/{spec.gang_size} pods created")
        if not pinned:  # a gated gang: placement is undecided until every pod exists (and the clock restarts)
            st.cond(C.COND_SCHEDULABLE, "Unknown", Reason.GANG_INCOMPLETE, "waiting for every pod of the gang")


def _create_pinned(ctx: Pass) -> bool:
    """A whole new native gang, placed before any pod exists: each pod is created pinned to its
    node and without the gate — one request per pod and no release pass. The placement is booked
    like a release's (the gang step). A gang that is not placed now, or whose last pinned creation
    was interrupted, or that the namespace's quotas might refuse part-way, is created gated and
    placed by ``place_gang`` once every pod exists."""
    pods = [c for c in ctx.plan.create if c["kind"] == "Pod"]
    if (not ctx.config.create_pinned or ctx.current or ctx.stale or len(pods) != ctx.spec.gang_size
            or not all(is_gated(p) for p in pods) or _reason(ctx.st, C.COND_SCHEDULABLE) == Reason.CREATE_INTERRUPTED
            or quota_shortfall(pods, ctx.observed.quotas) is not None):
        return False
    decision = ctx.gang(ctx.job, pods)
    if not (decision.release and all(p["metadata"]["name"] in decision.pins for p in pods)):
        return False  # not placed (or a gang step that leaves placement to the scheduler)
    for pod in pods:
        pin_pod(pod, decision.pins[pod["metadata"]["name"]])
    ctx.plan.pins = dict(decision.pins)
    if decision.placement is not None:
        ctx.st.s.placement = PlacementStatus.model_validate(decision.placement)
    ctx.st.cond(C.COND_SCHEDULABLE, True, decision.reason, decision.message)
    return True


def _plan_children(ctx: Pass, have: set[str]) -> None:
    """Render only what is missing; a drifted ConfigMap (the gang was resized) is updated."""
    job, spec, observed, plan, config = ctx.job, ctx.spec, ctx.observed, ctx.plan, ctx.config
    assert job is not None
    name = job.metadata.name
    missing = [slot for slot in slots(spec) if slot_pod_name(name, slot, ctx.attempt) not in have]
    if ctx.stale:
        # BlockingRecreate: a new gang reuses the hostnames, so the old one must be gone first.
        missing = []
        plan.requeue_after = 1.0
    config_drift = observed.config_map_hash is not None and observed.config_map_hash != spec_hash(spec.model_dump(by_alias=True, mode="json"))
    policy_missing = config.network_policy.enabled and not observed.network_policy_exists
    if not (missing or not observed.service_exists or not observed.config_map_exists or policy_missing or config_drift):
        return
    children = render_children(job, config, ctx.attempt, only=missing)
    if config_drift:  # the gang was resized: the runtime config must say the new size
        plan.update += [c for c in children if c["kind"] == "ConfigMap"]
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


def place_gang(ctx: Pass) -> Plan | None:
    """All pods exist → decide placement and lift the gates together."""
    st, current = ctx.st, ctx.current
    gated = [p for p in current if is_gated(p)]
    if gated and st.s.attempt_created and len(current) == ctx.spec.gang_size:
        return _gang_decision(ctx, gated)
    if current and not gated and st.s.attempt_created and ctx.observed.backend_schedulable is not None:
        verdict = ctx.observed.backend_schedulable  # the scheduler's own gang verdict
        st.cond(C.COND_SCHEDULABLE, verdict.status, verdict.reason, verdict.message)
    elif current and not gated and st.s.attempt_created and not is_true(st.s.conditions, C.COND_SCHEDULABLE):
        st.cond(C.COND_SCHEDULABLE, True, Reason.GATES_LIFTED, "gang released to the scheduler")
    return None


def _gang_decision(ctx: Pass, gated: list[dict[str, Any]]) -> Plan | None:
    st, plan, spec = ctx.st, ctx.plan, ctx.spec
    decision = ctx.gang(ctx.job, ctx.current)
    if decision.placement is not None:
        st.s.placement = PlacementStatus.model_validate(decision.placement)
    st.cond(C.COND_SCHEDULABLE, decision.schedulable, decision.reason, decision.message)
    if decision.release:
        plan.release = names(gated)
        plan.pins = dict(decision.pins)
        return None
    if decision.schedulable:
        return None
    waited = _gang_waited(st, ctx.now)
    resized = elastic.shrink(ctx, waited)
    if resized is not None:
        return resized
    timeout = spec.scheduling.gang_timeout_seconds
    if timeout and waited >= timeout and spec.scheduling.on_gang_timeout == "Fail":
        st.finish(Phase.FAILED, Reason.GANG_TIMEOUT, f"gang not placed within {timeout}s: {decision.message}")
        plan.delete_pods += names(ctx.current)
        plan.create = []
        return ctx.done()
    return None


def _gang_waited(st: StatusView, now: datetime) -> float:
    cond = get_condition(st.s.conditions, C.COND_SCHEDULABLE)
    since = parse_iso(cond.last_transition_time) if cond and cond.status == "False" else None
    return (now - since).total_seconds() if since else 0.0


def phase_of_gang(ctx: Pass) -> None:
    """The phase from the current gang's pods."""
    phase_from_pods(ctx.st, ctx.current, ctx.spec.gang_size)


Phase_ = Callable[[Pass], Plan | None]
PHASES: tuple[Phase_, ...] = (
    set_aside_predecessors,
    refuse_invalid,
    accept,
    wait_for_predecessors,
    collect_progress,
    finished,
    split_attempts,
    suspend_or_resume,
    deadline,
    succeeded,
    admission_withdrawn,
    failed,
    replan_unbound,
    restart_backoff,
    recreate_interrupted,
    create_missing,
    place_gang,
    phase_of_gang,
    elastic.grow,  # grow back towards spec.nodes once the current size has run for a while
)
