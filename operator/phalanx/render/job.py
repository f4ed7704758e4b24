"""Everything the operator creates for one attempt of a job, before placement."""

from __future__ import annotations

from typing import Any

from phalanx import constants as C
from phalanx.api.config import OperatorConfig
from phalanx.api.types import TrainingJob
from phalanx.render.configmap import build_config_map
from phalanx.render.names import spec_hash
from phalanx.render.network import render_network
from phalanx.render.pod import build_pod
from phalanx.render.service import build_service


def render_pods(job: TrainingJob, config: OperatorConfig, attempt: int = 0) -> list[dict[str, Any]]:
    profile = config.network_profiles[job.spec.network.profile]
    return [
        build_pod(job, rank, attempt, profile, default_shm_size=str(config.default_shm_size))
        for rank in range(job.spec.nodes)
    ]


def render_children(job: TrainingJob, config: OperatorConfig | None = None, attempt: int = 0) -> list[dict[str, Any]]:
    """Service, ConfigMap, then one Pod per node-rank; every child carries the spec hash."""
    config = config or OperatorConfig()
    profile = config.network_profiles[job.spec.network.profile]
    key = f"{job.metadata.namespace}/{job.metadata.name}"
    service = build_service(job, render_network(job.spec, profile, job_key=key).master_port)
    children = [service, build_config_map(job), *render_pods(job, config, attempt)]
    digest = spec_hash(job.spec.model_dump(by_alias=True, mode="json"))
    for child in children:
        child["metadata"].setdefault("annotations", {})[C.ANNOTATION_SPEC_HASH] = digest
    return children
