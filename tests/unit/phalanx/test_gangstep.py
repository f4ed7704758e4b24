"""The gang step (phalanx/gangstep.py): it plans on the decide thread, reads and books on the event
loop, and books nothing for a job whose loop has stopped."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest

from phalanx import gangstep, offloop, startup
from phalanx.decision import Observed
from phalanx.lifecycle.reconcile import decide
from tests.unit.phalanx.test_handlers import indexes, job, job_loop, node


def _gated_pods(obj):
    """The first pass's pods as the index shows them: created, gated, nothing bound."""
    plan = decide(obj, Observed(pods=[], service_exists=False, config_map_exists=False, network_policy_exists=False),
                  datetime.now(UTC))
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    return pods, plan.status


def test_the_gang_step_plans_off_the_loop_and_books_on_it():
    async def main():
        memo = startup.new_memo()
        obj = job(name="small", nodes=4)
        pods, status = _gated_pods(obj)
        status = {**status, "attemptCreated": True}
        ix = indexes(nodes=[node(f"n{i}") for i in range(6)])
        loop_ = job_loop(memo, "small", ix)
        seen = []
        step = loop_.gang

        def spy(j, p):
            seen.append(threading.current_thread() is threading.main_thread())
            return step(j, p)

        loop_.gang = spy
        plan = await loop_.decide({**obj, "status": status}, Observed(pods=pods))
        memo.decider.shutdown()
        return memo, plan, seen

    memo, plan, seen = asyncio.run(main())
    assert seen == [False]  # planned on the decide thread
    assert len(plan.release) == 4 and len(plan.pins) == 4
    assert "default/small" not in memo.scheduler.waiting and len(memo.scheduler.pending["default/small"][0]) == 4


def test_a_gang_of_a_deleted_job_is_never_queued():
    """decide() still running when the job's loop stops (deleted): its gang step books nothing."""
    async def main():
        memo = startup.new_memo()
        ix = indexes(nodes=[node("n0")])
        loop_ = job_loop(memo, "gone", ix)
        memo.gangs.forget("default", "gone")  # the daemon's finally ran
        obj = job(name="gone", nodes=2)
        pods, _ = _gated_pods(obj)
        from phalanx.api.types import TrainingJob
        tj = TrainingJob.model_validate(obj)
        with pytest.raises(offloop.JobGone):
            await asyncio.to_thread(loop_.gang, tj, pods)
        memo.decider.shutdown()
        return memo

    memo = asyncio.run(main())
    assert not memo.scheduler.waiting and not memo.gangs.wakeups



# --- what the step reads of the indexes, and the elastic probe ------------------------------------


def _training_job(nodes=2, priority_class=None):
    from phalanx.api.types import TrainingJob

    obj = job(name="probe", nodes=nodes)
    if priority_class:
        obj["spec"]["scheduling"] = {"priorityClassName": priority_class}
    return TrainingJob.model_validate(obj)


@pytest.mark.parametrize("priority_class, classes, priority", [
    (None, {"high": [1000]}, 0),  # no class named: the default
    ("high", {"high": [1000], "low": [-5]}, 1000),
    ("low", {"high": [1000], "low": [-5]}, -5),
    ("missing", {"high": [1000]}, 0),  # not (yet) in the index: the default
])
def test_a_gangs_priority_is_its_priority_class_value(priority_class, classes, priority):
    assert gangstep._priority(_training_job(priority_class=priority_class), classes) == priority


def test_values_flattens_an_index():
    assert gangstep._values({"a": [1, 2], "b": [], "c": [3]}) == [1, 2, 3]


@pytest.mark.parametrize("nodes, fits", [(4, True), (6, True), (7, False)])
def test_the_elastic_probe_answers_without_queueing_or_booking(nodes, fits):
    memo = startup.new_memo()
    ix = indexes(nodes=[node(f"n{i}") for i in range(6)])
    probe = gangstep.elastic_probe(memo, "default", "probe", ix)
    assert probe(_training_job(nodes=nodes)) is fits
    assert not memo.scheduler.waiting and not memo.scheduler.pending
    memo.decider.shutdown()
