"""The namespaced-mode pod reflector's pure parts: entries, events, expiry, freed capacity."""

from __future__ import annotations

import json

import pytest

from phalanx.gang.admission import admit
from phalanx.podreflector import Expired, apply_event, usage_entry, watch_event


def pod(name, ns="other", node="n1", phase="Running", gpus=8, **spec):
    return {"metadata": {"name": name, "namespace": ns, "labels": {"app": "x"}, "resourceVersion": "7"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "resources": {
                "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}], **spec},
            "status": {"phase": phase, "podIP": "10.0.0.1"}}


def test_entry_keeps_only_what_the_planner_reads():
    e = usage_entry(pod("a", affinity={"nodeAffinity": {}}))
    assert e["metadata"] == {"name": "a", "namespace": "other", "labels": {"app": "x"}}
    assert e["spec"]["nodeName"] == "n1" and e["spec"]["affinity"] == {"nodeAffinity": {}}
    assert e["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert e["status"] == {"phase": "Running"}


def test_events_add_modify_delete_and_report_freed_capacity():
    store = {}
    assert apply_event(store, "ADDED", usage_entry(pod("a"))) is False
    assert apply_event(store, "MODIFIED", usage_entry(pod("a"))) is False
    assert list(store) == [("other", "a")]
    assert apply_event(store, "MODIFIED", usage_entry(pod("a", phase="Succeeded"))) is True  # ended: freed
    assert apply_event(store, "DELETED", usage_entry(pod("a", phase="Succeeded"))) is False  # already free
    assert store == {}
    apply_event(store, "ADDED", usage_entry(pod("b")))
    assert apply_event(store, "DELETED", usage_entry(pod("b"))) is True
    apply_event(store, "ADDED", usage_entry(pod("gated", node=None, phase="Pending")))
    assert apply_event(store, "DELETED", usage_entry(pod("gated", node=None, phase="Pending"))) is False


def test_same_name_in_two_namespaces_are_two_pods():
    store = {}
    apply_event(store, "ADDED", usage_entry(pod("a", ns="x")))
    apply_event(store, "ADDED", usage_entry(pod("a", ns="y")))
    assert len(store) == 2


def test_watch_lines():
    assert watch_event(json.dumps({"type": "ADDED", "object": pod("a")}))[0] == "ADDED"
    kind, obj = watch_event(json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}))
    assert kind == "BOOKMARK" and obj["metadata"]["resourceVersion"] == "99"
    with pytest.raises(Expired):
        watch_event(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}))
    with pytest.raises(RuntimeError):
        watch_event(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 500}}))


def test_another_namespaces_pod_makes_its_node_full_for_the_planner():
    """The point of the reflector: its entries are capacity the planner subtracts."""
    from phalanx.api.config import OperatorConfig
    from phalanx.gang.planner import GangRequest

    nodes = [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
              "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
                         "conditions": [{"type": "Ready", "status": "True"}]}} for n in ("n1", "n2")]
    gang = GangRequest(key="team/job", count=2, requests={"nvidia.com/gpu": 8, "pods": 1})
    free = admit([gang], nodes, [], OperatorConfig()).results["team/job"]
    full = admit([gang], nodes, [usage_entry(pod("hog", node="n1"))], OperatorConfig()).results["team/job"]
    assert getattr(free, "nodes", None) and not getattr(full, "nodes", None)
