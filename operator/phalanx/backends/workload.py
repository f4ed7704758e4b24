"""Kubernetes Workload API (KEP-4671, alpha) with kube-scheduler's own gang and topology-aware
workload scheduling (KEP-5732). Two shapes, picked from what the API server serves:

- ``v1alpha2`` (Kubernetes 1.36; feature gates ``GenericWorkload``, ``GangScheduling``,
  ``TopologyAwareWorkloadScheduling`` and ``--runtime-config=scheduling.k8s.io/v1alpha2=true``):
  a Workload ``{controllerRef, podGroupTemplates: [{name, schedulingPolicy: {gang: {minCount}},
  schedulingConstraints: {topology: [{key}]}}]}`` and the runtime unit, a standalone PodGroup
  ``{podGroupTemplateRef: {workload: {workloadName, podGroupTemplateName}}, schedulingPolicy,
  schedulingConstraints}``; pods join with ``spec.schedulingGroup: {podGroupName}``. The
  scheduler reports on the PodGroup: condition ``PodGroupScheduled`` (True ``Scheduled``; False
  ``Unschedulable`` / ``SchedulerError``) and ``DisruptionTarget`` (``PreemptionByScheduler``).
- ``v1alpha1`` (Kubernetes 1.35): a Workload with ``podGroups: [{name, policy: {gang: {minCount}}}]``;
  pods join with ``spec.workloadRef: {name, podGroup}``. No topology constraints, no status.

Topology: ``scheduling.topology.required`` (a level name or label key) becomes the PodGroup's one
``schedulingConstraints.topology`` key — kube-scheduler then tries each domain of that label
(TopologyPlacementGenerator), scores the feasible ones (NodeResourcesFit's placement score,
PodGroupPodsCount) and binds the whole group inside the best. The API has no soft constraint:
``preferred`` alone renders no constraint (the scheduler may spread the gang).

kube-scheduler gang-schedules the group itself, so Phalanx's own gate is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from phalanx import constants
from phalanx.api.types import GangBackend
from phalanx.backends.base import Backend, BackendRender, PodMutation, level_label, object_meta
from phalanx.constants import WorkloadReason
from phalanx.decision import Schedulable

API_VERSIONS = ("v1alpha1", "v1alpha2")  # oldest → newest
LATEST = API_VERSIONS[-1]
# PodGroup status (k8s.io/api/scheduling/v1alpha2): condition types and reasons.
COND_SCHEDULED = "PodGroupScheduled"
COND_DISRUPTION = "DisruptionTarget"

def pick_api_version(served: Mapping[str, Iterable[str]]) -> str | None:
    """The newest Workload API version the server serves, from discovery: ``{version: resource
    plural names}`` of group scheduling.k8s.io (``/apis/scheduling.k8s.io/<version>``). A version
    counts when it serves ``workloads`` (and, for v1alpha2, ``podgroups``); None when none does."""
    for version in reversed(API_VERSIONS):
        names = set(served.get(version) or ())
        if "workloads" in names and (version == "v1alpha1" or "podgroups" in names):
            return version
    return None


def served_version(served: Sequence[str] | None) -> str | None:
    """The version to render, from what the operator discovered at start-up
    (``OperatorConfig.workload_api_versions``, oldest → newest): ``LATEST`` when nothing was
    discovered (offline render and validate); None when the server serves none."""
    if served is None:
        return LATEST
    return served[-1] if served else None


def topology_constraints(sched: Any, levels: Sequence[Any] | None) -> tuple[list[dict[str, str]], list[str]]:
    """``scheduling.topology.required`` → ``[{key: <node label>}]`` (errors when the level is unknown)."""
    level = sched.topology.required
    if not level:
        return [], []
    key = level_label(level, levels)
    if levels and not any(level in (lvl.name, lvl.label) for lvl in levels):
        return [], [f"scheduling.topology: level {level!r} is not a configured topology level"]
    return [{"key": key}], []


def render(job: Any, *, api_version: str | None = None, workload_api_versions: Sequence[str] | None = None,
           levels: Sequence[Any] | None = None, **_: Any) -> BackendRender:
    """``api_version``: this shape; else the newest of ``workload_api_versions`` (what discovery found)."""
    version = api_version or served_version(workload_api_versions)
    if version is None:
        return BackendRender(errors=[
            "scheduling.backend: workload needs the Kubernetes Workload API (scheduling.k8s.io "
            f"{' or '.join(API_VERSIONS)}: workloads, podgroups), which this cluster does not serve; enable the "
            "GenericWorkload and GangScheduling feature gates and --runtime-config=scheduling.k8s.io/v1alpha2=true"])
    if version not in API_VERSIONS:
        raise ValueError(f"unsupported Workload API version {version!r}; known: {', '.join(API_VERSIONS)}")
    spec = job.spec
    name = job.metadata.name
    group = constants.WORKLOAD_POD_GROUP_NAME
    gang = {"gang": {"minCount": spec.gang_size}}
    controller_ref = {"apiGroup": constants.GROUP, "kind": constants.KIND, "name": name}
    sched = spec.scheduling
    topology, errors = topology_constraints(sched, levels)
    if version == "v1alpha1":
        if topology:
            errors.append("scheduling.topology.required: the cluster's Workload API (scheduling.k8s.io/v1alpha1) "
                          "has no topology constraints; they need v1alpha2 (Kubernetes 1.36)")
        wl = {"apiVersion": f"{constants.WORKLOAD_API_GROUP}/v1alpha1", "kind": "Workload", "metadata": object_meta(job),
              "spec": {"controllerRef": controller_ref, "podGroups": [{"name": group, "policy": gang}]}}
        mutation = PodMutation(spec_fields={"workloadRef": {"name": name, "podGroup": group}},
                               scheduler_name=sched.scheduler_name, remove_gates=[constants.GANG_SCHEDULING_GATE])
        return BackendRender(objects=[wl], pod=mutation, errors=errors)
    template: dict[str, Any] = {"name": group, "schedulingPolicy": gang}
    pg_spec: dict[str, Any] = {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": group}},
                               "schedulingPolicy": gang}
    if topology:
        template["schedulingConstraints"] = {"topology": topology}
        pg_spec["schedulingConstraints"] = {"topology": topology}
    wl = {"apiVersion": f"{constants.WORKLOAD_API_GROUP}/v1alpha2", "kind": "Workload", "metadata": object_meta(job),
          "spec": {"controllerRef": controller_ref, "podGroupTemplates": [template]}}
    pg = {"apiVersion": f"{constants.WORKLOAD_API_GROUP}/v1alpha2", "kind": "PodGroup",
          "metadata": object_meta(job, pod_group_name(name)), "spec": pg_spec}
    mutation = PodMutation(spec_fields={"schedulingGroup": {"podGroupName": pod_group_name(name)}},
                           scheduler_name=sched.scheduler_name, remove_gates=[constants.GANG_SCHEDULING_GATE])
    return BackendRender(objects=[wl, pg], pod=mutation, errors=errors)


def pod_group_name(job_name: str) -> str:
    """The v1alpha2 PodGroup of a job (one gang: one group)."""
    return f"{job_name}-{constants.WORKLOAD_POD_GROUP_NAME}"


def schedulable(pod_group: Mapping[str, Any] | None) -> Schedulable:
    """What a v1alpha2 PodGroup's status says about the gang, as the job's ``Schedulable``
    condition, with status True, False or "Unknown".

    - no PodGroup (not created yet, or the API does not serve it): Unknown ``PodGroupMissing``;
    - ``DisruptionTarget=True`` (the scheduler preempts the group): False, its reason;
    - ``PodGroupScheduled=True``: True ``Scheduled`` (kube-scheduler placed the whole gang);
    - ``PodGroupScheduled=False``: False ``Unschedulable`` or ``SchedulerError``, with the
      scheduler's message (e.g. ``0/16 nodes are available: ...``);
    - no condition yet: Unknown ``WaitingForScheduler`` (fewer than minCount pods seen, or not tried).
    """
    if not pod_group:
        return Schedulable("Unknown", WorkloadReason.POD_GROUP_MISSING, "the PodGroup does not exist (yet)")
    name = (pod_group.get("metadata") or {}).get("name", "")
    conds = {c.get("type"): c for c in ((pod_group.get("status") or {}).get("conditions") or []) if isinstance(c, Mapping)}
    disrupted = conds.get(COND_DISRUPTION)
    if disrupted and disrupted.get("status") == "True":
        return Schedulable(False, str(disrupted.get("reason") or WorkloadReason.DISRUPTED), _msg(name, disrupted, "the PodGroup is being disrupted"))
    cond = conds.get(COND_SCHEDULED)
    if cond is None or cond.get("status") not in ("True", "False"):
        return Schedulable("Unknown", WorkloadReason.WAITING_FOR_SCHEDULER, f"PodGroup {name}: kube-scheduler has not placed the gang yet")
    if cond["status"] == "True":
        return Schedulable(True, WorkloadReason.SCHEDULED, _msg(name, cond, "kube-scheduler placed the whole gang"))
    return Schedulable(False, str(cond.get("reason") or WorkloadReason.UNSCHEDULABLE), _msg(name, cond, "kube-scheduler cannot place the gang"))


def _msg(name: str, cond: Mapping[str, Any], default: str) -> str:
    text = str(cond.get("message") or "").strip()
    return f"PodGroup {name}: {text or default}"


class Workload(Backend):
    name = GangBackend.WORKLOAD

    def reads_pod_group(self, workload_api_versions: Sequence[str] | None) -> bool:
        return served_version(workload_api_versions) == "v1alpha2"  # v1alpha1's Workload has no status

    def render(self, job: Any, **kwargs: Any) -> BackendRender:
        return render(job, **kwargs)


BACKEND = Workload()
