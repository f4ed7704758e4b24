"""lifecycle/validity.py: an invalid job is refused and creates nothing; a valid one is accepted at
its current size."""

from __future__ import annotations

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.decision import Observed
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.reconcile import release_all
from phalanx.lifecycle.status import StatusView
from phalanx.lifecycle.validity import accept, refuse_invalid
from phalanx.validate import validate_job
from tests.lifecycle_pass import NOW, condition, conditions, job, pod


def unprepared(obj: dict, pods: list) -> Pass:
    config = OperatorConfig()
    parsed, problems = validate_job(obj, config, None)
    view = StatusView(obj.get("status"), 1, NOW)
    return Pass(obj=obj, observed=Observed(pods=pods), now=NOW, config=config, gang=release_all, fits=None, view=view,
                job=parsed, problems=problems)


@pytest.mark.parametrize(("spec", "status", "refused", "phase", "valid"), [
    pytest.param({}, {}, False, "Pending", None, id="valid"),
    pytest.param({"nodes": 0}, {}, True, "Failed", ("False", "InvalidSpec"), id="invalid-fails"),
    pytest.param({"nodes": 0}, {"phase": "Succeeded"}, True, "Succeeded", None, id="a-finished-job-keeps-its-verdict"),
])
def test_refuse_invalid(spec, status, refused, phase, valid):
    ctx = unprepared(job(spec, status), [pod(0, phase="Running"), pod(1, phase="Failed")])
    plan = refuse_invalid(ctx)
    assert (plan is not None) == refused
    assert ctx.view.status.phase == phase
    assert conditions(ctx).get("Valid") == valid
    assert ctx.plan.delete_pods == (["job-node-0-0"] if refused else [])


ELASTIC = {"nodes": 4, "elastic": {"minNodes": 2, "maxNodes": 4}, "training": {"globalBatchSize": 16}}


@pytest.mark.parametrize(("spec", "status", "active", "total", "reconciled"), [
    pytest.param({}, {}, 2, 2, None, id="fixed-size"),
    pytest.param(ELASTIC, {"activeNodes": 3}, 3, 4, None, id="elastic-at-its-current-size"),
    pytest.param(ELASTIC, {"activeNodes": 9}, 4, 4, None, id="elastic-out-of-bounds-runs-at-spec-nodes"),
    pytest.param({}, {"conditions": [condition("Reconciled", "False", "ReconcileError")]}, 2, 2, ("True", "Reconciled"),
                 id="recovered-from-a-reconcile-error"),
])
def test_accept(spec, status, active, total, reconciled):
    ctx = unprepared(job(spec, status), [])
    assert not ctx.problems, ctx.problems
    accept(ctx)
    assert ctx.active == active and ctx.spec.nodes == active and ctx.requested.spec.nodes == total
    assert ctx.view.status.total_nodes == active
    assert conditions(ctx)["Valid"] == ("True", "Validated")
    assert conditions(ctx).get("Reconciled") == reconciled
