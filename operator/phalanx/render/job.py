"""Everything the operator creates for one attempt of a job, before placement."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.api.slots import Slot, slots
from phalanx.api.types import TrainingJob
from phalanx.backends import merge_mutation, render_backend
from phalanx.gang.tolerations import with_cluster_tolerations
from phalanx.gang.topology import current_levels
from phalanx.render.configmap import build_config_map
from phalanx.render.names import spec_hash
from phalanx.render.network import NetworkWiring, render_network
from phalanx.render.networkpolicy import build_network_policy
from phalanx.render.pod import build_pod
from phalanx.render.service import build_service


def job_wiring(job: TrainingJob, config: OperatorConfig) -> NetworkWiring:
    profile = config.network_profiles[job.spec.network.profile]
    return render_network(job.spec, profile, job_key=f"{job.metadata.namespace}/{job.metadata.name}")


def render_children(
    job: TrainingJob, config: OperatorConfig | None = None, attempt: int = 0,
    only: Iterable[Slot] | None = None,
) -> list[dict[str, Any]]:
    """Gang-backend objects (PodGroup, Workload), Service, ConfigMap, one Pod per slot of the gang
    (workers' node-ranks, then roles' pods; ``only`` those when given: the reconcile renders just what
    is missing), the NetworkPolicy. Every
    child carries the spec hash. (The executor creates every other kind before the pods.)"""
    config = config or OperatorConfig()
    wiring = job_wiring(job, config)
    backend = render_backend(job, levels=current_levels(config.topology), extra_requests=wiring.resources,
                             workload_api_versions=config.workload_api_versions)
    pods = [
        with_cluster_tolerations(merge_mutation(build_pod(job, slot, attempt, wiring, default_shm_size=str(config.default_shm_size),
                                                          in_place=config.in_place_restarts,
                                                          default_image=config.runtime_image), backend.pod),
                                 config.job_tolerations)
        for slot in (slots(job.spec) if only is None else only)
    ]
    policy = [build_network_policy(job, config.network_policy)] if config.network_policy.enabled else []
    children = [*backend.objects, build_service(job, wiring.master_port), build_config_map(job), *pods, *policy]
    digest = spec_hash(job.spec.model_dump(by_alias=True, mode="json"))
    for child in children:
        child["metadata"].setdefault("annotations", {})[constants.ANNOTATION_SPEC_HASH] = digest
    return children
