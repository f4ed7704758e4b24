"""scheduler-plugins coscheduling: a scheduling.x-k8s.io/v1alpha1 PodGroup {minMember,
minResources, scheduleTimeoutSeconds}; pods carry the label scheduling.x-k8s.io/pod-group and run
under the scheduler that has the Coscheduling plugin (default: scheduler-plugins-scheduler)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx import constants
from phalanx.api.types import GangBackend
from phalanx.backends.base import Backend, BackendRender, PodMutation, min_resources, object_meta


def render(
    job: Any,
    *,
    extra_requests: Mapping[str, Any] | None = None,
    scheduler_name: str = constants.COSCHEDULING_SCHEDULER_NAME,
    **_: Any,
) -> BackendRender:
    spec = job.spec
    sched = spec.scheduling
    pg_spec: dict[str, Any] = {"minMember": spec.gang_size, "minResources": min_resources(spec, extra_requests)}
    if sched.gang_timeout_seconds > 0:
        pg_spec["scheduleTimeoutSeconds"] = sched.gang_timeout_seconds
    pg = {"apiVersion": constants.COSCHEDULING_API_VERSION, "kind": "PodGroup", "metadata": object_meta(job),
          "spec": pg_spec}
    mutation = PodMutation(
        labels={constants.LABEL_COSCHEDULING_POD_GROUP: job.metadata.name},
        scheduler_name=sched.scheduler_name or scheduler_name,
        remove_gates=[constants.GANG_SCHEDULING_GATE],
    )
    return BackendRender(objects=[pg], pod=mutation)


class Coscheduling(Backend):
    name = GangBackend.COSCHEDULING

    def render(self, job: Any, **kwargs: Any) -> BackendRender:
        return render(job, **kwargs)


BACKEND = Coscheduling()
