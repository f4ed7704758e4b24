"""gang.admission: every waiting gang planned together against the cluster's nodes and pods, and
the planner's answer for one gang turned into pins and a placement."""

from __future__ import annotations

from phalanx.gang.admission import admit
from phalanx.podreflector import pod_entry
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
