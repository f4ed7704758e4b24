"""Leader election: the pure timing decisions, and the Elector loop against an in-memory Lease."""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime

import pytest

from phalanx.leader import (
    Action,
    Conflict,
    Elector,
    Record,
    Seen,
    Timings,
    claim,
    holds,
    identity,
    lease_namespace,
    next_action,
    observe,
    released,
)

T = Timings(lease_duration=15, renew_deadline=10, retry_period=2)
WALL = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)


def rec(holder="other", duration=15.0, transitions=3):
    return Record(holder, duration, "2026-12-01T11:00:00.000000Z", "2026-12-01T11:59:58.000000Z", transitions)


# --- timings -------------------------------------------------------------------------------

def test_default_timings_are_client_gos_and_valid():
    assert Timings().check() == Timings(15, 10, 2)


@pytest.mark.parametrize("bad", [Timings(10, 10, 2), Timings(15, 2, 2), Timings(15, 10, 0), Timings(5, 10, 2)])
def test_timings_must_leave_a_margin(bad):
    with pytest.raises(ValueError, match="lease duration"):
        bad.check()


# --- what a candidate does --------------------------------------------------------------------

def test_no_lease_creates_it():
    assert next_action(Seen(None, 0), "me", 100, T) is Action.CREATE


def test_own_lease_is_renewed():
    assert next_action(Seen(rec("me"), 0), "me", 1000, T) is Action.RENEW


def test_released_lease_is_taken_at_once():
    assert next_action(Seen(rec(""), 99.9), "me", 100, T) is Action.ACQUIRE


def test_someone_elses_lease_is_respected_until_it_expires_by_our_clock():
    seen = Seen(rec("other", duration=15), at=100)
    assert next_action(seen, "me", 114.9, T) is Action.STANDBY
    assert next_action(seen, "me", 115.0, T) is Action.ACQUIRE


def test_expiry_uses_the_holders_duration_not_ours():
    seen = Seen(rec("other", duration=40), at=100)
    assert next_action(seen, "me", 130, T) is Action.STANDBY
    assert next_action(seen, "me", 140, T) is Action.ACQUIRE


def test_a_renewal_restarts_the_expiry_clock_an_unchanged_record_does_not():
    first = observe(None, rec(), 100)
    again = observe(first, rec(), 110)  # same record re-read: the holder has not renewed
    assert again.at == 100
    renewed = observe(again, Record("other", 15, "2026-12-01T11:00:00.000000Z", "2026-12-01T12:00:10.000000Z", 3), 111)
    assert renewed.at == 111
    assert next_action(renewed, "me", 125, T) is Action.STANDBY


def test_wall_clock_skew_does_not_matter():
    """A renewTime far in the past (skewed clock) still counts from when we saw it change."""
    seen = observe(None, Record("other", 15, "1999-01-01T00:00:00.000000Z", "1999-01-01T00:00:00.000000Z", 1), 500)
    assert next_action(seen, "me", 501, T) is Action.STANDBY


# --- what is written --------------------------------------------------------------------------

def test_takeover_bumps_transitions_and_stamps_microtime():
    new = claim(rec("other", transitions=3), "me", Action.ACQUIRE, WALL, T)
    assert (new.holder, new.transitions, new.duration) == ("me", 4, 15)
    assert new.acquire_time == new.renew_time == "2026-12-01T12:00:00.123456Z"
    assert new.spec()["leaseDurationSeconds"] == 15


def test_renew_keeps_acquire_time_and_transitions():
    old = rec("me", transitions=7)
    new = claim(old, "me", Action.RENEW, WALL, T)
    assert (new.acquire_time, new.transitions) == (old.acquire_time, 7)
    assert new.renew_time == "2026-12-01T12:00:00.123456Z"


def test_create_and_acquiring_a_released_lease_do_not_count_a_transition():
    assert claim(None, "me", Action.CREATE, WALL, T).transitions == 0
    assert claim(rec("", transitions=2), "me", Action.ACQUIRE, WALL, T).transitions == 2


def test_release_clears_the_holder():
    out = released(rec("me", transitions=5), WALL)
    assert out.holder == "" and out.transitions == 5 and out.duration == 1


# --- when the holder must stop -----------------------------------------------------------------

def test_leader_only_until_the_renew_deadline():
    assert not holds(None, 0, T)
    assert holds(100, 109.9, T)
    assert not holds(100, 110, T)


def test_old_leader_stops_before_anyone_can_take_over():
    """The split-brain margin: the holder times its deadline from *before* its renew was sent;
    a standby can only have seen that renew afterwards, and waits the full lease duration."""
    sent, seen_by_standby = 100.0, 100.3
    stops_at = next(t / 10 for t in range(1000, 2000) if not holds(sent, t / 10, T))
    takes_over = next(t / 10 for t in range(1000, 3000)
                      if next_action(Seen(rec("old"), seen_by_standby), "new", t / 10, T) is Action.ACQUIRE)
    assert takes_over - stops_at >= T.lease_duration - T.renew_deadline


# --- configuration ------------------------------------------------------------------------------

def test_lease_namespace_flag_then_downward_api_then_service_account():
    assert lease_namespace("flag", {"POD_NAMESPACE": "env"}, "sa") == "flag"
    assert lease_namespace(None, {"POD_NAMESPACE": "env"}, "sa") == "env"
    assert lease_namespace(None, {}, "sa\n") == "sa"
    assert lease_namespace(None, {}, None) is None


def test_identity_is_unique_per_process():
    assert identity({"POD_NAME": "op-abc"}, "host", "1234") == "op-abc_1234"
    assert identity({}, "host", "1234") == "host_1234"


# --- the loop, against an in-memory Lease with compare-and-swap ----------------------------------

class FakeLeases:
    def __init__(self):
        self.lease = None
        self.version = 0
        self.down = False

    def read(self):
        if self.down:
            raise ConnectionError("api server away")
        return copy.deepcopy(self.lease)

    def create(self, spec):
        if self.lease is not None:
            raise Conflict("exists")
        return self._store(spec)

    def replace(self, lease, spec):
        if self.down:
            raise ConnectionError("api server away")
        if lease["metadata"]["resourceVersion"] != str(self.version):
            raise Conflict("changed")
        return self._store(spec)

    def _store(self, spec):
        self.version += 1
        self.lease = {"metadata": {"name": "l", "resourceVersion": str(self.version)}, "spec": dict(spec)}
        return copy.deepcopy(self.lease)


FAST = Timings(lease_duration=0.6, renew_deadline=0.4, retry_period=0.05)


def test_two_electors_one_leader_then_failover_when_it_stops_renewing():
    async def scenario():
        leases = FakeLeases()
        lost = []
        a = Elector(leases, "a", FAST, on_lost=lost.append)
        b = Elector(leases, "b", FAST, on_lost=lost.append)
        await a.round()
        await b.round()
        assert a.leading() and not b.leading()
        assert leases.lease["spec"]["holderIdentity"] == "a"
        # a keeps renewing: b never takes over
        for _ in range(15):
            await asyncio.sleep(0.05)
            await a.round()
            await b.round()
            assert a.leading() and not b.leading()
        # a dies (no more rounds): b takes over after the lease duration, not before
        died = asyncio.get_running_loop().time()
        while not b.leading():
            await asyncio.sleep(0.02)
            await b.round()
        assert asyncio.get_running_loop().time() - died >= FAST.lease_duration - 0.05
        assert leases.lease["spec"]["holderIdentity"] == "b" and leases.lease["spec"]["leaseTransitions"] == 1
        assert not a.leading()  # its deadline passed long before
        assert lost == []

    asyncio.run(scenario())


def test_leader_that_cannot_renew_gives_up_at_the_deadline():
    async def scenario():
        leases = FakeLeases()
        lost = []
        a = Elector(leases, "a", FAST, on_lost=lost.append)
        task = asyncio.create_task(a.run())
        assert await asyncio.wait_for(a.wait_leading(), 1)
        leases.down = True
        cut = asyncio.get_running_loop().time()
        await asyncio.wait_for(task, 2)  # run() returns after on_lost
        assert lost and "could not renew" in lost[0]
        assert asyncio.get_running_loop().time() - cut <= FAST.renew_deadline + 2 * FAST.retry_period
        assert not a.leading()

    asyncio.run(scenario())


def test_leader_that_finds_the_lease_taken_stops_at_once():
    async def scenario():
        leases = FakeLeases()
        lost = []
        a = Elector(leases, "a", Timings(lease_duration=30, renew_deadline=20, retry_period=0.05), on_lost=lost.append)
        task = asyncio.create_task(a.run())
        assert await asyncio.wait_for(a.wait_leading(), 1)
        leases._store({**leases.lease["spec"], "holderIdentity": "usurper"})  # e.g. an admin edit
        await asyncio.wait_for(task, 1)  # long before its 20 s deadline
        assert lost == ["lease  is held by usurper now"] and not a.leading()

    asyncio.run(scenario())


class Stopped:
    """kopf's DaemonStopped as the job loop sees it: truthy once set, ``await .wait()``."""

    def __init__(self):
        self.event = asyncio.Event()

    def __bool__(self):
        return self.event.is_set()

    async def wait(self):
        await self.event.wait()


def test_job_loops_wake_when_leadership_comes_or_when_stopped():
    async def scenario():
        leases = FakeLeases()
        a, b = Elector(leases, "a", FAST), Elector(leases, "b", FAST)
        waiting = asyncio.create_task(a.wait_leading(Stopped()))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await a.round()
        assert await asyncio.wait_for(waiting, 1) is True
        stopped = Stopped()
        standby = asyncio.create_task(b.wait_leading(stopped))
        await asyncio.sleep(0.05)
        assert not standby.done()
        stopped.event.set()
        assert await asyncio.wait_for(standby, 1) is False

    asyncio.run(scenario())


def test_release_hands_over_at_once():
    async def scenario():
        leases = FakeLeases()
        a, b = Elector(leases, "a", FAST), Elector(leases, "b", FAST)
        await a.round()
        await b.round()
        await a.release()
        assert not a.leading() and leases.lease["spec"]["holderIdentity"] == ""
        await b.round()
        assert b.leading()

    asyncio.run(scenario())


class SlowLeases(FakeLeases):
    """An overloaded API server: each write takes ``delay`` seconds (while ``slow``)."""

    def __init__(self, delay):
        super().__init__()
        self.delay, self.slow = delay, True

    def _store(self, spec):
        if self.slow:
            time.sleep(self.delay)
        return super()._store(spec)


def test_a_slow_acquire_holds_the_lease_and_leads_after_a_timely_renewal():
    async def scenario():
        leases = SlowLeases(FAST.renew_deadline + 0.1)
        lost = []
        a = Elector(leases, "a", FAST, on_lost=lost.append)
        await a.round()
        assert leases.lease["spec"]["holderIdentity"] == "a" and not a.leading()
        assert a._lost() is None  # not a leader past its deadline: the process goes on
        b = Elector(leases, "b", FAST, on_lost=lost.append)
        await b.round()
        assert not b.leading()  # the lease is a's: b waits for it to expire
        leases.slow = False
        await a.round()
        assert a.leading() and lost == []
        assert leases.lease["spec"]["leaseTransitions"] == 0

    asyncio.run(scenario())


def test_a_busy_event_loop_never_delays_a_renewal():
    """start(): the campaign runs on its own thread and loop. The reconcile loop blocked for
    several renew deadlines (a large sweep checked inline, a burst of events) keeps the lease."""
    async def scenario():
        leases = FakeLeases()
        lost = []
        a = Elector(leases, "a", FAST, on_lost=lost.append)
        a.start(asyncio.get_running_loop())
        assert await asyncio.wait_for(a.wait_leading(), 2)
        renewals = leases.version
        time.sleep(FAST.renew_deadline * 4)  # the loop is blocked: no await for 1.6 s
        assert a.leading() and lost == []
        assert leases.version >= renewals + 10  # ~every retry period meanwhile
        await a.release()
        assert leases.lease["spec"]["holderIdentity"] == "" and not a.leading()
        assert not a._thread.is_alive()

    asyncio.run(scenario())
