"""A job's status while it is being decided, and the phase machine: the pydantic status plus
helpers that record transitions (conditions with lastTransitionTime/observedGeneration, phase
Events), the phase the current gang's pods put the job in (Pending → Scheduling → Running), and
the reason every write carries (status.reason: the condition that decides the phase)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from phalanx.api.slots import role_counts, slot_of
from phalanx.api.types import Phase, RoleStatus, TrainingJobSpec, TrainingJobStatus
from phalanx.constants import ROLE_WORKER, ConditionType, Reason
from phalanx.lifecycle.conditions import set_condition
from phalanx.lifecycle.pods import is_ready, pod_phase


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(ts: str | None) -> datetime | None:
    """RFC 3339 (as Kubernetes and the runtime write it) → an aware datetime; ValueError if malformed."""
    if not ts:
        return None
    parsed = datetime.fromisoformat(ts)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


# Why a job is in its phase (status.reason, the Reason printer column): per phase, the conditions
# that can decide it, most telling first, each with the states in which it does; the first that
# holds gives the reason. Asking per phase keeps a condition that is true but beside the point (a
# job is Valid for life; Created stays True from the last attempt) from standing in for the state.
TRUE, FALSE, NOT_TRUE = frozenset({"True"}), frozenset({"False"}), frozenset({"False", "Unknown"})
_NOT_DECIDED = (ConditionType.RECONCILED, FALSE)  # a ReconcileError the operator has not given up on
_WAITING = (
    _NOT_DECIDED,
    (ConditionType.CREATED, FALSE),  # pods being created, old ones terminating, a refusal
    (ConditionType.SCHEDULABLE, NOT_TRUE),  # the gang's wait: Insufficient, Kueue's reason, ...
    (ConditionType.SUSPENDED, TRUE),  # the admitter took the gang away and has not readmitted it
    (ConditionType.SCHEDULABLE, TRUE),  # placed or released; the pods are starting
)
DECIDING: dict[Phase, tuple[tuple[ConditionType, frozenset[str]], ...]] = {
    Phase.PENDING: _WAITING,
    Phase.SCHEDULING: _WAITING,
    Phase.RUNNING: (_NOT_DECIDED, (ConditionType.RESTARTING, TRUE), (ConditionType.RUNNING, TRUE)),
    Phase.RESTARTING: (_NOT_DECIDED, (ConditionType.RESTARTING, TRUE)),
    Phase.SUSPENDED: ((ConditionType.SUSPENDED, TRUE),),
    Phase.SUCCEEDED: ((ConditionType.SUCCEEDED, TRUE),),
    Phase.FAILED: ((ConditionType.FAILED, TRUE),),
}


def current_reason(status: TrainingJobStatus) -> str:
    """The reason of the condition that decides ``status.phase`` (``DECIDING``); the phase itself
    when none does (a job that has not got that far, e.g. one waiting for an earlier job's pods)."""
    conditions = {cond.type: cond for cond in status.conditions}
    for type_, states in DECIDING.get(status.phase, ()):
        cond = conditions.get(type_)
        if cond is not None and cond.status in states and cond.reason:
            return cond.reason
    return str(status.phase)


class StatusView:
    """Mutable view of the status with helpers that record transitions."""

    def __init__(self, raw: dict[str, Any] | None, generation: int | None, now: datetime):
        self.status = TrainingJobStatus.model_validate(raw or {})
        self.before = self.status.model_dump(by_alias=True, mode="json", exclude_none=True)
        self.generation = generation
        self.now = iso(now)
        self.events: list[tuple[str, str, str]] = []
        self.role_totals: dict[str, int] | None = None  # pods per role, for jobs with spec.roles

    def cond(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.status.conditions = set_condition(self.status.conditions, type_, status, reason, message, self.now, self.generation)

    def phase(self, phase: Phase, reason: str, message: str, warning: bool = False) -> None:
        if self.status.phase != phase:
            self.events.append(("Warning" if warning else "Normal", reason, message or f"phase {phase}"))
        self.status.phase = phase
        self.status.message = message or None

    def finish(self, phase: Phase, reason: str, message: str) -> None:
        failed = phase == Phase.FAILED
        self.phase(phase, reason, message, warning=failed)
        self.cond(ConditionType.SUCCEEDED, not failed, reason, message)
        self.cond(ConditionType.FAILED, failed, reason, message)
        self.cond(ConditionType.RUNNING, False, reason, message)
        self.cond(ConditionType.RESTARTING, False, reason, "")
        self.status.completion_time = self.status.completion_time or self.now

    def body(self) -> dict[str, Any]:
        """The status as it is written; every write sets its reason from its conditions."""
        self.status.reason = current_reason(self.status)
        return self.status.model_dump(by_alias=True, mode="json", exclude_none=True)

    def dump(self) -> dict[str, Any] | None:
        self.status.observed_generation = self.generation
        after = self.body()
        return after if after != self.before else None


def _role(pod: dict[str, Any]) -> str:
    slot = slot_of(pod)
    return slot.role if slot is not None else ROLE_WORKER


def count_ready(view: StatusView, pods: list[dict[str, Any]]) -> None:
    """Ready workers (``nodes``) and, for jobs with spec.roles, ready pods per role."""
    ready = Counter(_role(p) for p in pods if is_ready(p))
    view.status.ready_nodes = ready[ROLE_WORKER]
    view.status.nodes = f"{view.status.ready_nodes}/{view.status.total_nodes}"
    if view.role_totals:
        view.status.roles = [RoleStatus(name=role, replicas=total, ready=ready[role])
                             for role, total in view.role_totals.items()]
        view.status.roles_ready = " ".join(f"{role}:{ready[role]}/{total}" for role, total in view.role_totals.items())
    else:  # no roles (any more: they may be removed while suspended)
        view.status.roles = view.status.roles_ready = None


def succeeded_roles(spec: TrainingJobSpec, current: list[dict[str, Any]]) -> str | None:
    """The success message once every pod of ``spec.success_roles`` has exited 0, else None."""
    counts = role_counts(spec)
    done = Counter(_role(p) for p in current if pod_phase(p) == "Succeeded")
    if not current or any(done[role] < counts.get(role, 0) for role in spec.success_roles):
        return None
    if set(spec.success_roles) == set(counts):
        return f"all {spec.gang_size} pods completed" if spec.roles else f"all {spec.nodes} nodes completed"
    return f"every pod of {', '.join(spec.success_roles)} completed"


def phase_from_pods(view: StatusView, current: list[dict[str, Any]], nodes: int) -> None:
    """Pending (pods being created) → Scheduling (all exist, binding) → Running (all running)."""
    count_ready(view, current)
    running = [p for p in current if pod_phase(p) == "Running"]
    succeeded = sum(1 for p in current if pod_phase(p) == "Succeeded")
    if len(current) == nodes and len(running) + succeeded == nodes and running:
        view.status.start_time = view.status.start_time or view.now
        if view.status.phase != Phase.RUNNING:
            view.cond(ConditionType.RESTARTING, False, Reason.RUNNING, "")
            view.status.last_progress_time = view.now  # the hang clock starts afresh with each gang
        what = "pods" if view.role_totals else "nodes"  # a gang with roles: not every pod is a node
        view.cond(ConditionType.RUNNING, True, Reason.ALL_NODES_RUNNING, f"{len(running)}/{nodes} {what} running")
        view.phase(Phase.RUNNING, Reason.RUNNING, f"all {nodes} {what} running")
        return
    if view.status.phase == Phase.RESTARTING and not current:
        return
    if current and len(current) == nodes and view.status.attempt_created:
        unbound = [p for p in current if not p.get("spec", {}).get("nodeName")]
        msg = f"{nodes - len(unbound)}/{nodes} pods bound to nodes"
        view.phase(Phase.SCHEDULING, Reason.SCHEDULING, msg)
        view.status.message = msg
        return
    if view.status.phase not in (Phase.RESTARTING,):
        view.phase(Phase.PENDING, Reason.PENDING, f"{len(current)}/{nodes} pods created")
