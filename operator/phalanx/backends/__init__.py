"""Gang backends: pure renderers of the extra objects a scheduler needs and of the pod mutation.

Each backend module holds one ``Backend`` (backends/base.py: render, validate, where its verdict
on the gang is read); callers ask :func:`backend_for` (or :func:`backend_named` for a raw spec)
instead of comparing names. ``render_backend`` renders a job's backend; ``apply_mutation(pod,
mutation)`` merges a mutation into a rendered Pod dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from phalanx.api.types import GangBackend
from phalanx.backends import coscheduling, kueue, native, volcano, workload
from phalanx.backends.base import (
    Backend,
    BackendRender,
    PodMutation,
    apply_mutation,
    merge_mutation,
    min_resources,
)

__all__ = ["BACKENDS", "Backend", "BackendRender", "PodMutation", "apply_mutation", "backend_for", "backend_named",
           "merge_mutation", "min_resources", "render_backend"]

BACKENDS: Mapping[GangBackend, Backend] = MappingProxyType(
    {module.BACKEND.name: module.BACKEND for module in (native, volcano, coscheduling, kueue, workload)})


def backend_for(spec: Any) -> Backend:
    """The backend of a parsed spec (``spec.scheduling.backend``)."""
    return BACKENDS[GangBackend(spec.scheduling.backend)]


def backend_named(name: str | None) -> Backend:
    """The backend of a raw spec's ``scheduling.backend`` (absent: the default, native)."""
    return BACKENDS[GangBackend(name or GangBackend.NATIVE)]


def render_backend(job: Any, **kwargs: Any) -> BackendRender:
    """The objects and pod mutation of ``job``'s backend."""
    return backend_for(job.spec).render(job, **kwargs)
