"""Elastic gangs (spec.elastic): the sizes a job may run at, and the job at a given size (pure).

The operator resizes by replacing the whole gang (a new attempt): the runtime saves a checkpoint on
SIGTERM and the new gang resumes from it at the new world size (DCP resharding, data position
re-split), with the data-parallel degree recomputed for the new size.
"""

from __future__ import annotations

from phalanx.api.layout import check_layout
from phalanx.api.types import TrainingJob


def at_size(job: TrainingJob, nodes: int) -> TrainingJob:
    """The job as it runs with ``nodes`` nodes: data-parallel degree follows the world size."""
    if nodes == job.spec.nodes:
        return job
    parallelism = job.spec.parallelism.model_copy(update={"data": None})
    spec = job.spec.model_copy(update={"nodes": nodes, "parallelism": parallelism})
    return job.model_copy(update={"spec": spec})


def active_size(job: TrainingJob, recorded: int | None) -> int:
    """The current gang size: the recorded one while it is within the elastic bounds."""
    elastic = job.spec.elastic
    if elastic is None or recorded is None or not elastic.min_nodes <= recorded <= elastic.max_nodes:
        return job.spec.nodes
    return recorded


def runnable_sizes(job: TrainingJob, low: int, high: int) -> list[int]:
    """Sizes in [low, high], largest first, whose layout the runtime can hold (batch, mesh, model)."""
    return [n for n in range(high, low - 1, -1) if not check_layout(at_size(job, n).spec)]
