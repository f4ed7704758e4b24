"""gang.admission: every waiting gang planned together against the cluster's nodes and pods, and
the planner's answer for one gang turned into pins and a placement."""

from __future__ import annotations

import copy

import pytest

from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.constants import Reason, UnschedulableReason
from phalanx.gang.admission import admit, decision_for, gang_request
from phalanx.gang.inventory import Reservation
from phalanx.gang.planner import Placement, Unschedulable
from phalanx.podreflector import pod_entry
from phalanx.render.job import render_children
from phalanx.validate import parse_job
from tests.conftest import MINIMAL
from tests.unit.phalanx.test_podreflector import pod


def test_another_namespaces_pod_makes_its_node_full_for_the_planner():
    """The point of the reflector: its entries are capacity the planner subtracts."""
    from phalanx.api.config import OperatorConfig
    from phalanx.gang.planner import GangRequest

    nodes = [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
              "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                         "conditions": [{"type": "Ready", "status": "True"}]}} for n in ("n1", "n2")]
    gang = GangRequest(key="team/job", count=2, requests={"nvidia.com/gpu": 8, "pods": 1})
    free = admit([gang], nodes, [], OperatorConfig()).results["team/job"]
    full = admit([gang], nodes, [pod_entry(pod("hog", node="n1"))], OperatorConfig()).results["team/job"]
    assert getattr(free, "nodes", None) and not getattr(full, "nodes", None)


CONFIG = OperatorConfig()
GPU = "nvidia.com/gpu"


def nodes(*names, gpus=8):
    return [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
             "status": {"allocatable": {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}]}} for n in names]


def training_job(name="job", **spec):
    obj = copy.deepcopy(MINIMAL)
    obj["metadata"].update(name=name, creationTimestamp="2026-01-01T00:00:00Z")
    obj["spec"].update(resources={"gpus": 8}, **spec)
    return parse_job(obj)


def test_gang_request_of_a_job():
    config = OperatorConfig(network_profiles={"default": NetworkProfile(fabric="infiniband", rdma_resource="rdma/ib")})
    request = gang_request(training_job(), config, priority=7)
    assert (request.key, request.count, request.priority, request.creation) == ("team/job", 2, 7, "2026-01-01T00:00:00Z")
    assert request.requests[GPU] == 8 and request.requests["rdma/ib"] == 1  # the profile's device is counted


@pytest.mark.parametrize("pending,placed", [
    ((), True),
    ((Reservation(gang="team/other", node="n1", requests={GPU: 8, "pods": 1}),), False),  # booked, not yet bound
    ((Reservation(gang="team/job", node="n1", requests={GPU: 8, "pods": 1}),), True),  # its own booking is free to it
])
def test_pending_reservations_take_capacity(pending, placed):
    request = gang_request(training_job(), CONFIG)
    result = admit([request], nodes("n1", "n2"), [], CONFIG, pending).results["team/job"]
    assert isinstance(result, Placement) is placed


def test_the_queue_is_planned_together_in_priority_order():
    low = gang_request(training_job("low"), CONFIG, priority=0)
    high = gang_request(training_job("high"), CONFIG, priority=10)
    admission = admit([low, high], nodes("n1", "n2"), [], CONFIG)
    assert isinstance(admission.results["team/high"], Placement) and isinstance(admission.results["team/low"], Unschedulable)
    assert sorted((r.gang, r.node) for r in admission.reservations) == [("team/high", "n1"), ("team/high", "n2")]


def test_decision_for_a_gang_that_does_not_fit():
    job = training_job()
    result = Unschedulable(key="team/job", message="needs 2 nodes; 1 fits", reason=UnschedulableReason.INSUFFICIENT)
    decision = decision_for(job, result, [], nodes("n1"), CONFIG)
    assert (decision.release, decision.schedulable, decision.reason, decision.message, decision.pins) == \
        (False, False, "Insufficient", "needs 2 nodes; 1 fits", {})


def test_decision_for_a_placed_gang_pins_each_pod_to_its_ranks_node():
    job = training_job()
    pods = [c for c in render_children(job, CONFIG) if c["kind"] == "Pod"]
    inventory = nodes("n1", "n2")
    result = admit([gang_request(job, CONFIG)], inventory, [], CONFIG).results["team/job"]
    decision = decision_for(job, result, list(reversed(pods)), inventory, CONFIG)
    assert decision.release and decision.reason == Reason.PLACED
    assert decision.pins == {"job-node-0-0": result.nodes[0], "job-node-1-0": result.nodes[1]}
    assert sorted(result.nodes) == ["n1", "n2"]
    assert decision.message.startswith("placed on 2 nodes (")
    assert decision.placement["nodes"] == result.nodes
