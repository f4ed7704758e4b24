"""lifecycle.context: one reconcile pass (``Pass``); ``done()`` applies rank 0's progress last and
hands back the plan with the decided status and its Events."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.api.types import Phase
from phalanx.decision import GangDecision, Observed
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.status import StatusView
from phalanx.validate import parse_job
from tests.conftest import MINIMAL

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def make_pass(status=None, reports=(), job=True) -> Pass:
    obj = copy.deepcopy(MINIMAL)
    return Pass(obj=obj, observed=Observed(pods=[]), now=NOW, config=OperatorConfig(),
                gang=lambda job, pods: GangDecision(release=False), fits=None,
                view=StatusView(status, obj["metadata"]["generation"], NOW),
                job=parse_job(obj) if job else None, problems=[], reports=list(reports))


def test_the_pass_reads_its_job():
    ctx = make_pass({"restartAttempt": 4})
    assert ctx.meta["uid"] == "uid-1" and ctx.spec.nodes == 2 and ctx.attempt == 4
    with pytest.raises(AssertionError):
        _ = make_pass(job=False).spec  # no parsed job: a phase that needs one is a bug


def test_done_hands_back_the_status_and_the_events():
    ctx = make_pass({"phase": "Pending", "totalSteps": 100, "observedGeneration": 1})
    ctx.view.phase(Phase.RUNNING, "Running", "all 2 nodes running")
    plan = ctx.done()
    assert plan is ctx.plan
    assert plan.status["phase"] == "Running" and plan.status["observedGeneration"] == 1
    assert plan.events == [("Normal", "Running", "all 2 nodes running")]


def test_done_writes_no_status_when_nothing_changed():
    assert make_pass({"phase": "Running", "reason": "Running", "observedGeneration": 1}).done().status is None


def test_rank0_progress_is_applied_last_and_in_order():
    """Reports land on the status as decided by the phases, the later one last."""
    ctx = make_pass({"phase": "Running", "totalSteps": 200, "step": 10}, reports=[{"step": 50}, None, {"step": 100, "loss": 1.5}])
    ctx.view.status.step = 20  # a phase's own write: the reports still come after it
    plan = ctx.done()
    assert (plan.status["step"], plan.status["loss"], plan.status["progressPercentage"]) == (100, 1.5, 50)
    assert plan.status["lastProgressTime"] == "2026-01-01T12:00:00Z"
