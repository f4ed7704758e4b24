"""Kueue (plain-pod groups): pods carry kueue.x-k8s.io/queue-name and form one pod group
(kueue.x-k8s.io/pod-group-name + pod-group-total-count). Kueue's webhook holds every pod behind
the kueue.x-k8s.io/admission scheduling gate until the whole group is admitted (the job starts
"suspended"); Phalanx's own gate is dropped. Topology goes to the TAS annotations
podset-required-topology / podset-preferred-topology as node-label keys.

Kueue creates one Workload (kueue.x-k8s.io) per pod group, named after the group. ``admission``
mirrors it (and the pods' gates) into what the TrainingJob's ``Schedulable`` condition says, with
Kueue's own reason and message; ``withdrawal`` tells the reconcile that Kueue evicted the gang
(preemption): a new attempt queues again and resumes from the last checkpoint, no restart counted.
Proven against a real Kueue v0.17.0 (tests/integration/test_kueue_backend.py, tests/e2e/test_kueue.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx import constants
from phalanx.api.config import TopologyLevel
from phalanx.api.types import GangBackend
from phalanx.backends.base import Backend, BackendRender, PodMutation, level_label
from phalanx.constants import KueueReason
from phalanx.decision import Schedulable

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
WORKLOADS = "workloads"
# The pod condition Kueue sets on each pod of a gang it stops (then deletes the pod).
POD_CONDITION_TERMINATION_TARGET = "TerminationTarget"


def render(
    job: Any,
    *,
    levels: Sequence[TopologyLevel] | None = None,
    group_name: str | None = None,
    **_: Any,
) -> BackendRender:
    spec = job.spec
    sched = spec.scheduling
    errors = []
    if not sched.queue:
        errors.append("scheduling.queue: backend kueue needs a LocalQueue name")
    labels = {constants.LABEL_KUEUE_POD_GROUP_NAME: group_name or job.metadata.name}
    if sched.queue:
        labels[constants.LABEL_KUEUE_QUEUE_NAME] = sched.queue
    annotations = {constants.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT: str(spec.gang_size)}
    if sched.topology.required:
        annotations[constants.ANNOTATION_KUEUE_REQUIRED_TOPOLOGY] = level_label(sched.topology.required, levels)
    elif sched.topology.preferred:
        annotations[constants.ANNOTATION_KUEUE_PREFERRED_TOPOLOGY] = level_label(sched.topology.preferred, levels)
    mutation = PodMutation(labels=labels, annotations=annotations,
                           scheduler_name=sched.scheduler_name, remove_gates=[constants.GANG_SCHEDULING_GATE])
    return BackendRender(objects=[], pod=mutation, errors=errors)


def workload_name(pods: Sequence[Mapping[str, Any]], job_name: str) -> str:
    """The Workload Kueue makes for the gang: named after the pod group (label on the pods)."""
    for pod in pods:
        group = (pod.get("metadata", {}).get("labels") or {}).get(constants.LABEL_KUEUE_POD_GROUP_NAME)
        if group:
            return group
    return job_name


# --------------------------------------------------------------------------------------------
# Kueue's view of the gang → the Schedulable condition (pure)


@dataclass(frozen=True)
class Admission:
    """What an external admitter (Kueue) says about the gang, as a condition: ``status`` is
    "True" | "False" | "Unknown"; ``reason``/``message`` are Kueue's own where it gave one.
    ``evicted``: Kueue withdrew an admission (preempted, deactivated, ...) and requeued the gang."""

    status: str
    reason: str
    message: str
    evicted: bool = False

    def condition(self) -> Schedulable:
        """The Schedulable condition it makes (Observed.backend_schedulable)."""
        return Schedulable(self.status, self.reason, self.message)

    def eviction(self) -> tuple[str, str] | None:
        """(reason, message) when Kueue evicted the gang (Observed.backend_evicted), else None."""
        return (self.reason, self.message) if self.evicted else None


def _conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {c.get("type"): c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def _is(conds: Mapping[str, Mapping[str, Any]], type_: str, status: str = "True") -> bool:
    return (conds.get(type_) or {}).get("status") == status


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == constants.KUEUE_ADMISSION_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def _stopped_by_kueue(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == POD_CONDITION_TERMINATION_TARGET and c.get("status") == "True":
            return c
    return None


def _topology_summary(admission: Mapping[str, Any]) -> str:
    """'; topology b0-s1 ×4' style: the TAS domains Kueue assigned (v1beta2 slices or v1beta1 domains)."""
    parts = []
    for psa in admission.get("podSetAssignments") or []:
        ta = psa.get("topologyAssignment") or {}
        levels = ta.get("levels") or []
        domains = []
        for d in ta.get("domains") or []:  # v1beta1 shape: [{values, count}]
            domains.append((d.get("values") or [], d.get("count")))
        for sl in ta.get("slices") or []:  # v1beta2 shape: per-level value lists, podCounts
            values = _slice_values(sl, len(levels))
            counts = _slice_counts(sl, len(values))
            domains.extend(zip(values, counts, strict=False))
        if domains:
            hosts = sorted({v[-1] for v, _ in domains if v})
            parts.append(f"{len(hosts)} nodes in {len(domains)} {levels[-1] if levels else 'domain'} domains")
    return ("; TAS: " + ", ".join(parts)) if parts else ""


def _slice_values(sl: Mapping[str, Any], nlevels: int) -> list[list[str]]:
    per_level = []
    for lvl in sl.get("valuesPerLevel") or []:
        universal = lvl.get("universal")
        individual = lvl.get("individual") or {}
        roots = individual.get("roots") or []
        prefix, suffix = individual.get("prefix") or "", individual.get("suffix") or ""
        per_level.append([universal] if universal is not None else [f"{prefix}{r}{suffix}" for r in roots])
    size = max((len(v) for v in per_level), default=int(sl.get("domainCount") or 0))
    return [[vals[i] if len(vals) > 1 else vals[0] for vals in per_level if vals] for i in range(size)]


def _slice_counts(sl: Mapping[str, Any], n: int) -> list[int]:
    pc = sl.get("podCounts") or {}
    if pc.get("universal") is not None:
        return [int(pc["universal"])] * n
    return [int(x) for x in pc.get("individual") or []] or [0] * n


def admission(workload: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> Admission | None:
    """Kueue's Workload for the gang (or None: not there yet) and the gang's pods → the
    Schedulable condition. None when Kueue has nothing to say (no pods, workload finished)."""
    stopped = next((c for p in pods if (c := _stopped_by_kueue(p))), None)
    if workload is None:
        if stopped is not None:
            return Admission("False", stopped.get("reason") or KueueReason.STOPPED,
                             f"Kueue stopped the gang: {stopped.get('message') or ''}".rstrip(": "), evicted=True)
        if any(_gated(p) for p in pods):
            return Admission("Unknown", KueueReason.WAITING,
                             f"pods held by the {constants.KUEUE_ADMISSION_GATE} gate; Kueue has not made a Workload for the pod group yet")
        return None
    conds = _conditions(workload)
    name = (workload.get("metadata") or {}).get("name", "")
    if _is(conds, "Finished"):
        return None
    if (workload.get("spec") or {}).get("active") is False:
        c = conds.get("Evicted") or {}
        return Admission("False", KueueReason.DEACTIVATED, f"Kueue Workload {name} is deactivated: {c.get('message') or 'spec.active is false'}",
                         evicted=True)
    if _is(conds, "Evicted"):
        ev = conds["Evicted"]
        message = f"Kueue evicted Workload {name} ({ev.get('reason')}): {ev.get('message') or ''}".rstrip(": ")
        qr = conds.get("QuotaReserved") or {}
        if qr.get("status") == "False" and qr.get("message"):
            message += f"; requeued: {qr['message']}"
        return Admission("False", ev.get("reason") or KueueReason.EVICTED, message, evicted=True)
    if _is(conds, "Admitted"):
        adm = ((workload.get("status") or {}).get("admission")) or {}
        cq = adm.get("clusterQueue")
        message = f"admitted by Kueue (Workload {name}, ClusterQueue {cq})" + _topology_summary(adm)
        return Admission("True", KueueReason.ADMITTED, message)
    if _is(conds, "QuotaReserved"):
        qr = conds["QuotaReserved"]
        return Admission("Unknown", KueueReason.QUOTA_RESERVED,
                         f"Kueue reserved quota for Workload {name}; waiting for admission checks: {qr.get('message') or ''}".rstrip(": "))
    qr = conds.get("QuotaReserved")
    if qr is not None:  # False: pending, with Kueue's reason (Pending, Inadmissible, ...) and message
        return Admission("False", qr.get("reason") or KueueReason.PENDING, f"Kueue: {qr.get('message') or 'pending'}")
    return Admission("Unknown", KueueReason.QUEUED, f"Kueue Workload {name} created; not yet evaluated")


def withdrawal(evicted: tuple[str, str] | None, pods: Sequence[Mapping[str, Any]], attempt_created: bool,
               nodes: int) -> tuple[str, str] | None:
    """(reason, message) if Kueue took this attempt's gang away, else None. Kueue stops a gang by
    setting the TerminationTarget condition on each pod and deleting it; or its Workload says
    Evicted (``evicted``, from ``Admission.eviction``) while pods of the created gang are gone or
    going. A new attempt queued behind a still-Evicted Workload (all its pods alive) is not."""
    stopped = next((c for p in pods if (c := _stopped_by_kueue(p))), None)
    if stopped is not None and evicted is not None:
        return evicted  # the Workload's reason (Preempted), not the pods' (WorkloadEvictedDueToPreempted)
    if stopped is not None:
        reason = stopped.get("reason") or KueueReason.STOPPED
        return reason, f"Kueue stopped the gang ({reason}): {stopped.get('message') or ''}".rstrip(": ")
    if evicted is None or not attempt_created:
        return None
    alive = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    return evicted if len(alive) < nodes else None


class Kueue(Backend):
    name = GangBackend.KUEUE
    reads_kueue_workload = True

    def render(self, job: Any, **kwargs: Any) -> BackendRender:
        return render(job, **kwargs)


BACKEND = Kueue()
