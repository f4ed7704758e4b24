from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from phalanx.gang.inventory import (
    NodeInfo,
    PodUsage,
    Reservation,
    Taint,
    canonical_amount,
    format_amount,
    free_capacity,
    nodes_from_list,
    parse_quantity,
    pod_requests,
    pods_from_list,
    reservations_from_pods,
)


@pytest.mark.parametrize("q,expected", [
    ("500m", Decimal("0.5")), ("64Gi", Decimal(64 * 2**30)), ("1e3", Decimal(1000)), ("1E3", Decimal(1000)),
    ("2k", Decimal(2000)), ("1.5Gi", Decimal(3 * 2**29)), ("100n", Decimal("1E-7")), ("3u", Decimal("3E-6")),
    ("8", Decimal(8)), (8, Decimal(8)), (".5", Decimal("0.5")), ("-1", Decimal(-1)), ("+2M", Decimal(2_000_000)),
    ("1Ki", Decimal(1024)), ("1Ei", Decimal(2**60)), ("1e-3", Decimal("0.001")), ("12E+2", Decimal(1200)),
])
def test_parse_quantity_exact(q, expected):
    assert parse_quantity(q) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1Gb", "1.2.3", "Gi", "1 Gi", "1e", True, float("nan")])
def test_parse_quantity_rejects(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


@pytest.mark.parametrize("res,q,amount", [
    ("cpu", "500m", 500), ("cpu", "191500m", 191500), ("cpu", "2", 2000), ("cpu", "1n", 1),
    ("memory", "64Gi", 64 * 2**30), ("memory", "1.5k", 1500), ("memory", "0.1", 1),
    ("nvidia.com/gpu", "8", 8), ("rdma/rdma_shared_device_a", "1k", 1000),
])
def test_canonical_amount(res, q, amount):
    assert canonical_amount(res, q) == amount


@pytest.mark.parametrize("res,amount,text", [
    ("cpu", 16000, "16"), ("cpu", 500, "500m"), ("memory", 64 * 2**30, "64Gi"), ("memory", 1000, "1000"),
    ("memory", 0, "0"), ("nvidia.com/gpu", 128, "128"),
])
def test_format_amount(res, amount, text):
    assert format_amount(res, amount) == text


@given(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), st.integers(0, 2**62))
def test_format_roundtrip(res, amount):
    assert canonical_amount(res, format_amount(res, amount)) == amount


def node(name="n1", gpus="8", ready="True", taints=None, unschedulable=None, labels=None):
    spec = {}
    if taints:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {"kind": "Node", "metadata": {"name": name, "labels": labels or {"kubernetes.io/hostname": name}},
            "spec": spec,
            "status": {"allocatable": {"cpu": "191500m", "memory": "2063162832Ki", "nvidia.com/gpu": gpus, "pods": "110"},
                       "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]}}


def test_node_from_dict():
    n = NodeInfo.from_node(node(taints=[{"key": "k", "value": "v", "effect": "NoExecute"}], unschedulable=True))
    assert n.name == "n1" and n.ready and n.unschedulable
    assert n.allocatable == {"cpu": 191500, "memory": 2063162832 * 1024, "nvidia.com/gpu": 8, "pods": 110}
    assert n.taints == (Taint("k", "v", "NoExecute"),)
    assert not NodeInfo.from_node(node(ready="Unknown")).ready
    no_cond = node()
    del no_cond["status"]["conditions"]
    assert not NodeInfo.from_node(no_cond).ready


def test_nodes_from_list_skips_other_kinds():
    lst = {"kind": "List", "items": [node("a"), {"kind": "Pod", "metadata": {"name": "p"}}, node("b")]}
    assert [n.name for n in nodes_from_list(lst)] == ["a", "b"]


def pod(name="p", node_name="n1", phase="Running", containers=None, init=None, overhead=None, selector=None, labels=None):
    spec = {"containers": containers if containers is not None else
            [{"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    if selector:
        spec["nodeSelector"] = selector
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
            "spec": spec, "status": {"phase": phase}}


def test_pod_requests_sum_and_limits_default():
    p = pod(containers=[
        {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
        {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "c"},
    ])
    assert pod_requests(p) == {"cpu": 500, "memory": 2**30, "nvidia.com/gpu": 4, "pods": 1}


def test_pod_requests_init_sidecar_overhead():
    p = pod(
        containers=[{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        init=[
            {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
            {"name": "big-init", "resources": {"requests": {"cpu": "4", "memory": "512Mi"}}},
        ],
        overhead={"cpu": "100m"},
    )
    # cpu: max(1 + 0.2, 0.2 + 4) + 0.1 = 4.3; memory: max(1Gi, 512Mi) = 1Gi
    assert pod_requests(p) == {"cpu": 4300, "memory": 2**30, "pods": 1}


def test_free_capacity_counts_bound_live_pods_only():
    nodes = nodes_from_list([node("n1"), node("n2")])
    pods = pods_from_list([
        pod("run", "n1", "Running"), pod("pend-bound", "n1", "Pending"),
        pod("done", "n1", "Succeeded"), pod("failed", "n1", "Failed"),
        pod("unbound", None, "Pending"), pod("elsewhere", "gone-node", "Running"),
    ])
    free = free_capacity(nodes, pods)
    assert free["n1"]["nvidia.com/gpu"] == 4 and free["n1"]["cpu"] == 191500 - 2000 and free["n1"]["pods"] == 108
    assert free["n2"]["nvidia.com/gpu"] == 8


def test_reservations_subtracted_except_own_gang():
    nodes = nodes_from_list([node("n1")])
    res = [Reservation("ns/a", "n1", {"nvidia.com/gpu": 8}), Reservation("ns/b", "n1", {"nvidia.com/gpu": 2}),
           Reservation("ns/c", "missing", {"nvidia.com/gpu": 2})]
    assert free_capacity(nodes, (), res)["n1"]["nvidia.com/gpu"] == -2
    assert free_capacity(nodes, (), res, ignore_gang="ns/a")["n1"]["nvidia.com/gpu"] == 6


def test_pod_usage_counts():
    assert PodUsage.from_pod(pod()).counts
    assert not PodUsage.from_pod(pod(phase="Succeeded")).counts
    assert not PodUsage.from_pod(pod(node_name=None)).counts


def test_reservations_from_pinned_pods():
    pods = [
        pod("a-0", None, "Pending", selector={"kubernetes.io/hostname": "host-1"}, labels={"phalanx.dev/job-name": "a"}),
        pod("bound", "n1", "Running", selector={"kubernetes.io/hostname": "n1"}),
        pod("free", None, "Pending"),
        pod("dead", None, "Failed", selector={"kubernetes.io/hostname": "n1"}),
    ]
    res = reservations_from_pods(pods, hostname_to_node={"host-1": "node-1"})
    assert res == [Reservation("ns/a", "node-1", {"cpu": 1000, "nvidia.com/gpu": 2, "pods": 1})]


def test_cached_amounts_keep_types_apart_and_still_refuse():
    """canonical_amount is memoised: 1 and True hash alike, but True stays invalid."""
    assert canonical_amount("nvidia.com/gpu", 1) == 1
    for _ in range(2):  # a refusal is not cached as a value
        with pytest.raises(ValueError):
            canonical_amount("nvidia.com/gpu", True)
    assert canonical_amount("cpu", "1") == 1000 and canonical_amount("memory", "1") == 1


def test_nodes_parsed_once_pass_through():
    node = {"metadata": {"name": "n0"}, "status": {"allocatable": {"nvidia.com/gpu": "8"},
                                                   "conditions": [{"type": "Ready", "status": "True"}]}}
    parsed = nodes_from_list([node])
    assert nodes_from_list(parsed) == parsed and nodes_from_list(parsed)[0] is parsed[0]
