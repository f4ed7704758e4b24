"""What /healthz checks beyond "the event loop answers" (kopf serves the endpoint on the loop, so
a stuck loop already fails the probe by its timeout): the watches and the threads that feed the
job loops. A dead one leaves a process that answers but serves no one; failing the probe lets
the kubelet restart it. Pure: the probe handler (phalanx.handlers) passes in what it sees."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# kopf names each watch task "watcher for <resource>@<namespace>" (kopf/_core/reactor/orchestration.py).
WATCHER_PREFIX = "watcher for "
# A pod inventory that has failed to list or watch this long is stale for every job's plan.
REFLECTOR_STALE_SECONDS = 300.0
# One decide (validation, planning, rendering: bounded by the operator's limits) taking this long
# means the decide thread is stuck, and every job loop waits behind it.
DECIDE_STUCK_SECONDS = 300.0


@dataclass(frozen=True)
class TaskView:
    name: str
    done: bool


def watcher_problems(tasks: Iterable[TaskView], expected: frozenset[str]) -> list[str]:
    """The watches that ran once (``expected``) and are gone or finished now."""
    alive = {t.name for t in tasks if t.name.startswith(WATCHER_PREFIX) and not t.done}
    return [f"{name[len(WATCHER_PREFIX):]}: its watch has stopped" for name in sorted(expected - alive)]


def thread_problems(reflector_alive: bool | None, reflector_failing_for: float | None,
                    decide_running_for: float | None) -> list[str]:
    out = []
    if reflector_alive is False:
        out.append("the pod reflector's thread has died")
    if reflector_failing_for is not None and reflector_failing_for > REFLECTOR_STALE_SECONDS:
        out.append(f"the pod reflector has failed to list or watch pods for {reflector_failing_for:.0f}s")
    if decide_running_for is not None and decide_running_for > DECIDE_STUCK_SECONDS:
        out.append(f"one decide has run for {decide_running_for:.0f}s: the decide thread is stuck")
    return out
