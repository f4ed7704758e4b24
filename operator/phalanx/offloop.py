"""Work off the event loop, and hops back onto it: the one decide thread (``memo.decider``) runs
each job's ``decide()``, with the cyclic GC paused for a big gang; what it reads or writes of
kopf's indexes and the loops' shared state it does on the event loop (``on_loop``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

from phalanx.decision import Plan
from phalanx.lifecycle.reconcile import decide
from phalanx.pending import compact_pods

GC_PAUSE_MIN_NODES = 1024  # decide() of a gang this big runs with the cyclic GC paused (decide_off_loop)
LOOP_HOP_TIMEOUT = 60.0  # the decide thread waiting for the event loop (only a stopped loop takes this long)
_T = TypeVar("_T")


class JobGone(Exception):
    """The job's loop stopped (the job was deleted) while its decide() ran: nothing is queued."""


def new_decider() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread every decide() runs on (``memo.decider``): plans never interleave."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="phalanx-decide")


def on_loop(loop: asyncio.AbstractEventLoop | None, fn: Callable[[], _T]) -> _T:
    """``fn()`` on the event loop, from the decide thread: kopf's indexes and ``Gangs`` are only
    read and written there. On the loop itself (or with no loop) it runs at once."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is None or running is loop:
        return fn()
    result: concurrent.futures.Future[_T] = concurrent.futures.Future()

    def run() -> None:
        try:
            result.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            result.set_exception(exc)

    loop.call_soon_threadsafe(run)
    return result.result(timeout=LOOP_HOP_TIMEOUT)


def _gang_pods(spec: dict[str, Any]) -> int:
    """Pods of the gang as the raw spec says (workers and spec.roles), 0 where it is malformed."""
    counts = [spec.get("nodes")] + [r.get("replicas", 1) for r in spec.get("roles") or [] if isinstance(r, dict)]
    return sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool))


# monotonic start of the decide running now (None: idle): /healthz fails on one that never ends
decide_started: list[float | None] = [None]


def decide_off_loop(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Plan:
    """decide() on the decide thread; for a big gang with the cyclic GC paused: a 16k-pod render
    allocates millions of containers, and every full collection meanwhile (one per 25 % of heap
    growth, 9 in that render) holds the GIL for as long as it walks the heap — the event loop
    stalls for a second or more each on a 2-core machine. Only big gangs: decides run back to back, and
    a collector paused for all of them would let cyclic garbage pile up. Reference counting frees
    what the render drops; the collector runs on its thresholds again as soon as it returns."""
    paused = _gang_pods(obj.get("spec") or {}) >= GC_PAUSE_MIN_NODES and gc.isenabled()
    if paused:
        gc.disable()
    decide_started[0] = time.monotonic()
    try:
        plan = decide(obj, *args, **kwargs)
        plan.create = compact_pods(plan.create)  # kept as JSON until sent (phalanx.pending)
        return plan
    finally:
        decide_started[0] = None
        if paused:
            gc.enable()
