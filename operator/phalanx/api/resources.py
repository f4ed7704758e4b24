"""Per-pod resources of a job's workers and of each of its roles."""

from __future__ import annotations

from pydantic import Field

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.base import Model, Quantity, keys_match
from phalanx.api.rules import Rule


class Resources(Model):
    """Per-node (per-pod) resources. GPUs become ``nvidia.com/gpu`` requests and limits."""

    gpus: int = Field(0, ge=0, le=64, description="GPUs per node (nvidia.com/gpu).")
    cpu: Quantity | None = Field(None, description="CPU request and limit per node, e.g. '8'.")
    memory: Quantity | None = Field(None, description="Memory request and limit per node, e.g. '64Gi'.")
    extra: dict[str, Quantity] = Field(
        default_factory=dict, max_length=32,
        description="Extra extended resources per node, e.g. rdma/rdma_shared_device_a: 1.",
    )

    checks = (
        Rule(None,
             "extra resource names are extended resources (domain/name), hugepages-<size> or ephemeral-storage",
             lambda r: keys_match(r.extra, patterns.RESOURCE_NAME, patterns.MAX_QUALIFIED_NAME), ".extra"),
        Rule(f"!has(self.extra) || !('{constants.RESOURCE_GPU}' in self.extra)", f"set GPUs with resources.gpus, not extra['{constants.RESOURCE_GPU}']",
             lambda r: constants.RESOURCE_GPU not in r.extra, ".extra"),
    )
