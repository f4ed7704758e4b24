"""The interface of a gang backend (``Backend``) and the shared shapes of their renderers."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from phalanx import constants
from phalanx.api.types import GangBackend
from phalanx.gang.inventory import format_amount
from phalanx.gang.planner import GangRequest


@dataclass
class PodMutation:
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None  # set unless the pod already names one
    add_gates: list[str] = field(default_factory=list)
    remove_gates: list[str] = field(default_factory=list)
    spec_fields: dict[str, Any] = field(default_factory=dict)  # e.g. workloadRef / schedulingGroup


@dataclass
class BackendRender:
    objects: list[dict[str, Any]] = field(default_factory=list)  # create before the pods
    pod: PodMutation = field(default_factory=PodMutation)
    errors: list[str] = field(default_factory=list)


class Backend(ABC):
    """One ``spec.scheduling.backend``: how it renders a gang (its objects and the pods' mutation),
    what it refuses, and where the operator reads its verdict on the gang. A backend module
    subclasses it once (``BACKEND``); ``phalanx.backends.backend_for`` picks it. Stateless: what
    the cluster serves comes in as arguments."""

    name: ClassVar[GangBackend]
    # Phalanx's own gang admission places the pods (gang.admission): it may create a gang pinned.
    admits_itself: ClassVar[bool] = False
    # Kueue admits the gang: its Workload carries the verdict (backends.kueue.admission).
    reads_kueue_workload: ClassVar[bool] = False

    @abstractmethod
    def render(self, job: Any, **kwargs: Any) -> BackendRender:
        """The backend's objects and what it adds to every pod."""

    def validate(self, job: Any, **kwargs: Any) -> list[str]:
        """What this backend refuses of ``job`` (the errors of its render), field first."""
        return self.render(job, **kwargs).errors

    def reads_pod_group(self, workload_api_versions: Sequence[str] | None) -> bool:
        """The scheduler reports on the gang's PodGroup (backends.workload.schedulable), given the
        Workload API versions the cluster serves (None: not discovered)."""
        return False


def object_meta(job: Any, name: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name or job.metadata.name,
        "namespace": job.metadata.namespace,
        "labels": {constants.LABEL_JOB_NAME: job.metadata.name, constants.LABEL_MANAGED_BY: constants.MANAGED_BY},
    }
    owners = job.owner_references()
    if owners:
        meta["ownerReferences"] = owners
    return meta


def pod_requests(spec: Any, extra: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Per-pod requests in canonical units (as the planner sees them), without the pods slot."""
    req = dict(GangRequest.from_spec(spec, "", extra_requests=extra).requests)
    req.pop(constants.RESOURCE_PODS, None)
    return req


def min_resources(spec: Any, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Whole-gang requests (per pod × pods, of the workers and of every role) as quantity strings."""
    gang = GangRequest.from_spec(spec, "", extra_requests=extra)
    total: dict[str, int] = {}
    for part in (gang, *gang.roles):
        for k, v in part.requests.items():
            if k != constants.RESOURCE_PODS:
                total[k] = total.get(k, 0) + v * part.count
    return {k: format_amount(k, v) for k, v in total.items()}


def apply_mutation(pod: dict[str, Any], m: PodMutation) -> dict[str, Any]:
    return merge_mutation(copy.deepcopy(pod), m)


def merge_mutation(pod: dict[str, Any], m: PodMutation) -> dict[str, Any]:
    """:func:`apply_mutation` in place, for a pod just built that nothing else holds."""
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    if m.labels:
        meta.setdefault("labels", {}).update(m.labels)
    if m.annotations:
        meta.setdefault("annotations", {}).update(m.annotations)
    if m.scheduler_name and not spec.get("schedulerName"):
        spec["schedulerName"] = m.scheduler_name
    gates = [g for g in spec.get("schedulingGates", []) if g.get("name") not in m.remove_gates]
    for g in m.add_gates:
        if all(x.get("name") != g for x in gates):
            gates.append({"name": g})
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
    for k, v in m.spec_fields.items():
        spec[k] = copy.deepcopy(v)
    return pod


def level_label(spec_level: str | None, levels: Any) -> str | None:
    """The node-label key of a job's topology level (given by name or label)."""
    if not spec_level:
        return None
    for lvl in levels or ():
        if spec_level in (lvl.name, lvl.label):
            return lvl.label
    return spec_level
