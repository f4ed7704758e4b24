"""What every per-object control loop of the operator runs on — one TrainingJob's
(``phalanx.jobloop``), one TrainingSweep's (``phalanx.sweep.loop``): a wake-up per object, passes
only while this replica leads, one backoff after failures, the resync wait, and waiting until the
watch shows what a pass wrote. Its decisions (how long to wait, whether a write shows) are pure
functions; the waits around them are all that touches the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from phalanx.lifecycle.pacing import WAKE_COALESCE_MIN_SECONDS
from phalanx.lifecycle.refusals import retry_delay

RESYNC_SECONDS = 10.0  # every object is decided again at least this often: a missed event converges
EXPECTATION_TIMEOUT = 5.0  # the longest a pass waits for the watch to show what it wrote
POLL_SECONDS = 0.05  # how often such a wait looks again

StatusView = Callable[[dict[str, Any]], Any]  # the part of a status the next pass decides on


class Wakeups:
    """One wake-up per running loop, by object key: events set it, the loop waits on it."""

    def __init__(self) -> None:
        self.events: dict[Hashable, asyncio.Event] = {}

    def wakeup(self, key: Hashable) -> asyncio.Event:
        """The loop's wake-up (created by the loop itself: an entry exists while it runs)."""
        return self.events.setdefault(key, asyncio.Event())

    def wake(self, key: Hashable) -> None:
        """Wake a running loop; no entry is made for an object without one (children outlive it)."""
        event = self.events.get(key)
        if event is not None:
            event.set()

    def forget(self, key: Hashable) -> None:
        self.events.pop(key, None)


async def run_while_leading(reconcile: Callable[[], Awaitable[bool]], stopped: Any, leader: Any) -> None:
    """Passes until ``stopped`` or until a pass returns False (the object is done with). A standby
    (``leader`` not holding the lease) keeps its indexes warm and decides nothing until it leads."""
    while not stopped:
        if leader is not None and not await leader.wait_leading(stopped):
            break
        if not await reconcile():
            return


def backoff_seconds(consecutive: int) -> float:
    """The loops' one backoff after ``consecutive`` failures of one kind in a row (1-based):
    2, 4, 8, ... s, at most 5 minutes (lifecycle/refusals.py ``retry_delay``)."""
    return retry_delay(consecutive)


def resync_seconds(requeue_after: float | None) -> float:
    """How long a settled loop waits for a wake-up: the plan's requeue, at most RESYNC_SECONDS."""
    return min(requeue_after or RESYNC_SECONDS, RESYNC_SECONDS)


def status_shown(live: dict[str, Any] | None, written: dict[str, Any], view: StatusView) -> bool:
    """Does the live status show what was written, as far as the next pass decides on it?"""
    return view(live or {}) == view(written)


async def sleep_or_wake(wake: asyncio.Event, seconds: float, coalesce: float = 0.0) -> None:
    """Sleep ``seconds`` or until woken; ``coalesce``: after a wake, wait that long more so a
    burst of events makes one pass."""
    try:
        await asyncio.wait_for(wake.wait(), timeout=seconds)
        if coalesce:
            await asyncio.sleep(coalesce)
    except TimeoutError:
        pass


async def back_off(wake: asyncio.Event, consecutive: int, limit: float | None = None) -> None:
    """After the ``consecutive``-th failure in a row: wait ``backoff_seconds`` (at most ``limit``)
    or for a wake-up."""
    delay = backoff_seconds(consecutive)
    await sleep_or_wake(wake, delay if limit is None else min(delay, limit))


async def resync(wake: asyncio.Event, requeue_after: float | None = None,
                 coalesce: float = WAKE_COALESCE_MIN_SECONDS) -> None:
    """Nothing left to do now: wait for a reason (a wake-up, gathered for ``coalesce`` s so a
    burst of events makes one pass) or for the resync."""
    await sleep_or_wake(wake, resync_seconds(requeue_after), coalesce)


async def await_until(done: Callable[[], bool], timeout: float = EXPECTATION_TIMEOUT) -> bool:
    """Until ``done()`` (the watch shows what a pass did), at most ``timeout`` s: False then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        await asyncio.sleep(POLL_SECONDS)
    return False


async def await_status(body: Any, written: dict[str, Any], view: StatusView) -> bool:
    """Until the live body (kopf keeps it current) shows the status we wrote, so the next pass
    never decides on a stale one."""
    return await await_until(lambda: status_shown(body.get("status"), written, view))
