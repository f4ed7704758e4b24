"""Topology presets and their detection from node labels (gang/topology_presets.py)."""

from __future__ import annotations

import pytest

from phalanx.api.config import TopologyConfig
from phalanx.api.topology_levels import known_level_names
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.planner import GangRequest, Placement, plan_gang
from phalanx.gang.topology import Topology
from phalanx.gang.topology_presets import detect, kueue_levels

GPU = {"nvidia.com/gpu": 8, "pods": 110}
H = "kubernetes.io/hostname"
GKE_B, GKE_S = "cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"
AWS = [f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3)]
CLIQUE = "nvidia.com/gpu.clique"


def node(name, gpus=8, **labels):
    return NodeInfo(name, {H: name, **{k.replace("__", "/").replace("_", "."): v for k, v in labels.items()}},
                    {"nvidia.com/gpu": gpus, "pods": 110} if gpus else {"cpu": 8000, "pods": 110})


def gke(name, block, sub):
    return NodeInfo(name, {H: name, GKE_B: block, GKE_S: sub}, GPU)


def aws(name, l1, l2, l3):
    return NodeInfo(name, {H: name, AWS[0]: l1, AWS[1]: l2, AWS[2]: l3}, GPU)


def gb200(name, clique):
    return NodeInfo(name, {H: name, CLIQUE: clique}, {"nvidia.com/gpu": 4, "pods": 110})


PHX = {"phalanx.dev/topology-block": "b0", "phalanx.dev/topology-subblock": "s0"}


@pytest.mark.parametrize(("nodes", "config", "preset", "levels", "unlabelled"), [
    ([gke("g1", "b1", "s1"), gke("g2", "b1", "s2")], {}, "gke", ["block", "subblock", "hostname"], ()),
    ([aws("i1", "a", "b", "c")], {}, "aws", ["layer-1", "layer-2", "layer-3", "hostname"], ()),
    ([gb200("t1", "uuid.1"), gb200("t2", "uuid.2")], {}, "nvlink", ["clique", "hostname"], ()),
    # GKE A4X (GB200): cliques inside GKE's subblocks
    ([NodeInfo("x", {H: "x", GKE_B: "b", GKE_S: "s", CLIQUE: "c"}, GPU)], {}, "gke+nvlink",
     ["block", "subblock", "clique", "hostname"], ()),
    ([NodeInfo("p", {H: "p", **PHX}, GPU)], {}, "phalanx", ["block", "subblock", "hostname"], ()),
    # no labels at all: said so, every node its own domain
    ([NodeInfo("a", {H: "a"}, GPU), NodeInfo("b", {H: "b"}, GPU)], {}, "none", ["hostname"], ("a", "b")),
    # the most nodes decide; the accelerator nodes lacking the labels are named; CPU nodes are not counted
    ([gke("g1", "b", "s"), gke("g2", "b", "s"), NodeInfo("u", {H: "u"}, GPU), NodeInfo("cpu", {H: "cpu"}, {"cpu": 1})],
     {}, "gke", ["block", "subblock", "hostname"], ("u",)),
    # a named preset is used whatever the nodes carry
    ([gke("g1", "b", "s")], {"preset": "aws"}, "aws", ["layer-1", "layer-2", "layer-3", "hostname"], ("g1",)),
    # preset none means none: no cliques either
    ([gb200("t1", "uuid.1")], {"preset": "none"}, "none", ["hostname"], ("t1",)),
    # the admin's own levels: custom, no cliques added
    ([NodeInfo("r", {H: "r", "example.com/rack": "r1", CLIQUE: "c"}, GPU)],
     {"levels": [{"name": "rack", "label": "example.com/rack"}, {"name": "hostname", "label": H}]},
     "custom", ["rack", "hostname"], ()),
])
def test_detect(nodes, config, preset, levels, unlabelled):
    found = detect(TopologyConfig.model_validate(config), nodes)
    assert (found.preset, found.level_names, found.unlabelled) == (preset, levels, unlabelled)


def test_cluster_without_labels_is_reported_not_given_a_span():
    nodes = [NodeInfo(n, {H: n}, GPU) for n in ("a", "b", "c")]
    found = detect(TopologyConfig(), nodes)
    assert "no node carries topology labels" in found.describe()
    assert found.warning().startswith("3 of 3 nodes carry no topology labels")
    result = plan_gang(GangRequest("ns/j", 2, {"nvidia.com/gpu": 8, "pods": 1}), nodes, topology_config=list(found.levels))
    assert isinstance(result, Placement) and result.span == {"hostname": 2}


def test_span_leaves_out_a_level_some_nodes_lack():
    levels = list(detect(TopologyConfig(preset="gke"), []).levels)
    nodes = [gke("g1", "b", "s"), NodeInfo("u", {H: "u"}, GPU)]
    result = plan_gang(GangRequest("ns/j", 2, {"nvidia.com/gpu": 8, "pods": 1}), nodes, topology_config=levels)
    assert isinstance(result, Placement)
    assert result.span == {"hostname": 2}  # not "block 1, subblock 1": u's are unknown
    assert any("1 of 2 nodes carry no block label" in note for note in result.notes)


def test_a_gang_that_fits_one_nvlink_clique_stays_in_it():
    # 2 racks × 18 trays, names in no rack order: name order alone would mix the racks
    nodes = [gb200(f"gb200-{(i * 7919) % 1000:03d}", f"uuid.{i % 2}") for i in range(36)]
    found = detect(TopologyConfig(), nodes)
    topo = Topology.build(nodes, list(found.levels))
    result = plan_gang(GangRequest("ns/j", 18, {"nvidia.com/gpu": 4, "pods": 1}), nodes, topology=topo)
    assert isinstance(result, Placement) and result.span["clique"] == 1
    assert len({n.labels[CLIQUE] for n in nodes if n.name in result.nodes}) == 1


def test_kueue_topology_levels_and_auto_candidate():
    obj = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "gke-default"},
           "spec": {"levels": [{"nodeLabel": GKE_B}, {"nodeLabel": GKE_S}, {"nodeLabel": "example.com/rack"}]}}
    levels = kueue_levels(obj)
    assert [lvl.name for lvl in levels] == ["block", "subblock", "rack", "hostname"]
    assert levels[0].bandwidth_gbps == 1600  # a label a preset knows keeps its figures
    nodes = [NodeInfo("k", {H: "k", GKE_B: "b", GKE_S: "s", "example.com/rack": "r"}, GPU)]
    found = detect(TopologyConfig().with_kueue_topologies([obj]), nodes)
    assert found.preset == "kueue:gke-default" and found.level_names == ["block", "subblock", "rack", "hostname"]
    assert detect(TopologyConfig(preset="kueue", kueue_topology="other").with_kueue_topologies([obj]), nodes).preset == "none"


def test_bandwidths_are_gbps_with_nvlink_inside_a_clique():
    found = detect(TopologyConfig(), [gb200("t1", "c1")])
    clique, host = found.levels
    assert clique.bandwidth_gbps == 400 and host.bandwidth_gbps == 28800  # network across, NVLink inside


def test_level_names_a_job_may_use_before_nodes_are_known():
    auto = known_level_names(TopologyConfig())
    assert {"block", "subblock", "layer-3", "clique", "hostname", GKE_S} <= auto
    assert "layer-3" not in known_level_names(TopologyConfig(preset="gke"))
