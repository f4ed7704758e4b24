"""Volcano: a scheduling.volcano.sh/v1beta1 PodGroup; pods use schedulerName volcano and join
the group by the annotation scheduling.k8s.io/group-name. Topology maps to the PodGroup's
networkTopology (hard for ``required``, soft for ``preferred``); Volcano counts HyperNode tiers
from the leaf switch (tier 1) upward, so level i of n (coarse → fine, hostname last) is tier n−1−i.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from phalanx import constants
from phalanx.api.config import TopologyLevel
from phalanx.api.types import GangBackend
from phalanx.backends.base import Backend, BackendRender, PodMutation, min_resources, object_meta


def tier_of(level: str, levels: Sequence[TopologyLevel]) -> int | None:
    n = len(levels)
    for i, lvl in enumerate(levels):
        if level in (lvl.name, lvl.label):
            return max(1, n - 1 - i)
    return None


def render(
    job: Any,
    *,
    levels: Sequence[TopologyLevel] | None = None,
    extra_requests: Mapping[str, Any] | None = None,
    **_: Any,
) -> BackendRender:
    spec = job.spec
    sched = spec.scheduling
    name = job.metadata.name
    pg_spec: dict[str, Any] = {"minMember": spec.gang_size, "minResources": min_resources(spec, extra_requests)}
    if sched.queue:
        pg_spec["queue"] = sched.queue
    if sched.priority_class_name:
        pg_spec["priorityClassName"] = sched.priority_class_name
    errors: list[str] = []
    level, mode = (sched.topology.required, "hard") if sched.topology.required else (sched.topology.preferred, "soft")
    if level:
        tier = tier_of(level, levels or [])
        if tier is None:
            errors.append(f"scheduling.topology: level {level!r} is not a configured topology level")
        else:
            pg_spec["networkTopology"] = {"mode": mode, "highestTierAllowed": tier}
    pg = {"apiVersion": constants.VOLCANO_API_VERSION, "kind": "PodGroup", "metadata": object_meta(job), "spec": pg_spec}
    mutation = PodMutation(
        annotations={constants.ANNOTATION_VOLCANO_GROUP_NAME: name},
        scheduler_name=sched.scheduler_name or constants.VOLCANO_SCHEDULER_NAME,
        remove_gates=[constants.GANG_SCHEDULING_GATE],
    )
    return BackendRender(objects=[pg], pod=mutation, errors=errors)


class Volcano(Backend):
    name = GangBackend.VOLCANO

    def render(self, job: Any, **kwargs: Any) -> BackendRender:
        return render(job, **kwargs)


BACKEND = Volcano()
