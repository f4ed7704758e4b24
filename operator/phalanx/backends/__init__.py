"""Gang backends: pure renderers of the extra objects a scheduler needs and of the pod mutation.

Each backend module exposes ``render(job, *, ...) -> BackendRender``; ``render_backend`` picks
the module from ``spec.scheduling.backend``. ``apply_mutation(pod, mutation)`` merges a
mutation into a rendered Pod dict.
"""

from __future__ import annotations

from typing import Any

from phalanx.backends.base import (
    BackendRender,
    PodMutation,
    apply_mutation,
    merge_mutation,
    min_resources,
)

__all__ = ["BackendRender", "PodMutation", "apply_mutation", "merge_mutation", "min_resources", "render_backend"]


def render_backend(job: Any, **kwargs: Any) -> BackendRender:
    """Dispatch on ``job.spec.scheduling.backend`` (native | volcano | coscheduling | kueue | workload)."""
    from phalanx.backends import coscheduling, kueue, native, volcano, workload

    modules = {"native": native, "volcano": volcano, "coscheduling": coscheduling,
               "kueue": kueue, "workload": workload}
    backend = str(job.spec.scheduling.backend)
    return modules[backend].render(job, **kwargs)
