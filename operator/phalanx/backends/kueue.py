"""Kueue (plain-pod groups): pods carry kueue.x-k8s.io/queue-name and form one pod group
(kueue.x-k8s.io/pod-group-name + pod-group-total-count). Kueue's webhook holds every pod behind
the kueue.x-k8s.io/admission scheduling gate until the whole group is admitted (the job starts
"suspended"); Phalanx's own gate is dropped. Topology goes to the TAS annotations
podset-required-topology / podset-preferred-topology as node-label keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from phalanx import constants as C
from phalanx.api.config import TopologyLevel
from phalanx.backends.base import BackendRender, PodMutation, level_label


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
    labels = {C.LABEL_KUEUE_POD_GROUP_NAME: group_name or job.metadata.name}
    if sched.queue:
        labels[C.LABEL_KUEUE_QUEUE_NAME] = sched.queue
    annotations = {C.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT: str(spec.nodes)}
    if sched.topology.required:
        annotations[C.ANNOTATION_KUEUE_REQUIRED_TOPOLOGY] = level_label(sched.topology.required, levels)
    elif sched.topology.preferred:
        annotations[C.ANNOTATION_KUEUE_PREFERRED_TOPOLOGY] = level_label(sched.topology.preferred, levels)
    mutation = PodMutation(labels=labels, annotations=annotations,
                           scheduler_name=sched.scheduler_name, remove_gates=[C.GANG_SCHEDULING_GATE])
    return BackendRender(objects=[], pod=mutation, errors=errors)
