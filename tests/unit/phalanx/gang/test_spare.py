"""gang/spare.py: the spare node for one node-rank comes from the gang's topology domain."""

from __future__ import annotations

import pytest

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import NodeInfo, Reservation
from phalanx.gang.planner import GangRequest
from phalanx.gang.spare import spare_for

GPU = "nvidia.com/gpu"
BLOCK, SUB = "phalanx.dev/topology-block", "phalanx.dev/topology-subblock"


def node(name: str, block: str, sub: str, **kwargs) -> NodeInfo:
    return NodeInfo(name=name, labels={BLOCK: block, SUB: sub, "kubernetes.io/hostname": name},
                    allocatable={GPU: 8, "pods": 110}, **kwargs)


def cluster(*changed: NodeInfo) -> list[NodeInfo]:
    """b1: s1 {a1 a2 a2x a3}, s2 {a4 a5}; b2: s3 {c1 c2}."""
    nodes = {n.name: n for n in [node("a1", "b1", "s1"), node("a2", "b1", "s1"), node("a2x", "b1", "s1"), node("a3", "b1", "s1"),
                                 node("a4", "b1", "s2"), node("a5", "b1", "s2"), node("c1", "b2", "s3"),
                                 node("c2", "b2", "s3")]}
    nodes.update({n.name: n for n in changed})
    return list(nodes.values())


def bound(name: str, node_name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "other", "labels": {}},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {GPU: "8"}}}]},
            "status": {"phase": "Running"}}


def request(**kwargs) -> GangRequest:
    return GangRequest(key="ns/job", count=3, requests={GPU: 8, "pods": 1}, **kwargs)


@pytest.mark.parametrize(("req", "nodes", "pods", "held", "keep", "lost", "spare", "domain", "reason"), [
    pytest.param(request(), cluster(), [], [], ("a1", "a4"), "a2", "a2x", "block=b1", "",
                 id="deepest-shared-domain-the-lost-nodes-subblock-first"),
    pytest.param(request(), cluster(), [], [], ("a1", "a3"), "a2", "a2x", "block=b1/subblock=s1", "",
                 id="kept-nodes-in-one-subblock-stay-there"),
    pytest.param(request(), cluster(), [], [], ("a1", "a2", "a2x"), "a3", "a4", "block=b1", "",
                 id="a-full-subblock-widens-to-the-block"),
    pytest.param(request(), cluster(), [], [], ("a4", "a5"), "a1", "a2", "block=b1", "",
                 id="the-lost-nodes-own-subblock-before-others"),
    pytest.param(request(required="block"), cluster(), [bound("x", "a2x"), bound("y", "a3")], [], ("a1", "a4"), "a2", "a5",
                 "block=b1", "", id="a-busy-node-is-skipped"),
    pytest.param(request(required="block"), cluster(node("a3", "b1", "s1", quarantined=True)), [bound("x", "a2x")],
                 [Reservation("other/gang", "a5", {GPU: 8})], ("a1", "a4"), "a2", None, "block=b1",
                 "no free node in block=b1 (2 too little nvidia.com/gpu, 1 quarantined)",
                 id="quarantined-and-reserved-nodes-leave-none"),
    pytest.param(request(required="block"), cluster(node("a3", "b1", "s1", ready=False), node("a2x", "b1", "s1", ready=False),
                                                    node("a5", "b1", "s2", unschedulable=True)),
                 [], [], ("a1", "a4"), "a2", None, "block=b1", "no free node in block=b1",
                 id="not-ready-and-cordoned-leave-none"),
    pytest.param(request(required="block"), cluster(), [], [], ("a1", "c1"), "a2", None, "",
                 "the gang's nodes do not share one block", id="required-level-already-broken"),
    pytest.param(request(), cluster(), [], [], ("a1", "c1"), "a2", "a2x", "", "",
                 id="no-shared-domain-the-whole-cluster"),
    pytest.param(request(preferred="subblock"), cluster(*(node(n, "b1", "s1", ready=False) for n in ("a3", "a4", "a5"))),
                 [], [], ("a1", "a2"), "a2x", "c1", "", "", id="preferred-widens-past-the-block"),
    pytest.param(request(node_selector={"pool": "x"}), cluster(), [], [], ("a1", "a4"), "a2", None, "",
                 "no free node in the cluster (5 nodeSelector mismatch)", id="selector-mismatch"),
])
def test_spare_for(req, nodes, pods, held, keep, lost, spare, domain, reason):
    found = spare_for(req, nodes, pods, held, TopologyConfig(), keep, lost)
    assert (found.node, found.domain) == (spare, domain)
    assert reason in found.reason
