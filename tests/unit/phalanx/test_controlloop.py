"""The loop machinery the job and sweep loops share (phalanx.controlloop): its decisions as pure
functions, and the waits around them."""

from __future__ import annotations

import asyncio
import time

import pytest

from phalanx import controlloop
from phalanx.controlloop import (
    RESYNC_SECONDS,
    Wakeups,
    await_status,
    await_until,
    backoff_seconds,
    resync_seconds,
    run_while_leading,
    sleep_or_wake,
    status_shown,
)
from phalanx.jobloop import job_status_view
from phalanx.sweep.loop import sweep_status_view


@pytest.mark.parametrize("consecutive, seconds", [
    (0, 2.0), (1, 2.0), (2, 4.0), (3, 8.0), (8, 256.0), (9, 300.0), (50, 300.0),
])
def test_one_backoff_doubles_from_two_seconds_up_to_five_minutes(consecutive, seconds):
    assert backoff_seconds(consecutive) == seconds


@pytest.mark.parametrize("requeue_after, seconds", [
    (None, RESYNC_SECONDS),  # nothing asked: the resync
    (0.0, RESYNC_SECONDS),  # 0 asks for nothing either
    (3.0, 3.0),  # sooner when the plan asks (a deadline, a held status write)
    (RESYNC_SECONDS, RESYNC_SECONDS),
    (600.0, RESYNC_SECONDS),  # never later than the resync: a missed event converges
])
def test_the_resync_wait_is_the_plans_requeue_at_most_the_resync(requeue_after, seconds):
    assert resync_seconds(requeue_after) == seconds


JOB = {"phase": "Running", "restartAttempt": 1, "restarts": 1, "attemptCreated": True, "placement": {"n0": 1}}
SWEEP = {"phase": "Running", "trials": [{"name": "s-0", "phase": "Running", "step": 5}, {"name": "s-1", "phase": "Pending"}]}


@pytest.mark.parametrize("view, live, written, shown", [
    (job_status_view, JOB, JOB, True),
    (job_status_view, {**JOB, "message": "older", "readyNodes": 3}, JOB, True),  # only what the next pass decides on
    (job_status_view, {**JOB, "phase": "Scheduling"}, JOB, False),
    (job_status_view, {**JOB, "restartAttempt": 0}, JOB, False),
    (job_status_view, {**JOB, "placement": None}, JOB, False),  # a stale placement would be written back
    (job_status_view, None, {}, True),  # nothing written, nothing there
    (job_status_view, None, JOB, False),
    (sweep_status_view, SWEEP, SWEEP, True),
    (sweep_status_view, {**SWEEP, "trials": [{**SWEEP["trials"][0], "step": 9}, SWEEP["trials"][1]]}, SWEEP, True),
    (sweep_status_view, {**SWEEP, "trials": SWEEP["trials"][:1]}, SWEEP, False),  # a trial's record missing
    (sweep_status_view, {**SWEEP, "trials": [SWEEP["trials"][0], {"name": "s-1", "phase": "Running"}]}, SWEEP, False),
    (sweep_status_view, {**SWEEP, "phase": "Pending"}, SWEEP, False),
])
def test_a_status_write_shows_once_what_the_next_pass_decides_on_is_live(view, live, written, shown):
    assert status_shown(live, written, view) is shown


def test_a_wake_up_is_made_by_its_loop_only_and_forgotten_with_it():
    wakeups = Wakeups()
    wakeups.wake(("ns", "no-loop"))  # children outlive their object: no entry for it
    assert not wakeups.events
    event = wakeups.wakeup(("ns", "a"))
    assert wakeups.wakeup(("ns", "a")) is event and not event.is_set()
    wakeups.wake(("ns", "a"))
    assert event.is_set()
    wakeups.forget(("ns", "a"))
    assert not wakeups.events


def test_await_until_returns_once_done_and_gives_up_at_its_timeout():
    async def main():
        flag = []
        asyncio.get_running_loop().call_later(0.1, flag.append, 1)
        t0 = time.monotonic()
        seen = await await_until(lambda: bool(flag), timeout=2.0)
        took = time.monotonic() - t0
        t1 = time.monotonic()
        never = await await_until(lambda: False, timeout=0.2)
        return seen, took, never, time.monotonic() - t1

    seen, took, never, gave_up_after = asyncio.run(main())
    assert seen and took < 1.0
    assert not never and 0.2 <= gave_up_after < 1.0


def test_await_status_follows_the_live_body():
    async def main():
        body = {"status": {"phase": "Pending"}}
        asyncio.get_running_loop().call_later(0.1, body.update, {"status": dict(JOB)})
        return await await_status(body, JOB, job_status_view)

    assert asyncio.run(main())


def test_sleep_or_wake_ends_early_on_a_wake_up_and_gathers_the_burst():
    async def main():
        wake = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, wake.set)
        t0 = time.monotonic()
        await sleep_or_wake(wake, 5.0, coalesce=0.2)
        woken = time.monotonic() - t0
        wake.clear()
        t1 = time.monotonic()
        await sleep_or_wake(wake, 0.1)
        return woken, time.monotonic() - t1

    woken, slept = asyncio.run(main())
    assert 0.25 <= woken < 2.0  # woken at 0.05 s, then 0.2 s more for the burst
    assert 0.1 <= slept < 1.0


class _Leader:
    def __init__(self, leading):
        self.leading = list(leading)

    async def wait_leading(self, stopped):
        return self.leading.pop(0)


@pytest.mark.parametrize("leader, passes, ran", [
    (None, [True, True, False], 3),  # no election: passes until one says the object is done with
    (_Leader([True, True]), [True, False], 2),
    (_Leader([True, False]), [True, True, True], 1),  # the lease lost: no further pass
])
def test_passes_run_only_while_leading_and_until_the_object_is_done_with(leader, passes, ran):
    calls = []

    async def reconcile():
        calls.append(1)
        return passes[len(calls) - 1]

    asyncio.run(run_while_leading(reconcile, False, leader))
    assert len(calls) == ran


def test_a_stopped_daemon_runs_no_pass():
    async def reconcile():
        raise AssertionError("no pass once stopped")

    asyncio.run(run_while_leading(reconcile, True, None))


@pytest.mark.parametrize("consecutive, limit, slept", [(1, None, 2.0), (9, None, 300.0), (9, 30.0, 30.0), (1, 30.0, 2.0)])
def test_back_off_waits_the_shared_backoff_at_most_its_limit(monkeypatch, consecutive, limit, slept):
    waits = []

    async def sleep_or_wake(wake, seconds, coalesce=0.0):
        waits.append(seconds)

    monkeypatch.setattr(controlloop, "sleep_or_wake", sleep_or_wake)
    asyncio.run(controlloop.back_off(asyncio.Event(), consecutive, limit))
    assert waits == [slept]
