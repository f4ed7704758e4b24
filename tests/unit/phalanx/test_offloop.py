"""Work off the event loop (phalanx/offloop.py): the one decide thread, hops back onto the loop, and
decide() with the cyclic GC paused for a big gang only."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from phalanx import offloop
from phalanx.pending import Pending
from tests.unit.phalanx.test_handlers import job


@pytest.mark.parametrize("spec, pods", [
    ({"nodes": 4}, 4),
    ({"nodes": 2, "roles": [{"name": "ps", "replicas": 3}, {"name": "chief"}]}, 6),  # a role's replicas default to 1
    ({"nodes": 2, "roles": ["ps", None]}, 2),  # malformed roles count nothing
    ({"nodes": "4"}, 0),
    ({"nodes": True}, 0),
    ({"nodes": 2, "roles": [{"replicas": 1.5}]}, 2),
    ({}, 0),
    ({"nodes": 2, "roles": None}, 2),
])
def test_gang_pods_counts_workers_and_roles_as_the_raw_spec_says(spec, pods):
    assert offloop._gang_pods(spec) == pods


def test_on_loop_without_a_loop_or_on_the_loop_itself_runs_at_once():
    assert offloop.on_loop(None, threading.get_ident) == threading.get_ident()

    async def main():
        return offloop.on_loop(asyncio.get_running_loop(), threading.get_ident)

    assert asyncio.run(main()) == threading.get_ident()


def test_on_loop_from_another_thread_runs_on_the_loops_thread_and_passes_errors_back():
    def fail():
        raise offloop.JobGone("ns/j")

    async def main():
        loop = asyncio.get_running_loop()
        ran_on = await asyncio.to_thread(offloop.on_loop, loop, threading.get_ident)
        with pytest.raises(offloop.JobGone):
            await asyncio.to_thread(offloop.on_loop, loop, fail)
        return ran_on

    assert asyncio.run(main()) == threading.get_ident()


def test_the_decider_runs_everything_on_one_thread():
    decider = offloop.new_decider()
    try:
        threads = {decider.submit(threading.current_thread).result() for _ in range(4)}
    finally:
        decider.shutdown()
    assert len(threads) == 1 and next(iter(threads)).name.startswith("phalanx-decide")


@pytest.mark.parametrize("nodes, paused", [(offloop.GC_PAUSE_MIN_NODES - 1, False), (offloop.GC_PAUSE_MIN_NODES, True)])
def test_decide_off_loop_pauses_the_collector_for_a_big_gang_only(monkeypatch, nodes, paused):
    seen = []

    def decide(obj, *args, **kwargs):
        seen.append((gc.isenabled(), offloop.decide_started[0] is not None))
        raise RuntimeError("decide failed")

    monkeypatch.setattr(offloop, "decide", decide)
    with pytest.raises(RuntimeError):
        offloop.decide_off_loop({"spec": {"nodes": nodes}})
    assert seen == [(not paused, True)]
    assert gc.isenabled() and offloop.decide_started[0] is None  # restored even when decide raised


def test_decide_off_loop_keeps_the_plans_pods_compact():
    from datetime import UTC, datetime

    from phalanx.decision import Observed

    plan = offloop.decide_off_loop(job(name="small", nodes=2),
                                   Observed(pods=[], service_exists=False, config_map_exists=False,
                                            network_policy_exists=False), datetime.now(UTC))
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    assert len(pods) == 2 and all(isinstance(p, Pending) for p in pods)
    assert not any(isinstance(c, Pending) for c in plan.create if c["kind"] != "Pod")
