"""The level-based reconcile, as a pure function: (job, what exists, now) → what to do.

The kopf handlers observe (pods from an index, children from the API), call ``decide`` and carry
out the returned ``Plan``. Nothing here talks to the API server, so every branch is unit-tested,
and replaying ``decide`` after a crash at any point converges without duplicates or orphans:
names are deterministic and pods of an older attempt are always deleted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from phalanx import constants as C
from phalanx.api.config import OperatorConfig
from phalanx.api.types import (
    TERMINAL_PHASES,
    CheckpointStatus,
    Phase,
    PlacementStatus,
    TrainingJob,
)
from phalanx.lifecycle.conditions import get_condition, is_true
from phalanx.lifecycle.elastic import active_size, at_size, runnable_sizes
from phalanx.lifecycle.failures import Failure, backoff_seconds, classify_pod, pod_rank
from phalanx.lifecycle.progress import parse_progress
from phalanx.lifecycle.status import StatusView as _Status
from phalanx.lifecycle.status import iso as _iso
from phalanx.lifecycle.status import parse_iso
from phalanx.render.job import render_children
from phalanx.render.names import config_map_name, pod_name, service_name, spec_hash
from phalanx.validate import validate_job


@dataclass(frozen=True)
class GangDecision:
    """What the gang step decided for gated pods of the current attempt."""

    release: bool  # lift every gate now (all together)
    pins: dict[str, str] = field(default_factory=dict)  # pod name → node name
    schedulable: bool = True
    reason: str = "Placed"
    message: str = ""
    placement: dict[str, Any] | None = None


MAX_ETA_SECONDS = 2**31 - 1  # estimatedRemainingSeconds from a huge stepTimeSeconds stays an int32
GangStep = Callable[[TrainingJob, list[dict[str, Any]]], GangDecision]
# Could a gang of this job (at some size) be placed now, its own pods' capacity counted as free?
Fits = Callable[[TrainingJob], bool]


def release_all(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
    """Default gang step: all pods exist → lift every gate together, the scheduler places them."""
    return GangDecision(release=True, reason="GangComplete", message=f"all {len(pods)} pods created; gates lifted together")


@dataclass
class Observed:
    pods: list[dict[str, Any]]
    service_exists: bool = True
    config_map_exists: bool = True
    network_policy_exists: bool = True
    progress: Any = None  # rank 0's progress report, if reachable (untrusted: parsed in decide)
    lost_nodes: frozenset[str] = frozenset()  # nodes gone or NotReady
    config_map_hash: str | None = None  # spec-hash annotation of the existing ConfigMap
    namespace_labels: dict[str, str] | None = None  # the job's namespace (policy, Pod Security)


@dataclass
class Plan:
    create: list[dict[str, Any]] = field(default_factory=list)
    update: list[dict[str, Any]] = field(default_factory=list)  # children to patch to this content
    delete_pods: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)  # pods whose gang gate is lifted
    pins: dict[str, str] = field(default_factory=dict)  # pod → node (pinned by node affinity)
    status: dict[str, Any] | None = None  # full new status (camelCase) when it changed
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    delete_job: bool = False
    requeue_after: float | None = None
    # Dry-run the new attempt's objects first: a permanent refusal then leaves nothing behind.
    dry_run: bool = False
    force_delete_pods: list[str] = field(default_factory=list)  # stuck terminating on lost nodes


_parse = parse_iso


def _attempt(pod: dict[str, Any]) -> int:
    return int(pod["metadata"].get("labels", {}).get(C.LABEL_RESTART_ATTEMPT, -1))


def _is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == C.GANG_SCHEDULING_GATE for g in pod.get("spec", {}).get("schedulingGates") or [])


def _is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _predecessor(pod: dict[str, Any], uid: str | None) -> bool:
    """A pod of an earlier job with this name (deleted and re-created): another controller owns it."""
    owners = [o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")]
    return bool(uid and owners and all(o.get("uid") != uid for o in owners))


def _alive(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


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
    st = _Status(obj.get("status"), meta.get("generation"), now)
    plan = Plan()
    job, problems = validate_job(obj, config, observed.namespace_labels)

    reports: list[dict[str, Any] | None] = []  # rank 0's progress: applied last, whatever returns

    def done() -> Plan:
        for report in reports:
            _apply_progress(st, report, st.s.total_steps or 0, meta.get("uid"))
        plan.status = st.dump()
        plan.events = st.events
        return plan

    # An earlier job of this name may still be terminating its pods (same names, its own
    # checkpoint save on SIGTERM): never adopt or touch them; create nothing until they are gone.
    predecessors = [p for p in observed.pods if _predecessor(p, meta.get("uid"))]
    # Rank 0's report comes from user code: parsed strictly, once, here at the entry.
    observed = replace(observed, progress=parse_progress(observed.progress))
    plan.force_delete_pods = _stuck_terminating(observed.pods, observed.lost_nodes, now, config.force_delete_after_seconds)
    for pod in plan.force_delete_pods:
        st.events.append(("Warning", C.REASON_FORCE_DELETED, f"pod {pod} stuck terminating on a lost node for over "
                          f"{config.force_delete_after_seconds}s; deleted with grace period 0"))
    if predecessors:
        observed = replace(observed, pods=[p for p in observed.pods if p not in predecessors], progress=None)

    # 1. Bad input: say exactly what is wrong, create nothing, never crash-loop.
    if job is None or problems:
        message = "; ".join(str(p) for p in problems)
        if st.s.phase not in TERMINAL_PHASES:
            st.cond(C.COND_VALID, False, "InvalidSpec", message)
            st.finish(Phase.FAILED, "InvalidSpec", message)
        plan.delete_pods = [p["metadata"]["name"] for p in observed.pods if _alive(p)]
        return done()
    requested = job
    active = active_size(job, st.s.active_nodes)
    job = at_size(job, active)  # elastic jobs run at their current gang size
    spec = job.spec
    if spec.elastic is not None:
        st.s.active_nodes = active
    st.cond(C.COND_VALID, True, "Validated", "spec is valid")
    if get_condition(st.s.conditions, C.COND_RECONCILED) is not None:  # recovered from a ReconcileError
        st.cond(C.COND_RECONCILED, True, "Reconciled", "")
    st.s.total_nodes = spec.nodes
    st.s.world_size = spec.world_size
    st.s.total_steps = spec.training.steps

    if predecessors and st.s.phase not in TERMINAL_PHASES:
        st.s.message = f"waiting for {len(predecessors)} pods of an earlier job named {meta.get('name')} to terminate"
        plan.requeue_after = 2.0
        return done()
    # Progress comes from user code: applied in done(), after suspend, deadline and failure checks
    # have decided, so it can change nothing but the progress fields (parsed strictly there).
    reports += [observed.progress, final_progress(observed.pods, st.s.restart_attempt)]  # both parsed

    # 2. Finished jobs: free what still runs, then wait for the TTL.
    if st.s.phase in TERMINAL_PHASES:
        plan.delete_pods = [p["metadata"]["name"] for p in observed.pods if _alive(p)]
        _count_ready(st, [])
        ttl = spec.ttl_seconds_after_finished
        finished = _parse(st.s.completion_time)
        if ttl is not None and finished is not None:
            left = (finished + timedelta(seconds=ttl) - now).total_seconds()
            if left <= 0:
                plan.delete_job = True
            else:
                plan.requeue_after = left
        return done()

    attempt = st.s.restart_attempt
    current = [p for p in observed.pods if _attempt(p) == attempt]
    stale = [p for p in observed.pods if _attempt(p) != attempt]
    plan.delete_pods += [p["metadata"]["name"] for p in stale if not p["metadata"].get("deletionTimestamp")]

    # 3. Suspend / resume.
    if spec.suspend:
        plan.delete_pods += [p["metadata"]["name"] for p in current if not p["metadata"].get("deletionTimestamp")]
        st.cond(C.COND_SUSPENDED, True, "Suspended", "spec.suspend is true; pods deleted (checkpoint taken on SIGTERM)")
        st.cond(C.COND_RUNNING, False, "Suspended", "")
        st.phase(Phase.SUSPENDED, "Suspended", "job suspended")
        _count_ready(st, [])
        return done()
    if st.s.phase == Phase.SUSPENDED:
        st.s.restart_attempt = attempt = attempt + 1
        st.s.attempt_created = False
        st.cond(C.COND_SUSPENDED, False, "Resumed", "spec.suspend is false")
        st.phase(Phase.PENDING, "Resumed", "job resumed; creating a new gang")
        plan.delete_pods += [p["metadata"]["name"] for p in current if not p["metadata"].get("deletionTimestamp")]
        current = []

    # 4. Deadline.
    started = _parse(st.s.start_time)
    if spec.active_deadline_seconds and started is not None:
        left = (started + timedelta(seconds=spec.active_deadline_seconds) - now).total_seconds()
        if left <= 0:
            msg = f"job ran longer than activeDeadlineSeconds {spec.active_deadline_seconds}"
            st.finish(Phase.FAILED, "DeadlineExceeded", msg)
            plan.delete_pods += [p["metadata"]["name"] for p in current if _alive(p)]
            return done()
        plan.requeue_after = left

    # 5. Success: every rank exited 0.
    if current and len(current) == spec.nodes and all((p.get("status") or {}).get("phase") == "Succeeded" for p in current):
        st.finish(Phase.SUCCEEDED, "Succeeded", f"all {spec.nodes} nodes completed")
        _count_ready(st, [])
        return done()

    # 6. Failures: a failed pod, a pod lost after the gang was created, or a hang.
    failure = _first_failure(st, current, spec, now, observed)
    if failure is not None:
        return _on_failure(st, plan, failure, current, spec, now, done)

    # 6b. A released gang the scheduler did not bind in time (its nodes changed under it): the
    # gates cannot come back, so replace the gang and plan again. Not a failure: no restart counted.
    stuck = _unbound_too_long(st, current, spec.nodes, now, config.bind_timeout_seconds)
    if stuck:
        message = f"{stuck} pods not bound {config.bind_timeout_seconds}s after release; re-planning the gang"
        st.s.restart_attempt += 1
        st.s.attempt_created = False
        st.cond(C.COND_SCHEDULABLE, False, "Replanning", message)
        st.phase(Phase.PENDING, "Replanning", message, warning=True)
        plan.delete_pods += [p["metadata"]["name"] for p in current if not p["metadata"].get("deletionTimestamp")]
        return done()

    # 7. Restart backoff.
    restart_at = _parse(st.s.next_restart_time)
    if restart_at is not None and now < restart_at:
        plan.requeue_after = (restart_at - now).total_seconds()
        _count_ready(st, current)
        return done()
    st.s.next_restart_time = None

    # 8. Create what is missing (children are deterministic: 409 on replay is fine).
    have = {p["metadata"]["name"] for p in current}
    missing = [r for r in range(spec.nodes) if pod_name(job.metadata.name, r, attempt) not in have]
    if stale:
        # BlockingRecreate: a new gang reuses the hostnames, so the old one must be gone first.
        missing = []
        plan.requeue_after = 1.0
    children = []
    config_drift = observed.config_map_hash is not None and observed.config_map_hash != spec_hash(spec.model_dump(by_alias=True, mode="json"))
    policy_missing = config.network_policy.enabled and not observed.network_policy_exists
    if missing or not observed.service_exists or not observed.config_map_exists or policy_missing or config_drift:
        children = render_children(job, config, attempt, ranks=missing)  # only what is missing
    if config_drift:  # the gang was resized: the runtime config must say the new size
        plan.update += [c for c in children if c["kind"] == "ConfigMap"]
    for child in children:
        kind, name = child["kind"], child["metadata"]["name"]
        if kind == "Service" and not observed.service_exists and name == service_name(job.metadata.name):
            plan.create.append(child)
        elif kind == "ConfigMap" and not observed.config_map_exists and name == config_map_name(job.metadata.name):
            plan.create.append(child)
        elif kind == "Pod" and name not in have:
            plan.create.append(child)
        elif kind == "NetworkPolicy":  # rendered only when config.network_policy.enabled
            if not observed.network_policy_exists:
                plan.create.append(child)
        elif kind not in ("Service", "ConfigMap", "Pod") and len(have) < spec.nodes:
            plan.create.append(child)  # gang-backend objects (PodGroup, Workload) before pods
    plan.dry_run = not current and any(c["kind"] == "Pod" for c in plan.create)
    if st.s.phase == Phase.PENDING and not current:
        st.events.append(("Normal", "Creating", f"creating {spec.nodes} pods (attempt {attempt})"))
    if stale:
        st.cond(C.COND_CREATED, False, "WaitingForOldPods", f"{len(stale)} pods of an earlier attempt still terminating")
    elif not any(c["kind"] == "Pod" for c in plan.create):
        if not st.s.attempt_created:
            st.events.append(("Normal", "Created", f"all {spec.nodes} pods of attempt {attempt} created"))
        st.s.attempt_created = True
        st.cond(C.COND_CREATED, True, "PodsCreated", f"{spec.nodes} pods (attempt {attempt})")
    else:
        st.cond(C.COND_CREATED, False, "CreatingPods", f"{len(have)}/{spec.nodes} pods created")
        # A new gang: placement is undecided until every pod exists (and the clock restarts).
        st.cond(C.COND_SCHEDULABLE, "Unknown", "GangIncomplete", "waiting for every pod of the gang")

    # 9. Gang: all pods exist → decide placement and lift the gates together.
    gated = [p for p in current if _is_gated(p)]
    if gated and st.s.attempt_created and len(current) == spec.nodes:
        decision = gang(job, current)
        if decision.placement is not None:
            st.s.placement = PlacementStatus.model_validate(decision.placement)
        st.cond(C.COND_SCHEDULABLE, decision.schedulable, decision.reason, decision.message)
        if decision.release:
            plan.release = [p["metadata"]["name"] for p in gated]
            plan.pins = dict(decision.pins)
        elif not decision.schedulable:
            waited = _gang_waited(st, now)
            elastic = spec.elastic
            if elastic is not None and fits is not None and waited >= elastic.replace_timeout_seconds:
                for n in runnable_sizes(requested, elastic.min_nodes, active - 1):
                    if fits(at_size(requested, n)):
                        return _resize(st, plan, current, active, n, f"no room for {active} nodes for {int(waited)}s", done)
            timeout = spec.scheduling.gang_timeout_seconds
            if timeout and waited >= timeout and spec.scheduling.on_gang_timeout == "Fail":
                st.finish(Phase.FAILED, "GangTimeout", f"gang not placed within {timeout}s: {decision.message}")
                plan.delete_pods += [p["metadata"]["name"] for p in current]
                plan.create = []
                return done()
    elif current and not gated and st.s.attempt_created and not is_true(st.s.conditions, C.COND_SCHEDULABLE):
        st.cond(C.COND_SCHEDULABLE, True, "GatesLifted", "gang released to the scheduler")

    # 10. Phase from the pods.
    _phase_from_pods(st, current, spec.nodes, now)

    # 11. Elastic: grow back towards spec.nodes once the current size has run for a while.
    elastic = spec.elastic
    running = get_condition(st.s.conditions, C.COND_RUNNING)
    since = _parse(running.last_transition_time) if running and running.status == "True" else None
    if elastic is not None and fits is not None and active < requested.spec.nodes and since is not None \
            and (now - since).total_seconds() >= elastic.replace_timeout_seconds:
        for n in runnable_sizes(requested, active + 1, requested.spec.nodes):
            if fits(at_size(requested, n)):
                return _resize(st, plan, current, active, n, "capacity returned", done)
    return done()


def _resize(st: _Status, plan: Plan, current: list[dict], old: int, new: int, why: str, done) -> Plan:
    """Replace the gang with one of ``new`` nodes; it resumes from the checkpoint saved on SIGTERM."""
    message = f"resizing the gang from {old} to {new} nodes ({why}); resuming from the last checkpoint"
    st.s.active_nodes = new
    st.s.restart_attempt += 1
    st.s.attempt_created = False
    st.cond(C.COND_RUNNING, False, "Resizing", message)
    st.phase(Phase.PENDING, "Resizing", message, warning=new < old)
    plan.delete_pods += [p["metadata"]["name"] for p in current if not p["metadata"].get("deletionTimestamp")]
    return done()


def final_progress(pods: list[dict[str, Any]], attempt: int) -> dict[str, Any] | None:
    """Rank 0's final progress, from its termination message (written by the runtime at exit)."""
    for pod in pods:
        if _attempt(pod) != attempt or pod["metadata"]["labels"].get(C.LABEL_NODE_RANK) != "0":
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            final = parse_progress(((cs.get("state") or {}).get("terminated") or {}).get("message"))
            if final and "step" in final:
                return final
    return None


def _apply_progress(st: _Status, report: dict[str, Any] | None, total: int, uid: str | None) -> None:
    """A parsed progress report (lifecycle.progress.parse_progress) into the status."""
    if not report:
        return
    step = report.get("step")
    if step is not None and step != st.s.step:
        st.s.last_progress_time = st.now
    st.s.step = step if step is not None else st.s.step
    if "loss" in report:
        _apply_loss(st, report["loss"])
    if report.get("tokensPerSecond") is not None:
        st.s.tokens_per_second = round(report["tokensPerSecond"], 1)
    if st.s.step is not None and total:
        st.s.progress_percentage = min(100, int(100 * st.s.step / total))
    step_time = report.get("stepTimeSeconds")
    if step_time and st.s.step is not None:
        st.s.estimated_remaining_seconds = min(MAX_ETA_SECONDS, int(max(0, total - st.s.step) * step_time))
    if report.get("lastCheckpoint"):
        st.s.last_checkpoint = CheckpointStatus.model_validate(report["lastCheckpoint"])
    if report.get("resumedFrom") and report["resumedFrom"]["uid"] != uid:
        _resumed_from_predecessor(st, report["resumedFrom"])


def _apply_loss(st: _Status, loss: float) -> None:
    """A finite loss goes into the status; NaN/±inf (a diverged run) never does — it is not JSON,
    and the status patch would fail from then on — it sets LossNotFinite and a Warning Event."""
    diverged = get_condition(st.s.conditions, C.COND_LOSS_NOT_FINITE)
    if math.isfinite(loss):
        st.s.loss = round(loss, 6)
        if diverged is not None and diverged.status == "True":
            st.cond(C.COND_LOSS_NOT_FINITE, False, C.REASON_LOSS_FINITE, f"loss {st.s.loss} at step {st.s.step}")
        return
    st.s.loss = None
    message = f"rank 0 reported loss {loss} at step {st.s.step}: training diverged"
    if diverged is None or diverged.status != "True":
        st.events.append(("Warning", C.REASON_LOSS_NOT_FINITE, message))
    st.cond(C.COND_LOSS_NOT_FINITE, True, C.REASON_LOSS_NOT_FINITE, message)


def _resumed_from_predecessor(st: _Status, resumed: dict[str, Any]) -> None:
    """The runtime resumed a checkpoint another job uid wrote (checkpoint.resume: true, an earlier
    job of this name): say so in the status message, a condition and one Event."""
    who = f"uid {resumed['uid']}" if resumed["uid"] else "an unrecorded uid"
    message = f"resumed from checkpoint step {resumed['step']} of an earlier job with this name ({who})"
    if not is_true(st.s.conditions, C.COND_RESUMED_FROM_PREDECESSOR):
        st.events.append(("Normal", C.REASON_RESUMED_FROM_PREDECESSOR, message))
    st.cond(C.COND_RESUMED_FROM_PREDECESSOR, True, C.REASON_RESUMED_FROM_PREDECESSOR, message)
    if st.s.phase == Phase.RUNNING and message not in (st.s.message or ""):
        st.s.message = f"{st.s.message}; {message}" if st.s.message else message


def _first_failure(st: _Status, current: list[dict], spec, now: datetime, observed: Observed) -> Failure | None:
    for pod in sorted(current, key=pod_rank):
        failure = classify_pod(pod, spec.failure_policy)
        if failure is not None:
            return failure
    for pod in sorted(current, key=pod_rank):
        node = pod.get("spec", {}).get("nodeName")
        if node and node in observed.lost_nodes and _alive(pod):
            return Failure(pod["metadata"]["name"], pod_rank(pod), "NodeLost", f"node {node} is gone or NotReady", None, True)
    if st.s.attempt_created:
        ranks = {pod_rank(p) for p in current}
        missing = [r for r in range(spec.nodes) if r not in ranks]
        if missing:
            return Failure(f"rank {missing[0]}", missing[0], "PodLost", "pod disappeared (deleted, or its node is gone)", None, True)
    hang = spec.failure_policy.hang_timeout_seconds
    last = _parse(st.s.last_progress_time) or _parse(st.s.start_time)
    # A step reported in this very pass is progress (it is applied to the status only in done()).
    fresh = (observed.progress or {}).get("step") not in (None, st.s.step)
    if hang and not fresh and st.s.phase == Phase.RUNNING and last is not None and (now - last).total_seconds() > hang:
        return Failure("rank 0", 0, "Hang", f"no step progress for {int((now - last).total_seconds())}s (hangTimeoutSeconds {hang})", None, True)
    return None


def _on_failure(st: _Status, plan: Plan, failure: Failure, current: list[dict], spec, now: datetime, done) -> Plan:
    live = [p["metadata"]["name"] for p in current if _alive(p)]
    what = failure.describe()
    policy = spec.failure_policy
    if not failure.retryable:
        st.finish(Phase.FAILED, "PermanentFailure", what)
        plan.delete_pods += live
        return done()
    if st.s.restarts >= policy.max_restarts:
        st.finish(Phase.FAILED, "MaxRestartsExceeded", f"restarted {st.s.restarts} times (maxRestarts {policy.max_restarts}); last failure: {what}")
        plan.delete_pods += live
        return done()
    st.s.restarts += 1
    st.s.restart_attempt += 1
    st.s.attempt_created = False
    delay = backoff_seconds(st.s.restarts, policy)
    st.s.next_restart_time = _iso(now + timedelta(seconds=delay))
    message = f"restart {st.s.restarts}/{policy.max_restarts} in {delay}s after {what}"
    st.cond(C.COND_RESTARTING, True, failure.reason, message)
    st.cond(C.COND_RUNNING, False, "Restarting", "")
    st.phase(Phase.RESTARTING, "Restarting", message, warning=True)
    plan.delete_pods += [p["metadata"]["name"] for p in current if not p["metadata"].get("deletionTimestamp")]
    plan.requeue_after = max(float(delay), 0.5)
    _count_ready(st, [])
    return done()


def _stuck_terminating(pods: list[dict], lost_nodes: frozenset[str], now: datetime, timeout: int) -> list[str]:
    """Pods whose grace period ended ``timeout`` s ago on a node that is gone or NotReady: no
    kubelet will ever confirm their deletion, and their hostnames block the next gang."""
    stuck = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in lost_nodes:
            continue
        try:
            deleting = _parse(pod["metadata"].get("deletionTimestamp"))
        except ValueError:
            continue
        if deleting is not None and (now - deleting).total_seconds() > timeout:
            stuck.append(pod["metadata"]["name"])
    return stuck


def _unbound_too_long(st: _Status, current: list[dict], nodes: int, now: datetime, timeout: int) -> int:
    """Pods released (gate lifted) but still unbound ``timeout`` s after the gang was placed."""
    cond = get_condition(st.s.conditions, C.COND_SCHEDULABLE)
    released = _parse(cond.last_transition_time) if cond and cond.status == "True" else None
    if released is None or len(current) != nodes or (now - released).total_seconds() < timeout:
        return 0
    return sum(1 for p in current if not _is_gated(p) and not p.get("spec", {}).get("nodeName") and _alive(p))


def _gang_waited(st: _Status, now: datetime) -> float:
    cond = get_condition(st.s.conditions, C.COND_SCHEDULABLE)
    since = _parse(cond.last_transition_time) if cond and cond.status == "False" else None
    return (now - since).total_seconds() if since else 0.0


def _count_ready(st: _Status, pods: list[dict]) -> None:
    st.s.ready_nodes = sum(1 for p in pods if _is_ready(p))
    st.s.nodes = f"{st.s.ready_nodes}/{st.s.total_nodes}"


def _phase_from_pods(st: _Status, current: list[dict], nodes: int, now: datetime) -> None:
    _count_ready(st, current)
    running = [p for p in current if (p.get("status") or {}).get("phase") == "Running"]
    if len(current) == nodes and len(running) + sum(1 for p in current if (p.get("status") or {}).get("phase") == "Succeeded") == nodes and running:
        st.s.start_time = st.s.start_time or st.now
        if st.s.phase != Phase.RUNNING:
            st.cond(C.COND_RESTARTING, False, "Running", "")
            st.s.last_progress_time = st.now  # the hang clock starts afresh with each gang
        st.cond(C.COND_RUNNING, True, "AllNodesRunning", f"{len(running)}/{nodes} nodes running")
        st.phase(Phase.RUNNING, "Running", f"all {nodes} nodes running")
        return
    if st.s.phase == Phase.RESTARTING and not current:
        return
    if current and len(current) == nodes and st.s.attempt_created:
        unbound = [p for p in current if not p.get("spec", {}).get("nodeName")]
        msg = f"{nodes - len(unbound)}/{nodes} pods bound to nodes"
        st.phase(Phase.SCHEDULING, "Scheduling", msg)
        st.s.message = msg
        return
    if st.s.phase not in (Phase.RESTARTING,):
        st.phase(Phase.PENDING, "Pending", f"{len(current)}/{nodes} pods created")
