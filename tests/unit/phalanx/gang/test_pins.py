"""Pins by node affinity: written by the operator, read back by the inventory as reservations."""

from phalanx.gang.inventory import reservations_from_pods
from phalanx.gang.pins import pin_affinity, pinned_node


def pod(spec, phase="Pending"):
    return {"metadata": {"name": "p", "namespace": "ns", "labels": {"phalanx.dev/job-name": "j"}},
            "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}], **spec},
            "status": {"phase": phase}}


def test_pin_round_trip():
    assert pinned_node({"affinity": pin_affinity("node-7")}) == "node-7"
    assert pinned_node({}) is None
    assert pinned_node({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}}) is None


def test_pinned_unbound_pods_reserve_their_node():
    res = reservations_from_pods([pod({"affinity": pin_affinity("n1")})])
    assert [(r.gang, r.node, r.requests["nvidia.com/gpu"]) for r in res] == [("ns/j", "n1", 8)]
    assert reservations_from_pods([pod({"affinity": pin_affinity("n1"), "nodeName": "n1"})]) == []  # bound: usage
    assert reservations_from_pods([pod({"affinity": pin_affinity("n1")}, phase="Failed")]) == []
