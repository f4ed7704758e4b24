"""tests/provider_nodes.py builds nodes the planner reads as the providers ship them."""

from __future__ import annotations

import pytest

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import NodeInfo, nodes_from_list
from phalanx.gang.topology import Topology
from phalanx.gang.topology_presets import detect
from tests import provider_nodes as pn

CASES = [
    (pn.gke_a3_nodes, {}, 16, "gke", "nvidia.com/gpu"),
    (pn.eks_p5_nodes, {}, 16, "aws", "nvidia.com/gpu"),
    (pn.aks_nd_nodes, {}, 4, "none", "sku"),
    (pn.gb200_nodes, {}, 36, "nvlink", "nvidia.com/gpu"),
]


@pytest.mark.parametrize(("make", "kw", "count", "preset", "taint"), CASES)
def test_shapes(make, kw, count, preset, taint):
    nodes = make(**kw)
    infos = nodes_from_list(pn.node_list(nodes))
    names = [n.name for n in infos]
    assert len(infos) == count and len(set(names)) == count
    assert all(isinstance(n, NodeInfo) and n.ready and n.taints[0].key == taint for n in infos)
    found = detect(TopologyConfig(), infos)
    assert found.preset == preset
    # names in no topology order: sorting them by name does not follow the domains
    topo = Topology.build(infos, list(found.levels))
    if len(found.levels) > 1:
        assert sorted(names) != topo.order(names)


def test_domain_counts():
    infos = nodes_from_list(pn.gke_a3_nodes(blocks=2, subblocks_per_block=2, hosts_per_subblock=4))
    subs = {n.labels["cloud.google.com/gce-topology-subblock"] for n in infos}
    assert len(subs) == 4
    trays = nodes_from_list(pn.gb200_nodes(racks=2, trays_per_rack=18))
    assert sorted({n.labels["nvidia.com/gpu.clique"] for n in trays}) and len({n.labels["nvidia.com/gpu.clique"] for n in trays}) == 2
    assert all(n.allocatable["nvidia.com/gpu"] == 4 for n in trays)
    assert pn.gke_a3_nodes(kwok=True)[0]["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
