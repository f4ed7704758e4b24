"""A job's status while it is being decided, and the phase machine: the pydantic status plus
helpers that record transitions (conditions with lastTransitionTime/observedGeneration, phase
Events), and the phase the current gang's pods put the job in (Pending → Scheduling → Running)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

from phalanx import constants as C
from phalanx.api.slots import role_counts, slot_of
from phalanx.api.types import Phase, RoleStatus, TrainingJobSpec, TrainingJobStatus
from phalanx.constants import Reason
from phalanx.lifecycle.conditions import set_condition
from phalanx.lifecycle.pods import is_ready, pod_phase


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(ts: str | None) -> datetime | None:
    """RFC 3339 (as Kubernetes and the runtime write it) → an aware datetime; ValueError if malformed."""
    if not ts:
        return None
    parsed = datetime.fromisoformat(ts)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class StatusView:
    """Mutable view of the status with helpers that record transitions."""

    def __init__(self, raw: dict[str, Any] | None, generation: int | None, now: datetime):
        self.s = TrainingJobStatus.model_validate(raw or {})
        self.before = self.s.model_dump(by_alias=True, mode="json", exclude_none=True)
        self.generation = generation
        self.now = iso(now)
        self.events: list[tuple[str, str, str]] = []
        self.role_totals: dict[str, int] | None = None  # pods per role, for jobs with spec.roles

    def cond(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.s.conditions = set_condition(self.s.conditions, type_, status, reason, message, self.now, self.generation)

    def phase(self, phase: Phase, reason: str, message: str, warning: bool = False) -> None:
        if self.s.phase != phase:
            self.events.append(("Warning" if warning else "Normal", reason, message or f"phase {phase}"))
        self.s.phase = phase
        self.s.message = message or None

    def finish(self, phase: Phase, reason: str, message: str) -> None:
        failed = phase == Phase.FAILED
        self.phase(phase, reason, message, warning=failed)
        self.cond(C.COND_SUCCEEDED, not failed, reason, message)
        self.cond(C.COND_FAILED, failed, reason, message)
        self.cond(C.COND_RUNNING, False, reason, message)
        self.cond(C.COND_RESTARTING, False, reason, "")
        self.s.completion_time = self.s.completion_time or self.now

    def dump(self) -> dict[str, Any] | None:
        self.s.observed_generation = self.generation
        after = self.s.model_dump(by_alias=True, mode="json", exclude_none=True)
        return after if after != self.before else None


def _role(pod: dict[str, Any]) -> str:
    slot = slot_of(pod)
    return slot.role if slot is not None else C.ROLE_WORKER


def count_ready(st: StatusView, pods: list[dict[str, Any]]) -> None:
    """Ready workers (``nodes``) and, for jobs with spec.roles, ready pods per role."""
    ready = Counter(_role(p) for p in pods if is_ready(p))
    st.s.ready_nodes = ready[C.ROLE_WORKER]
    st.s.nodes = f"{st.s.ready_nodes}/{st.s.total_nodes}"
    if st.role_totals:
        st.s.roles = [RoleStatus(name=r, replicas=n, ready=ready[r]) for r, n in st.role_totals.items()]
        st.s.roles_ready = " ".join(f"{r}:{ready[r]}/{n}" for r, n in st.role_totals.items())
    else:  # no roles (any more: they may be removed while suspended)
        st.s.roles = st.s.roles_ready = None


def succeeded_roles(spec: TrainingJobSpec, current: list[dict[str, Any]]) -> str | None:
    """The success message once every pod of ``spec.success_roles`` has exited 0, else None."""
    counts = role_counts(spec)
    done = Counter(_role(p) for p in current if pod_phase(p) == "Succeeded")
    if not current or any(done[r] < counts.get(r, 0) for r in spec.success_roles):
        return None
    if set(spec.success_roles) == set(counts):
        return f"all {spec.gang_size} pods completed" if spec.roles else f"all {spec.nodes} nodes completed"
    return f"every pod of {', '.join(spec.success_roles)} completed"


def phase_from_pods(st: StatusView, current: list[dict[str, Any]], nodes: int) -> None:
    """Pending (pods being created) → Scheduling (all exist, binding) → Running (all running)."""
    count_ready(st, current)
    running = [p for p in current if pod_phase(p) == "Running"]
    succeeded = sum(1 for p in current if pod_phase(p) == "Succeeded")
    if len(current) == nodes and len(running) + succeeded == nodes and running:
        st.s.start_time = st.s.start_time or st.now
        if st.s.phase != Phase.RUNNING:
            st.cond(C.COND_RESTARTING, False, Reason.RUNNING, "")
            st.s.last_progress_time = st.now  # the hang clock starts afresh with each gang
        what = "pods" if st.role_totals else "nodes"  # a gang with roles: not every pod is a node
        st.cond(C.COND_RUNNING, True, Reason.ALL_NODES_RUNNING, f"{len(running)}/{nodes} {what} running")
        st.phase(Phase.RUNNING, Reason.RUNNING, f"all {nodes} {what} running")
        return
    if st.s.phase == Phase.RESTARTING and not current:
        return
    if current and len(current) == nodes and st.s.attempt_created:
        unbound = [p for p in current if not p.get("spec", {}).get("nodeName")]
        msg = f"{nodes - len(unbound)}/{nodes} pods bound to nodes"
        st.phase(Phase.SCHEDULING, Reason.SCHEDULING, msg)
        st.s.message = msg
        return
    if st.s.phase not in (Phase.RESTARTING,):
        st.phase(Phase.PENDING, Reason.PENDING, f"{len(current)}/{nodes} pods created")
