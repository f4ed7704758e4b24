"""Tolerations as the cluster applies them (gang/tolerations.py): table-driven."""

from __future__ import annotations

import pytest

from phalanx.api.config import JobToleration, OperatorConfig
from phalanx.gang.inventory import NodeInfo, Taint
from phalanx.gang.planner import untolerated_taints
from phalanx.gang.tolerations import (
    extended_resource_tolerations,
    is_extended_resource,
    job_tolerations,
    with_cluster_tolerations,
)

GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SKU = JobToleration(key="sku", operator="Equal", value="gpu", effect="NoSchedule", when_requesting=["nvidia.com/gpu"])
ANY = JobToleration(key="example.com/pool", operator="Exists")


@pytest.mark.parametrize(("name", "extended"), [
    ("nvidia.com/gpu", True), ("rdma/rdma_shared_device_a", True), ("vpc.amazonaws.com/efa", True),
    ("cpu", False), ("memory", False), ("hugepages-2Mi", False), ("ephemeral-storage", False),
    ("kubernetes.io/batch", False), ("requests.nvidia.com/gpu", False), ("pods", False),
])
def test_extended_resource_names_as_kubernetes_defines_them(name, extended):
    assert is_extended_resource(name) is extended


def test_one_toleration_per_extended_resource_sorted():
    assert extended_resource_tolerations(["memory", "vpc.amazonaws.com/efa", "nvidia.com/gpu", "nvidia.com/gpu"]) == [
        GPU_TOL, {"key": "vpc.amazonaws.com/efa", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("own", "requested", "defaults", "want"), [
    # a CPU job: nothing added
    ([], {"cpu"}, [], []),
    # GKE / GPU Operator: the GPU taint tolerated because the pod requests GPUs
    ([], {"cpu", "nvidia.com/gpu"}, [], [(GPU_TOL, "requests nvidia.com/gpu (as ExtendedResourceToleration adds)")]),
    # the job already tolerates it: once, from the spec
    ([GPU_TOL], {"nvidia.com/gpu"}, [], [(GPU_TOL, "spec.tolerations[0]")]),
    # AKS: sku=gpu from the config, only for GPU pods
    ([], {"nvidia.com/gpu"}, [SKU], [(GPU_TOL, "requests nvidia.com/gpu (as ExtendedResourceToleration adds)"),
                                     (SKU.to_kube(), "operator config jobTolerations[0]")]),
    ([], {"cpu"}, [SKU], []),
    ([], {"cpu"}, [SKU, ANY], [(ANY.to_kube(), "operator config jobTolerations[1]")]),
])
def test_job_tolerations_and_their_sources(own, requested, defaults, want):
    got = job_tolerations(own, requested, defaults)
    assert [(dict(t.toleration), t.source) for t in got] == want


def test_gpu_nodes_tainted_as_the_clouds_taint_them_are_tolerated():
    gke = NodeInfo("gke", {}, {}, taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))
    aks = NodeInfo("aks", {}, {}, taints=(Taint("sku", "gpu", "NoSchedule"),))
    tolerations = [t.toleration for t in job_tolerations([], {"nvidia.com/gpu"}, [SKU])]
    assert untolerated_taints(gke, tolerations) == [] and untolerated_taints(aks, tolerations) == []
    assert untolerated_taints(aks, [t.toleration for t in job_tolerations([], {"nvidia.com/gpu"})]) == ["sku"]


def test_rendered_pod_gets_them_from_its_own_containers():
    pod = {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}],
                    "initContainers": [{"name": "i", "resources": {"limits": {"rdma/ib": 1}}}],
                    "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": 8, "cpu": "4"}}}]}}
    keys = [t.get("key") for t in with_cluster_tolerations(pod, [SKU])["spec"]["tolerations"]]
    assert keys == ["a", "nvidia.com/gpu", "rdma/ib", "sku"]
    cpu = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    assert "tolerations" not in with_cluster_tolerations(cpu)["spec"]


@pytest.mark.parametrize(("toleration", "policy", "error"), [
    ({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}, {},
     "jobTolerations[0].key: tolerating node-role.kubernetes.io/control-plane is not allowed by policy.default"),
    ({"operator": "Exists"}, {}, "jobTolerations[0]: a toleration without a key tolerates every taint"),
    ({"key": "sku", "operator": "Exists"},
     {"namespaces": [{"matchLabels": {"team": "a"}, "rules": {"forbiddenTolerationKeys": ["sku"]}}]},
     "not allowed by policy.namespaces[0].rules.forbiddenTolerationKeys"),
])
def test_config_tolerations_obey_the_policy_for_every_namespace(toleration, policy, error):
    with pytest.raises(ValueError, match=error.replace("[", r"\[").replace("]", r"\]")):
        OperatorConfig.model_validate({"jobTolerations": [toleration], "policy": policy})
    OperatorConfig.model_validate({"jobTolerations": [{"key": "sku", "operator": "Exists"}]})
