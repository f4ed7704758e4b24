"""lifecycle.elastic: the sizes an elastic job may run at, the job at a given size, and the two
elastic steps — shrink when the gang cannot be placed, grow back when it can."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.decision import GangDecision, Observed
from phalanx.lifecycle import elastic
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.elastic import active_size, at_size
from phalanx.lifecycle.status import StatusView
from phalanx.validate import parse_job
from tests.conftest import MINIMAL

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

def test_elastic_sizes_respect_the_layout(job_obj):
    from phalanx.lifecycle.elastic import runnable_sizes
    from phalanx.validate import parse_job

    job_obj["spec"].update(nodes=4, procsPerNode=4, elastic={"minNodes": 1, "maxNodes": 4}, training={"globalBatchSize": 32})
    # 32 sequences over 4·n data-parallel ranks: n = 3 would need 32 % 12 == 0.
    assert runnable_sizes(parse_job(job_obj), 1, 4) == [4, 2, 1]


def elastic_job(low=2, high=4, **over):
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(nodes=high, procsPerNode=4, parallelism={"data": 4 * high},
                       elastic={"minNodes": low, "maxNodes": high, "replaceTimeoutSeconds": 30},
                       training={"globalBatchSize": 48}, **over)
    return parse_job(obj)


def test_at_size_recomputes_the_data_parallel_degree():
    job = elastic_job()
    assert at_size(job, 4) is job
    small = at_size(job, 3)
    assert (small.spec.nodes, small.spec.world_size, small.spec.parallelism.data) == (3, 12, None)
    assert (job.spec.nodes, job.spec.parallelism.data) == (4, 16)  # the job itself is unchanged
    assert small.metadata == job.metadata


@pytest.mark.parametrize("elastic,recorded,size", [
    (True, 3, 3),
    (True, None, 4),  # nothing recorded: spec.nodes
    (True, 1, 4),  # out of bounds (the bounds changed): spec.nodes
    (True, 5, 4),
    (True, 2, 2),  # the bounds are inclusive
    (False, 3, 4),  # not elastic
])
def test_active_size(elastic, recorded, size):
    job = elastic_job() if elastic else parse_job(copy.deepcopy(MINIMAL) | {"spec": MINIMAL["spec"] | {"nodes": 4}})
    assert active_size(job, recorded) == size


def elastic_pass(active, fits, status=None) -> Pass:
    job = elastic_job()
    obj = copy.deepcopy(MINIMAL)
    current = at_size(job, active)
    return Pass(obj=obj, observed=Observed(pods=[]), now=NOW, config=OperatorConfig(),
                gang=lambda job, pods: GangDecision(release=False), fits=fits,
                view=StatusView(status or {"phase": "Scheduling"}, 1, NOW), job=current, problems=[],
                requested=job, active=active)


def sizes_up_to(largest):
    return lambda job: job.spec.nodes <= largest


@pytest.mark.parametrize("waited,fits,size", [
    (31, sizes_up_to(3), 3),  # the largest smaller gang that fits
    (31, sizes_up_to(2), 2),
    (29, sizes_up_to(3), None),  # not before replaceTimeoutSeconds
    (31, sizes_up_to(1), None),  # below minNodes: wait
    (31, None, None),  # no capacity view (another backend places the gang)
])
def test_shrink(waited, fits, size):
    ctx = elastic_pass(4, fits)
    plan = elastic.shrink(ctx, waited)
    if size is None:
        assert plan is None and ctx.view.status.active_nodes is None
        return
    assert plan.status["activeNodes"] == size and ctx.attempt == 1
    assert f"resizing the gang from 4 to {size} nodes (no room for 4 nodes for {waited}s)" in plan.status["message"]
    assert plan.events[0][0] == "Warning"  # a smaller gang is worth a warning


RUNNING_SINCE = {"phase": "Running", "conditions": [{"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T11:59:00Z"}]}


@pytest.mark.parametrize("active,status,fits,size", [
    (2, RUNNING_SINCE, sizes_up_to(4), 4),  # ran 60 s at this size: back to spec.nodes
    (2, RUNNING_SINCE, sizes_up_to(3), 3),
    (2, RUNNING_SINCE, sizes_up_to(2), None),  # no more room than now
    (4, RUNNING_SINCE, sizes_up_to(4), None),  # already at spec.nodes
    (2, {"phase": "Scheduling"}, sizes_up_to(4), None),  # not running: no clock
    (2, RUNNING_SINCE | {"conditions": [RUNNING_SINCE["conditions"][0] | {"lastTransitionTime": "2026-01-01T11:59:45Z"}]},
     sizes_up_to(4), None),  # 15 s at this size: not yet
])
def test_grow(active, status, fits, size):
    ctx = elastic_pass(active, fits, status)
    plan = elastic.grow(ctx)
    if size is None:
        assert plan is None
        return
    assert plan.status["activeNodes"] == size and "(capacity returned)" in plan.status["message"]
    assert plan.events[0][0] == "Normal"
