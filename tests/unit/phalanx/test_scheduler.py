"""The operator's one gang scheduler (phalanx/scheduler.py): one plan of the queue per batch of
changes, rows published per gang, only changed rows woken, bookings honoured until the index shows
them or they expire, and an elastic probe that leaves the queue as it was."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from phalanx import scheduler as scheduler_module
from phalanx.api.config import OperatorConfig, TopologyConfig
from phalanx.constants import LABEL_JOB_NAME
from phalanx.gang.admission import admit
from phalanx.gang.inventory import NodeInfo, Reservation
from phalanx.gang.planner import GangRequest, Placement, Unschedulable
from phalanx.scheduler import (
    PIN_TTL_SECONDS,
    Row,
    Scheduler,
    expired_bookings,
    next_expiry,
    plan_rows,
    rows_to_publish,
)

GPU = "nvidia.com/gpu"
CONFIG = OperatorConfig()
B, S, H = (level.label for level in TopologyConfig().resolved_levels)


def nodes(count=8):
    return {f"n{i}": [NodeInfo(f"n{i}", {B: "b0", S: f"s{i // 4}", H: f"n{i}"}, {GPU: 8, "cpu": 64000, "pods": 110})]
            for i in range(count)}


def gang(name, count, priority=0, creation="2026-12-01T00:00:00Z"):
    return GangRequest(f"ns/{name}", count, {GPU: 8, "pods": 1}, priority=priority, creation=creation)


def bound_pod(name, node, job="other", namespace="ns"):
    return {"metadata": {"name": name, "namespace": namespace, "labels": {LABEL_JOB_NAME: job}},
            "spec": {"nodeName": node, "containers": [{"resources": {"requests": {GPU: "8"}}}]},
            "status": {"phase": "Running"}}


class Counting:
    """admit() with a count of its calls: one per plan of the queue."""

    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return admit(*args, **kwargs)


@pytest.fixture
def admits(monkeypatch):
    counting = Counting()
    monkeypatch.setattr(scheduler_module, "admit", counting)
    return counting


def scheduler_with(count=8, usage=()):
    woken = []
    scheduler = Scheduler(wake=lambda namespace, name: woken.append(f"{namespace}/{name}"))
    scheduler.attach(nodes(count), {None: list(usage)})
    return scheduler, woken


# --------------------------------------------------------------------------------------------
# Pure


def test_a_cycle_gives_each_gang_the_row_admit_gives_it():
    """Same placements as each job planning the queue itself (the per-job path)."""
    queue = [gang("a", 4), gang("b", 3, priority=5), gang("c", 4)]
    inventory = [n for store in nodes().values() for n in store]
    rows = plan_rows(queue, inventory, [], CONFIG, [])
    for request in queue:
        alone = admit(queue, inventory, [], CONFIG, []).results[request.key]
        assert rows[request.key] == Row(request, alone)
    assert isinstance(rows["ns/c"].result, Unschedulable) and rows["ns/b"].placed and rows["ns/a"].placed


A = gang("a", 2)
A2 = gang("a", 3)  # the same job at another size
PLACED = Placement("ns/a", ["n0", "n1"], [], {}, {GPU: 8})
WAITS = Unschedulable("ns/a", "needs 2 nodes; 1 fit")
WAITS_LESS = Unschedulable("ns/a", "needs 2 nodes; 0 fit")


@pytest.mark.parametrize("current, planned, waiting, published", [
    ({}, {"ns/a": Row(A, WAITS)}, {"ns/a": A}, ["ns/a"]),  # a first row
    ({"ns/a": Row(A, WAITS)}, {"ns/a": Row(A, WAITS)}, {"ns/a": A}, []),  # unchanged: nobody woken
    ({"ns/a": Row(A, WAITS)}, {"ns/a": Row(A, WAITS_LESS)}, {"ns/a": A}, ["ns/a"]),  # the reason changed
    ({"ns/a": Row(A, WAITS)}, {"ns/a": Row(A, PLACED)}, {"ns/a": A}, ["ns/a"]),  # placed
    ({}, {"ns/a": Row(A, PLACED)}, {}, []),  # left the queue while planned
    ({}, {"ns/a": Row(A, PLACED)}, {"ns/a": A2}, []),  # resized while planned: its new request waits
])
def test_rows_to_publish(current, planned, waiting, published):
    assert sorted(rows_to_publish(current, planned, waiting)) == published


@pytest.mark.parametrize("written_ago, expired, expiry", [
    (math.inf, False, None),  # booked, patches in flight: never expires
    (0.0, False, PIN_TTL_SECONDS),
    (PIN_TTL_SECONDS - 1, False, 1.0),
    (PIN_TTL_SECONDS, True, 0.0),
])
def test_bookings_expire_ttl_after_their_pins_are_written(written_ago, expired, expiry):
    now = 1000.0
    pending = {"ns/a": ([Reservation("ns/a", "n0", {GPU: 8})], math.inf if written_ago == math.inf else now - written_ago)}
    assert (expired_bookings(pending, now) == ["ns/a"]) is expired
    assert next_expiry(pending, now) == (pytest.approx(expiry) if expiry is not None else None)


# --------------------------------------------------------------------------------------------
# Batching


def run_cycles(scheduler, changes, settle=0.3):
    """Start the scheduler's task, make ``changes`` on the loop, let it settle; the cycles run."""
    import concurrent.futures

    async def main():
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        task = asyncio.create_task(scheduler.run(executor, CONFIG))
        await asyncio.sleep(0)
        changes()
        await asyncio.sleep(settle)
        task.cancel()
        executor.shutdown()

    asyncio.run(main())


def test_64_gangs_joining_make_one_cycle(admits):
    scheduler, woken = scheduler_with(count=128)

    def join():
        for i in range(64):
            assert scheduler.submit(f"ns/g{i}", gang(f"g{i}", 2)) is None  # no row yet: queued

    run_cycles(scheduler, join)
    assert admits.calls == 1 and scheduler.cycles == 1
    assert sorted(woken) == sorted(f"ns/g{i}" for i in range(64))  # every row is new
    assert all(scheduler.row(f"ns/g{i}", gang(f"g{i}", 2)).placed for i in range(64))


def test_a_burst_of_node_events_makes_one_cycle_and_wakes_only_changed_rows(admits):
    scheduler, woken = scheduler_with(count=8)
    for name, count in (("big", 8), ("small", 2), ("mid", 4)):
        scheduler.submit(f"ns/{name}", gang(name, count, creation=f"2026-12-01T00:00:0{count}Z"))
    scheduler.cycle(None, CONFIG)
    assert {k: r.placed for k, r in scheduler.rows.items()} == {"ns/small": True, "ns/mid": True, "ns/big": False}
    woken.clear()
    admits.calls = 0

    used = {n for row in scheduler.rows.values() if row.placed for n in row.result.nodes}
    lost = next(n for n in scheduler.nodes if n not in used)

    def node_events():  # 8 events, a node no placement uses lost: only "big"'s reason changes
        del scheduler.nodes[lost]
        for _ in range(8):
            scheduler.changed()

    run_cycles(scheduler, node_events)
    assert admits.calls == 1
    assert woken == ["ns/big"] and "; 1 fit" in scheduler.rows["ns/big"].result.message


def test_a_cycle_with_nothing_queued_plans_nothing(admits):
    scheduler, woken = scheduler_with()
    run_cycles(scheduler, scheduler.changed)
    assert admits.calls == 0 and not woken


def test_with_gangs_waiting_a_quiet_scheduler_still_plans_at_its_resync(admits, monkeypatch):
    monkeypatch.setattr(scheduler_module, "RESYNC_SECONDS", 0.05)
    scheduler, _ = scheduler_with(count=1)
    scheduler.submit("ns/a", gang("a", 2))
    run_cycles(scheduler, lambda: None, settle=0.5)
    assert admits.calls >= 2  # the join's cycle, then resyncs


# --------------------------------------------------------------------------------------------
# Bookings


def test_a_booking_holds_its_nodes_until_the_pins_are_visible_or_expire(admits):
    scheduler, _ = scheduler_with(count=4)
    scheduler.submit("ns/a", gang("a", 4))
    scheduler.cycle(None, CONFIG)
    row = scheduler.rows["ns/a"]
    scheduler.book("ns/a", row)
    assert "ns/a" not in scheduler.waiting and "ns/a" not in scheduler.rows
    scheduler.submit("ns/b", gang("b", 1))
    scheduler.cycle(None, CONFIG)
    assert not scheduler.rows["ns/b"].placed  # a's pins are not in the index yet: booked
    scheduler.pins_written("ns/a")
    scheduler.cycle(None, CONFIG)
    assert not scheduler.rows["ns/b"].placed  # written, the index may lag: still booked
    scheduler.pending["ns/a"] = (scheduler.pending["ns/a"][0], time.monotonic() - PIN_TTL_SECONDS)
    scheduler.usage[None] += [bound_pod(f"a-{i}", node, job="a") for i, node in enumerate(row.result.nodes[:3])]
    scheduler.cycle(None, CONFIG)
    assert "ns/a" not in scheduler.pending  # expired: the index holds what it shows (3 bound)
    assert scheduler.rows["ns/b"].result.nodes == [row.result.nodes[3]]


def test_a_booking_from_an_outdated_row_asks_for_another_cycle():
    scheduler, _ = scheduler_with(count=4)
    scheduler.submit("ns/a", gang("a", 2))
    scheduler.cycle(None, CONFIG)
    old = scheduler.rows["ns/a"]
    scheduler._due.clear()
    scheduler.rows["ns/a"] = Row(old.request, Placement("ns/a", ["n2", "n3"], [], {}, {GPU: 8}))  # a newer cycle's
    scheduler.book("ns/a", old)
    assert scheduler._due.is_set()


def test_a_gang_planned_again_drops_its_booking_and_row():
    scheduler, _ = scheduler_with(count=4)
    scheduler.submit("ns/a", gang("a", 2))
    scheduler.cycle(None, CONFIG)
    scheduler.book("ns/a", scheduler.rows["ns/a"])
    assert scheduler.submit("ns/a", gang("a", 2)) is None  # its release failed: planned again
    assert "ns/a" not in scheduler.pending and "ns/a" in scheduler.waiting


def test_a_gang_leaving_the_queue_frees_its_row_and_its_capacity():
    scheduler, woken = scheduler_with(count=4)
    scheduler.submit("ns/first", gang("first", 4, creation="2026-12-01T00:00:01Z"))
    scheduler.submit("ns/second", gang("second", 4, creation="2026-12-01T00:00:02Z"))
    scheduler.cycle(None, CONFIG)
    assert scheduler.rows["ns/first"].placed and not scheduler.rows["ns/second"].placed
    woken.clear()
    scheduler._due.clear()
    scheduler.leave("ns/first")  # suspended before it was released
    assert "ns/first" not in scheduler.rows and "ns/first" not in scheduler.waiting and scheduler._due.is_set()
    scheduler.cycle(None, CONFIG)
    assert scheduler.rows["ns/second"].placed and woken == ["ns/second"]


# --------------------------------------------------------------------------------------------
# The elastic probe


def test_the_elastic_probe_answers_without_disturbing_the_queue(admits):
    scheduler, woken = scheduler_with(count=4, usage=[bound_pod(f"e-{i}", f"n{i}", job="elastic") for i in range(2)])
    scheduler.submit("ns/waiting", gang("waiting", 4))
    scheduler.cycle(None, CONFIG)
    before = (dict(scheduler.waiting), dict(scheduler.rows), dict(scheduler.pending), scheduler.cycles)
    woken.clear()
    assert scheduler.probe(None, gang("elastic", 4), CONFIG)  # its own 2 pods count as free
    assert not scheduler.probe(None, gang("elastic", 5), CONFIG)
    assert (dict(scheduler.waiting), dict(scheduler.rows), dict(scheduler.pending), scheduler.cycles) == before
    assert not woken


def test_the_elastic_probe_queues_behind_higher_priority_gangs():
    scheduler, _ = scheduler_with(count=4)
    scheduler.submit("ns/urgent", gang("urgent", 3, priority=100))
    assert not scheduler.probe(None, gang("elastic", 2), CONFIG)
    assert scheduler.probe(None, gang("elastic", 1), CONFIG)


# --------------------------------------------------------------------------------------------
# The job loop's gang step reads its row


def test_the_gang_step_plans_a_new_gang_once_then_reads_its_row(admits):
    """A gang's first plan runs at once (its pass may create it pinned); after that its pass only
    reads the row a cycle published: freed capacity places it without the job planning."""
    from datetime import UTC, datetime

    from phalanx import startup
    from phalanx.api.types import TrainingJob
    from phalanx.decision import Observed
    from phalanx.lifecycle.reconcile import decide
    from tests.unit.phalanx.test_handlers import indexes, job, job_loop, node

    obj = job(name="small", nodes=4)
    plan = decide(obj, Observed(pods=[], service_exists=False, config_map_exists=False, network_policy_exists=False),
                  datetime.now(UTC))
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    training_job = TrainingJob.model_validate(obj)

    async def main():
        memo = startup.new_memo()
        ix = indexes(nodes=[node(f"n{i}") for i in range(4)], usage=[bound_pod("x", "n3")])
        loop_ = job_loop(memo, "small", ix)
        first = await asyncio.to_thread(loop_.gang, training_job, pods)
        planned_once = admits.calls
        again = await asyncio.to_thread(loop_.gang, training_job, pods)  # a resync pass: the same row
        assert admits.calls == planned_once and not loop_.wake.is_set()
        ix.usage[None].clear()  # the pod on n3 ended
        memo.scheduler.changed()
        await asyncio.to_thread(memo.scheduler.cycle, asyncio.get_running_loop(), memo.config, only_if_due=True)
        woken = loop_.wake.is_set()
        calls = admits.calls
        placed = await asyncio.to_thread(loop_.gang, training_job, pods)
        memo.decider.shutdown()
        return memo, first, again, planned_once, woken, calls, placed

    memo, first, again, planned_once, woken, calls, placed = asyncio.run(main())
    assert not first.release and not again.release and "3 fit" in first.message and planned_once == 1
    assert woken and calls == 2  # one cycle for the freed capacity, and this job woken by it
    assert placed.release and len(placed.pins) == 4 and admits.calls == 2  # read, not planned
    assert "default/small" not in memo.scheduler.waiting and len(memo.scheduler.pending["default/small"][0]) == 4


def test_expired_pins_are_dropped():
    scheduler = Scheduler()
    old = time.monotonic() - PIN_TTL_SECONDS - 1
    scheduler.pending["a/old"] = ([Reservation("a/old", "n0", {GPU: 8})], old)
    scheduler.pending["a/new"] = ([Reservation("a/new", "n1", {GPU: 8})], time.monotonic())
    assert [r.node for r in scheduler.pending_pins(except_key="a/x")] == ["n1"]
    assert list(scheduler.pending) == ["a/new"]



def test_a_spare_is_chosen_around_promised_rows_and_its_booking_holds_it(admits):
    """A waiting gang's placed row is promised capacity: the spare comes from elsewhere; the spare
    booked, the next cycle plans around it."""
    from phalanx.gang.spare import spare_for

    scheduler, _ = scheduler_with(count=4, usage=[bound_pod("j-0", "n0", job="j"), bound_pod("j-1", "n1", job="j")])
    scheduler.submit("ns/w", gang("w", 1))
    scheduler.cycle(None, CONFIG)
    promised = scheduler.rows["ns/w"].result.nodes
    nodes, pods, held = scheduler.spare_inputs()
    spare = spare_for(gang("j", 2), nodes, pods, held, TopologyConfig(), ("n0",), "n1")
    assert spare.node is not None and spare.node not in promised + ["n0", "n1"]
    scheduler.hold("ns/j#node-rank-1", [Reservation("ns/j", spare.node, {GPU: 8})])
    assert scheduler._due.is_set()
    scheduler.submit("ns/x", gang("x", 1))
    scheduler.cycle(None, CONFIG)
    assert not scheduler.rows["ns/x"].placed  # n0, n1 used, one promised to w, the spare booked
