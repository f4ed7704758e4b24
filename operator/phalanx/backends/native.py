"""Native backend: Phalanx plans the gang itself (gang.planner) and holds pods behind its own
scheduling gate until the whole gang is pinned; no extra objects."""

from __future__ import annotations

from typing import Any

from phalanx import constants
from phalanx.api.types import GangBackend
from phalanx.backends.base import Backend, BackendRender, PodMutation


def render(job: Any, **_: Any) -> BackendRender:
    return BackendRender(objects=[], pod=PodMutation(add_gates=[constants.GANG_SCHEDULING_GATE]))


class Native(Backend):
    name = GangBackend.NATIVE
    admits_itself = True

    def render(self, job: Any, **kwargs: Any) -> BackendRender:
        return render(job, **kwargs)


BACKEND = Native()
