"""tests/provider_nodes.py: Node objects as the providers ship them, which the planner reads."""

from __future__ import annotations

from collections import Counter

import pytest

from localcluster.topology import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from phalanx.api.config import TopologyConfig
from phalanx.constants import FEATURE_RESTART_ALL_CONTAINERS
from phalanx.gang.inventory import NodeInfo, canonical_amount, nodes_from_list
from phalanx.gang.topology_presets import detect, kueue_levels
from tests import provider_nodes as pn

GKE_BLOCK, GKE_SUB, GKE_HOST = pn.GKE_KUEUE_LEVELS[:3]
AWS_L1, AWS_L2, AWS_L3 = pn.AWS_KUEUE_LEVELS[:3]
CLIQUE = "nvidia.com/gpu.clique"

# builder, its default layout's node count, the labels of its levels (coarsest first), what auto
# detection calls it, the GPU taint's key, GPUs per node
CASES = [
    (pn.gke_a3_nodes, 16, (GKE_BLOCK, GKE_SUB, GKE_HOST), "gke", "nvidia.com/gpu", 8),
    (pn.eks_p5_nodes, 16, (AWS_L1, AWS_L2, AWS_L3), "aws", "nvidia.com/gpu", 8),
    (pn.aks_nd_nodes, 4, (), "none", "sku", 8),
    (pn.gb200_nodes, 36, (CLIQUE,), "nvlink", "nvidia.com/gpu", 4),
]
IDS = [case[0].__name__ for case in CASES]


def domain_changes(nodes: list[NodeInfo], label: str) -> int:
    """How often the domain changes walking the nodes in name order."""
    values = [n.labels[label] for n in sorted(nodes, key=lambda n: n.name)]
    return sum(a != b for a, b in zip(values, values[1:], strict=False))


@pytest.mark.parametrize(("make", "count", "levels", "preset", "taint", "gpus"), CASES, ids=IDS)
def test_nodes_parse_as_the_planner_reads_them(make, count, levels, preset, taint, gpus):
    raw = make()
    assert all(n["apiVersion"] == "v1" and n["kind"] == "Node" for n in raw)
    infos = [NodeInfo.from_node(n) for n in raw]
    names = [n.name for n in infos]
    assert len(infos) == count and len(set(names)) == count
    assert names == sorted(names)  # as the API server lists them
    for node, info in zip(raw, infos, strict=True):
        assert info.ready and not info.unschedulable
        assert info.labels["kubernetes.io/hostname"] == info.name
        assert [t.key for t in info.taints] == [taint] and info.taints[0].effect == "NoSchedule"
        assert info.allocatable["nvidia.com/gpu"] == gpus
        capacity = node["status"]["capacity"]
        for resource in ("memory", "ephemeral-storage"):
            assert info.allocatable[resource] < canonical_amount(resource, capacity[resource])
        assert info.allocatable["cpu"] <= canonical_amount("cpu", capacity["cpu"])
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
        assert FEATURE_RESTART_ALL_CONTAINERS in node["status"]["declaredFeatures"]  # 1.36's default
        assert "kwok.x-k8s.io/node" not in node["metadata"]["annotations"]
    found = detect(TopologyConfig(), infos)
    assert found.preset == preset
    assert len(found.unlabelled) == (count if preset == "none" else 0)  # AKS: all reported unlabelled
    assert [lvl.label for lvl in found.levels][:-1] == [lbl for lbl in levels if lbl != GKE_HOST]


@pytest.mark.parametrize(("make", "count", "levels", "preset", "taint", "gpus"),
                         [c for c in CASES if c[2]], ids=[i for i, c in zip(IDS, CASES, strict=True) if c[2]])
def test_names_follow_no_topology(make, count, levels, preset, taint, gpus):
    """Sorted by name, the nodes of one domain are not contiguous at any level with more than
    one domain: the order of names tells the planner nothing."""
    infos = nodes_from_list(pn.node_list(make()))
    for label in levels:
        domains = {n.labels[label] for n in infos}
        if 1 < len(domains) < len(infos):
            assert domain_changes(infos, label) > len(domains) - 1, label


def test_gke_layout():
    infos = nodes_from_list(pn.gke_a3_nodes(blocks=3, subblocks_per_block=2, hosts_per_subblock=5))
    assert len(infos) == 30
    assert Counter(n.labels[GKE_BLOCK] for n in infos) == Counter({b: 10 for b in {n.labels[GKE_BLOCK] for n in infos}})
    subblocks = Counter(n.labels[GKE_SUB] for n in infos)
    assert len(subblocks) == 6 and set(subblocks.values()) == {5}
    assert len({n.labels[GKE_HOST] for n in infos}) == 30  # an A3 VM is a whole host
    # each sub-block sits in one block
    assert all(len({n.labels[GKE_BLOCK] for n in infos if n.labels[GKE_SUB] == s}) == 1 for s in subblocks)
    node = infos[0]
    assert node.labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-mega-80gb"
    assert node.labels["node.kubernetes.io/instance-type"] == "a3-megagpu-8g"
    assert node.taints[0].value == "present"
    assert node.allocatable["cpu"] == 208_000 - 590  # GKE's CPU reservation for 208 cores
    high = nodes_from_list(pn.gke_a3_nodes(1, 1, 1, machine="a3-highgpu-8g"))[0]
    assert high.labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    names = [n.name for n in infos]
    group = names[0].split("-")[-2]
    assert all(n.startswith("gke-a3-pool-") and n.split("-")[-2] == group and len(n.split("-")[-1]) == 4
               for n in names)


def test_eks_layout():
    infos = nodes_from_list(pn.eks_p5_nodes(layer1=2, layer2_per_l1=2, layer3_per_l2=3, hosts_per_l3=2))
    assert len(infos) == 24
    assert Counter(Counter(n.labels[AWS_L1] for n in infos).values()) == {12: 2}
    assert Counter(Counter(n.labels[AWS_L2] for n in infos).values()) == {6: 4}
    assert Counter(Counter(n.labels[AWS_L3] for n in infos).values()) == {2: 12}
    assert all(n.labels[AWS_L3].startswith("nn-") and len(n.labels[AWS_L3]) == 20 for n in infos)
    assert all(n.name.startswith("ip-10-0-") and n.name.endswith(".ec2.internal") for n in infos)
    node = infos[0]
    assert node.allocatable["vpc.amazonaws.com/efa"] == 32
    assert node.labels["eks.amazonaws.com/nodegroup"] == "p5-training"
    assert (node.taints[0].key, node.taints[0].value) == ("nvidia.com/gpu", "true")
    karpenter = nodes_from_list(pn.eks_p5_nodes(1, 1, 1, 1, provisioner="karpenter", region="us-west-2",
                                                zone="us-west-2b", taint_value=None))[0]
    assert karpenter.labels["karpenter.sh/nodepool"] == "p5-training"
    assert "eks.amazonaws.com/nodegroup" not in karpenter.labels
    assert karpenter.name.endswith(".us-west-2.compute.internal") and karpenter.taints[0].value == ""


def test_aks_layout():
    infos = nodes_from_list(pn.aks_nd_nodes(count=40, pool="ndh100"))
    assert len({n.name for n in infos}) == 40
    assert all(n.name.startswith("aks-ndh100-") and len(n.name.split("-")[2]) == 8 for n in infos)
    assert "aks-ndh100-" + infos[0].name.split("-")[2] + "-vmss00000a" in {n.name for n in infos}
    node = infos[0]
    assert node.labels["kubernetes.azure.com/agentpool"] == "ndh100"
    assert node.labels["kubernetes.azure.com/accelerator"] == "nvidia"
    assert node.labels["node.kubernetes.io/instance-type"] == "Standard_ND96isr_H100_v5"
    assert (node.taints[0].key, node.taints[0].value) == ("sku", "gpu")
    assert not any(label.startswith(("cloud.google.com/gce-topology", "topology.k8s.aws/", "nvidia.com/gpu.clique"))
                   for label in node.labels)
    assert detect(TopologyConfig(), infos).preset == "none"


def test_gb200_layout():
    infos = nodes_from_list(pn.gb200_nodes(racks=3, trays_per_rack=18))
    assert len(infos) == 54
    cliques = Counter(n.labels[CLIQUE] for n in infos)
    assert len(cliques) == 3 and set(cliques.values()) == {18}  # one NVL72 rack: 18 trays x 4 GPUs
    assert all(n.allocatable["nvidia.com/gpu"] == 4 and n.labels["kubernetes.io/arch"] == "arm64" for n in infos)
    uuid_part, clique_id = next(iter(cliques)).rsplit(".", 1)
    assert len(uuid_part) == 36 and clique_id == "1"
    assert all(n.name.startswith("gb200-") for n in infos)
    node = infos[0]
    assert node.labels["nvidia.com/gpu.present"] == "true"
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert node.labels["nvidia.com/gpu.count"] == "4"
    assert (node.taints[0].key, node.taints[0].value) == ("nvidia.com/gpu", "")
    # two NVLink partitions per rack: same ClusterUUID, CliqueIDs 1 and 2, 9 trays each
    split = nodes_from_list(pn.gb200_nodes(racks=1, trays_per_rack=18, cliques_per_rack=2, taint_value="present"))
    parts = Counter(n.labels[CLIQUE] for n in split)
    assert sorted(c.rsplit(".", 1)[1] for c in parts) == ["1", "2"] and set(parts.values()) == {9}
    assert len({c.rsplit(".", 1)[0] for c in parts}) == 1
    assert split[0].taints[0].value == "present"
    with pytest.raises(ValueError):
        pn.gb200_nodes(racks=1, trays_per_rack=18, cliques_per_rack=4)


@pytest.mark.parametrize("make", [case[0] for case in CASES], ids=IDS)
def test_deterministic_and_kwok(make):
    assert make() == make()
    fake = make(kwok=True)
    assert all(n["metadata"]["annotations"][KWOK_ANNOTATION] == KWOK_ANNOTATION_VALUE == "fake" for n in fake)
    plain = make()
    for a, b in zip(fake, plain, strict=True):
        assert not set(pn.SERVER_SET) & set(a["metadata"])  # the API server refuses them on create
        a["metadata"]["annotations"].pop(KWOK_ANNOTATION)
        for key in pn.SERVER_SET:
            b["metadata"].pop(key)
        assert a == b


def test_node_list_is_kubectls_list():
    nodes = pn.gke_a3_nodes(1, 2, 2) + pn.aks_nd_nodes(2)
    listed = pn.node_list(reversed(nodes))
    assert listed["apiVersion"] == "v1" and listed["kind"] == "List"
    assert [n["metadata"]["name"] for n in listed["items"]] == sorted(n["metadata"]["name"] for n in nodes)
    assert len(nodes_from_list(listed)) == 6


def test_kueue_topology():
    obj = pn.kueue_topology("gke-default", pn.GKE_KUEUE_LEVELS)
    assert obj == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "gke-default"},
                   "spec": {"levels": [{"nodeLabel": label} for label in pn.GKE_KUEUE_LEVELS]}}
    assert [lvl.label for lvl in kueue_levels(obj)] == list(pn.GKE_KUEUE_LEVELS)
    aws = pn.kueue_topology("aws", pn.AWS_KUEUE_LEVELS, api_version="kueue.x-k8s.io/v1beta1")
    assert aws["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    infos = nodes_from_list(pn.eks_p5_nodes())
    assert detect(TopologyConfig(preset="kueue").with_kueue_topologies([aws]), infos).preset == "kueue:aws"
    for bad in ([], ["kubernetes.io/hostname", "a/b"], ["a/b", "a/b"], [f"l/{i}" for i in range(17)]):
        with pytest.raises(ValueError):
            pn.kueue_topology("bad", bad)
