"""The operator's one gang scheduler: the queue of waiting gangs, the placements booked but not yet
visible in the pod index, and each waiting gang's published row (its Placement or the reason it
waits).

A scheduling cycle plans the whole queue once (``gang.admission.admit``) against the node index and
the pod reflector's usage, and publishes a row per waiting gang; a job loop reads its row instead
of planning, and only the loops whose row changed are woken. Cycles run for a batch of changes:
anything that may change a plan (a node event, a pod that stops holding capacity, a gang joining or
leaving the queue, a booking dropped or expired) marks the scheduler due, and one cycle follows a
short window (``BATCH_SECONDS``), so a burst of changes costs one plan of the queue. While gangs
wait, a cycle also runs every RESYNC_SECONDS (a job loop's resync period), for a change no event
reports: a pod bound elsewhere takes capacity a published row counted on. A gang with no row for
its current request (its first plan: a new gang is created pinned only if it is placed before its
pods exist, so that pass cannot wait) is planned at once by a cycle run from its own pass, which
publishes every row too.

Threads: the queue, the bookings and the rows are read and written on the event loop only (the
decide thread hops there with ``on_loop``); the planning itself runs on the one decide thread
(``memo.decider``), so two cycles never interleave and never run on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api.config import OperatorConfig
from phalanx.constants import LABEL_JOB_NAME
from phalanx.gang.admission import admit
from phalanx.gang.inventory import Reservation
from phalanx.gang.nodehealth import mark_quarantined
from phalanx.gang.planner import GangRequest, Placement, Unschedulable
from phalanx.offloop import decide_started, on_loop

log = logging.getLogger("phalanx.scheduler")

BATCH_SECONDS = 0.1  # changes within this window after the first make one cycle
RESYNC_SECONDS = 10.0  # with gangs waiting, a cycle at least this often
PIN_TTL_SECONDS = 30.0  # after this the index shows the pins (node affinity) itself
Result = Placement | Unschedulable


@dataclass(frozen=True)
class Row:
    """What the last cycle decided for one waiting gang, and for which request of it."""

    request: GangRequest
    result: Result

    @property
    def placed(self) -> bool:
        return isinstance(self.result, Placement)


# --------------------------------------------------------------------------------------------
# Pure


def plan_rows(queue: list[GangRequest], nodes: list[Any], usage: list[Any], config: OperatorConfig,
              pins: Iterable[Reservation]) -> dict[str, Row]:
    """One cycle's rows: the whole queue planned together, in priority order."""
    results = admit(queue, nodes, usage, config, pins).results
    return {request.key: Row(request, results[request.key]) for request in queue}


def rows_to_publish(current: Mapping[str, Row], planned: Mapping[str, Row],
                    waiting: Mapping[str, GangRequest]) -> dict[str, Row]:
    """The planned rows that differ from the published ones, for gangs still waiting with the
    request they were planned for (a gang that left or changed its request meanwhile gets none)."""
    return {key: row for key, row in planned.items()
            if waiting.get(key) == row.request and current.get(key) != row}


def expired_bookings(pending: Mapping[str, tuple[list[Reservation], float]], now: float) -> list[str]:
    """Bookings whose pins were written PIN_TTL_SECONDS ago or more (the index shows them)."""
    return [key for key, (_, written) in pending.items() if now - written >= PIN_TTL_SECONDS]


def next_expiry(pending: Mapping[str, tuple[list[Reservation], float]], now: float) -> float | None:
    """Seconds until the first written booking expires; None while none is written."""
    written = [t for _, t in pending.values() if t != math.inf]
    return max(0.0, min(written) + PIN_TTL_SECONDS - now) if written else None


# --------------------------------------------------------------------------------------------
# The scheduler


@dataclass
class _Inputs:
    queue: list[GangRequest]
    nodes: list[Any]
    usage: list[Any]
    pins: list[Reservation]


class Scheduler:
    """The queue, the bookings and the published rows of one operator process (``memo.scheduler``).

    ``wake(namespace, name)`` wakes a job loop whose row changed. ``nodes`` and ``usage`` are the
    indexes a cycle plans against (kopf's ``cluster_nodes``, the PodReflector), attached by the
    first job loop or node event that has them."""

    def __init__(self, wake: Callable[[str, str], None] = lambda namespace, name: None,
                 window: float = BATCH_SECONDS) -> None:
        self.wake, self.window = wake, window
        self.waiting: dict[str, GangRequest] = {}  # gangs whose plan is wanted, by "ns/name" (a queue, no capacity)
        # Pins not yet seen in the index. No reservation lives only here: a pin is written into the
        # pods (release patch: node affinity) before it is recorded, and the planner reads pins back
        # from the pod index (reservations_from_pods); this only bridges the watch's lag. A new
        # leader starts with it empty, safely: the old leader stopped writing renew_deadline after
        # its last renew, lease_duration - renew_deadline (5 s by default) before the lease could be
        # taken over, while the standby's warm pod index was already receiving those pins.
        self.pending: dict[str, tuple[list[Reservation], float]] = {}
        self.rows: dict[str, Row] = {}
        self.nodes: Any = None  # kopf.Index of NodeInfo by node name
        self.usage: Any = None  # every pod: ``usage.get(None, [])``
        self.cycles = 0  # plans of the queue so far (each one admit())
        # Nodes no new gang is placed on (their NodeQuarantines, phalanx.nodehealth); read each cycle.
        self.quarantined: Callable[[], Iterable[str]] = lambda: ()
        self._due: asyncio.Event | None = None

    # --- on the event loop

    def attach(self, nodes: Any, usage: Any) -> None:
        self.nodes, self.usage = nodes, usage

    def changed(self) -> None:
        """Something a plan depends on changed: a cycle follows within the batch window."""
        if self._due is None:
            self._due = asyncio.Event()
        self._due.set()

    def submit(self, key: str, request: GangRequest) -> Row | None:
        """The gang wants a plan for ``request``: its published row for it, or None (none yet:
        it joins the queue, and an earlier booking of it is void — it is planned again)."""
        if self.waiting.get(key) == request:
            return self.rows.get(key)
        self.waiting[key] = request
        self.rows.pop(key, None)
        self.pending.pop(key, None)
        self.changed()
        return None

    def row(self, key: str, request: GangRequest) -> Row | None:
        row = self.rows.get(key)
        return row if row is not None and row.request == request else None

    def book(self, key: str, row: Row) -> None:
        """The gang is placed by ``row`` and its pins are being written: it leaves the queue and
        its nodes stay booked until pins_written + PIN_TTL_SECONDS. Every other row already
        counts this placement, unless a newer cycle replaced the row meanwhile: then plan again."""
        if self.rows.get(key) is not row:
            self.changed()
        self.waiting.pop(key, None)
        self.rows.pop(key, None)
        assert isinstance(row.result, Placement)
        self.pending[key] = (row.result.reservations(), math.inf)  # until pins_written

    def pins_written(self, key: str) -> None:
        """The gang's release patches (its pins) are written: the index shows them within
        PIN_TTL_SECONDS from now. Until then a booked pin never expires — at scale the patches
        of many gangs queue for minutes, and a pin expired before its patch lands lets another
        gang book the same node."""
        entry = self.pending.get(key)
        if entry is not None:
            self.pending[key] = (entry[0], time.monotonic())

    def released(self, key: str, all_new: bool) -> None:
        """The gang's release patches are done. If a pod had been released already (the pass
        planned from a view the watch had not caught up with), the booking pins nothing: it goes
        at once instead of holding other nodes for PIN_TTL_SECONDS."""
        if all_new:
            self.pins_written(key)
        elif self.pending.pop(key, None) is not None:
            self.changed()

    def pending_pins(self, except_key: str | None = None) -> list[Reservation]:
        """Bookings the pod index may not show yet (booked and not yet written, or written less
        than PIN_TTL_SECONDS ago); older ones are dropped."""
        self.expire()
        return [r for k, (rs, _) in self.pending.items() if k != except_key for r in rs]

    def expire(self) -> None:
        expired = expired_bookings(self.pending, time.monotonic())
        for key in expired:
            del self.pending[key]
        if expired:
            self.changed()

    def spare_inputs(self) -> tuple[list[Any], list[Any], list[Reservation]]:
        """What a spare node is chosen from (gang.spare.spare_for): the nodes (quarantined ones
        marked), every pod, and the capacity held beyond the pods: bookings, and the placed rows
        of waiting gangs (promised to them: a spare taken from a row would be booked twice)."""
        promised = [r for row in self.rows.values() if row.placed for r in row.result.reservations()]
        return self._nodes(), self._usage(), self.pending_pins() + promised

    def hold(self, key: str, reservations: list[Reservation]) -> None:
        """Book a spare node for a replacement pod about to be created pinned to it (``key``: the
        job's and the node-rank's); the next cycle plans around it, and the booking lapses
        PIN_TTL_SECONDS from now, by when the pod index shows the pin."""
        self.pending[key] = (reservations, time.monotonic())
        self.changed()

    def leave(self, key: str) -> None:
        """The gang no longer waits for placement (finished, suspended, or deleted)."""
        self.rows.pop(key, None)
        queued, booked = self.waiting.pop(key, None), self.pending.pop(key, None)
        if queued is not None or booked is not None:
            self.changed()

    def _inputs(self, only_if_due: bool) -> _Inputs | None:
        """What a cycle plans: the queue and the capacity, as of now. Clears the due mark: every
        change so far is in this plan."""
        self.expire()
        if only_if_due and not (self._due is not None and self._due.is_set()):
            return None
        if self._due is not None:
            self._due.clear()
        if not self.waiting or self.nodes is None:
            return None
        return _Inputs(list(self.waiting.values()), self._nodes(), self._usage(),
                       [r for rs, _ in self.pending.values() for r in rs])

    def current_nodes(self) -> list[Any]:
        """The nodes a cycle plans against now (quarantined ones marked)."""
        return self._nodes()

    def _nodes(self) -> list[Any]:
        if self.nodes is None:
            return []
        return mark_quarantined([v for store in self.nodes.values() for v in store], self.quarantined())

    def _usage(self) -> list[Any]:
        return list(self.usage.get(None, [])) if self.usage is not None else []

    def _publish(self, planned: dict[str, Row], quiet: str | None) -> None:
        for key, row in rows_to_publish(self.rows, planned, self.waiting).items():
            self.rows[key] = row
            if key != quiet:
                namespace, name = key.split("/", 1)
                self.wake(namespace, name)

    # --- on the decide thread

    def cycle(self, loop: asyncio.AbstractEventLoop | None, config: OperatorConfig, *,
              only_if_due: bool = False, quiet: str | None = None) -> bool:
        """Plan the queue once and publish the rows that changed (waking their loops, except
        ``quiet``'s: the pass that asked is reading its row now). False when there was nothing
        to plan."""
        inputs = on_loop(loop, lambda: self._inputs(only_if_due))
        if inputs is None:
            return False
        self.cycles += 1
        planned = plan_rows(inputs.queue, inputs.nodes, inputs.usage, config, inputs.pins)
        on_loop(loop, lambda: self._publish(planned, quiet))
        return True

    def probe(self, loop: asyncio.AbstractEventLoop | None, request: GangRequest, config: OperatorConfig) -> bool:
        """Could ``request`` be placed now, behind the waiting gangs ahead of it? The job's own
        pods count as free (they would be replaced); nothing is queued, booked or published."""
        key = request.key
        namespace, job = key.split("/", 1)

        def inputs() -> _Inputs:
            return _Inputs([g for k, g in self.waiting.items() if k != key] + [request], self._nodes(), self._usage(),
                           self.pending_pins(except_key=key))

        inputs = on_loop(loop, inputs)
        pods = [p for p in inputs.usage
                if not (p["metadata"]["namespace"] == namespace and p["metadata"]["labels"].get(LABEL_JOB_NAME) == job)]
        return isinstance(admit(inputs.queue, inputs.nodes, pods, config, inputs.pins).results[key], Placement)

    # --- the batching task

    async def run(self, executor: concurrent.futures.Executor, config: OperatorConfig) -> None:
        """Forever: wait for a change, let the batch window pass, plan on the decide thread. With
        gangs waiting, a cycle runs at least every RESYNC_SECONDS (a change no event reported, as
        a job loop's resync would catch it), and after the earliest booking expiry known when it
        started waiting (a booking given its expiry meanwhile is dropped by the next cycle)."""
        loop = asyncio.get_running_loop()
        if self._due is None:
            self._due = asyncio.Event()
        while True:
            try:
                await asyncio.wait_for(self._due.wait(), timeout=self._quiet_for(time.monotonic()))
            except TimeoutError:
                self.changed()
            await asyncio.sleep(self.window)
            try:
                await loop.run_in_executor(executor, lambda: self._timed_cycle(loop, config))
            except Exception:  # noqa: BLE001 - a failed plan must not stop scheduling; rows stay as they were
                log.exception("scheduling cycle failed")
                await asyncio.sleep(1.0)

    def _timed_cycle(self, loop: asyncio.AbstractEventLoop, config: OperatorConfig) -> None:
        """A cycle on the decide thread, seen by /healthz as a decide is (one that never ends
        blocks every job's decide)."""
        decide_started[0] = time.monotonic()
        try:
            self.cycle(loop, config, only_if_due=True)
        finally:
            decide_started[0] = None

    def _quiet_for(self, now: float) -> float | None:
        """How long the scheduler may wait for a change: None (for ever) with nothing queued or booked."""
        expiry = next_expiry(self.pending, now)
        waits = [t for t in (expiry, RESYNC_SECONDS if self.waiting else None) if t is not None]
        return min(waits) if waits else None
