"""Kubernetes Workload API (KEP-4671, alpha), two shapes:

- ``v1alpha1`` (Kubernetes 1.35): a scheduling.k8s.io/v1alpha1 Workload with
  ``podGroups: [{name, policy: {gang: {minCount}}}]``; pods join with
  ``spec.workloadRef: {name, podGroup}``.
- ``v1alpha2`` (1.36): the Workload holds ``podGroupTemplates``; a standalone
  scheduling.k8s.io/v1alpha2 PodGroup {podGroupTemplateRef, schedulingPolicy.gang.minCount} is the
  runtime unit; pods join with ``spec.schedulingGroup: {podGroupName}``.

The default scheduler gang-schedules them (GenericWorkload / GangScheduling feature gates), so
Phalanx's own gate is dropped.
"""

from __future__ import annotations

from typing import Any

from phalanx import constants as C
from phalanx.backends.base import BackendRender, PodMutation, object_meta

API_VERSIONS = ("v1alpha1", "v1alpha2")


def render(job: Any, *, api_version: str = "v1alpha1", **_: Any) -> BackendRender:
    if api_version not in API_VERSIONS:
        raise ValueError(f"unsupported Workload API version {api_version!r}; known: {', '.join(API_VERSIONS)}")
    spec = job.spec
    name = job.metadata.name
    group = C.WORKLOAD_POD_GROUP_NAME
    gang = {"gang": {"minCount": spec.nodes}}
    controller_ref = {"apiGroup": C.GROUP, "kind": C.KIND, "name": name}
    sched = spec.scheduling
    if api_version == "v1alpha1":
        wl = {"apiVersion": f"{C.WORKLOAD_API_GROUP}/v1alpha1", "kind": "Workload", "metadata": object_meta(job),
              "spec": {"controllerRef": controller_ref, "podGroups": [{"name": group, "policy": gang}]}}
        mutation = PodMutation(spec_fields={"workloadRef": {"name": name, "podGroup": group}},
                               scheduler_name=sched.scheduler_name, remove_gates=[C.GANG_SCHEDULING_GATE])
        return BackendRender(objects=[wl], pod=mutation)
    wl = {"apiVersion": f"{C.WORKLOAD_API_GROUP}/v1alpha2", "kind": "Workload", "metadata": object_meta(job),
          "spec": {"controllerRef": controller_ref,
                   "podGroupTemplates": [{"name": group, "policy": gang}]}}
    pg_name = f"{name}-{group}"
    pg = {"apiVersion": f"{C.WORKLOAD_API_GROUP}/v1alpha2", "kind": "PodGroup",
          "metadata": object_meta(job, pg_name),
          "spec": {"podGroupTemplateRef": {"workloadName": name, "podGroupTemplateName": group},
                   "schedulingPolicy": gang}}
    mutation = PodMutation(spec_fields={"schedulingGroup": {"podGroupName": pg_name}},
                           scheduler_name=sched.scheduler_name, remove_gates=[C.GANG_SCHEDULING_GATE])
    return BackendRender(objects=[wl, pg], pod=mutation)
