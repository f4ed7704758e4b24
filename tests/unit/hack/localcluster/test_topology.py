"""Topology file -> Node manifests (pure logic; no cluster)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from localcluster import topology
from localcluster.binaries import default_bin_dir

REPO = Path(__file__).resolve().parents[4]
TOPO_DIR = REPO / "hack" / "cluster" / "topologies"


@pytest.mark.parametrize(
    "name,nodes,blocks,subblocks,racks",
    [("small-4", 4, 1, 1, 2), ("fattree-64", 64, 2, 8, 16), ("fattree3-1024", 1024, 4, 32, 128)],
)
def test_shipped_topologies(name, nodes, blocks, subblocks, racks):
    topo = topology.load_topology(name)
    ms = topology.node_manifests(topo)
    assert len(ms) == nodes == topo.node_count
    names = [m["metadata"]["name"] for m in ms]
    assert len(set(names)) == nodes
    labels = [m["metadata"]["labels"] for m in ms]
    assert len({lb[topology.LABEL_BLOCK] for lb in labels}) == blocks
    assert len({lb[topology.LABEL_SUBBLOCK] for lb in labels}) == subblocks
    assert len({lb[topology.LABEL_RACK] for lb in labels}) == racks
    # clique = rack in every shipped topology
    assert len({lb[topology.LABEL_GPU_CLIQUE] for lb in labels}) == racks
    for m in ms:
        lb = m["metadata"]["labels"]
        assert lb[topology.LABEL_HOSTNAME] == m["metadata"]["name"]
        assert lb[topology.LABEL_GPU_COUNT] == "8"
        assert m["metadata"]["annotations"][topology.KWOK_ANNOTATION] == "fake"
        assert m["status"]["capacity"][topology.RESOURCE_GPU] == "8"
        assert m["status"]["allocatable"] == m["status"]["capacity"]
        # rack/subblock labels are globally unique paths (nest inside their parents)
        assert lb[topology.LABEL_RACK].startswith(lb[topology.LABEL_SUBBLOCK] + "-")
        assert lb[topology.LABEL_SUBBLOCK].startswith(lb[topology.LABEL_BLOCK] + "-")


def test_load_by_path_and_name_agree():
    assert topology.load_topology(TOPO_DIR / "small-4.yaml") == topology.load_topology("small-4")
    assert topology.load_topology("small-4.yaml") == topology.load_topology("small-4")


def test_small4_exact_names_and_cliques():
    ms = topology.node_manifests(topology.load_topology("small-4"))
    got = [(m["metadata"]["name"], m["metadata"]["labels"][topology.LABEL_GPU_CLIQUE]) for m in ms]
    assert got == [
        ("gpu-b0-s0-r0-n0", "small-4.0"),
        ("gpu-b0-s0-r0-n1", "small-4.0"),
        ("gpu-b0-s0-r1-n0", "small-4.1"),
        ("gpu-b0-s0-r1-n1", "small-4.1"),
    ]


def test_clique_level_block_and_node():
    doc = {"name": "t", "layout": {"block": 2, "rack": 3, "node": 2}, "cliqueLevel": "block"}
    ms = topology.node_manifests(topology.parse_topology(doc))
    c = Counter(m["metadata"]["labels"][topology.LABEL_GPU_CLIQUE] for m in ms)
    assert c == {"t.0": 6, "t.1": 6}
    doc["cliqueLevel"] = "node"
    ms = topology.node_manifests(topology.parse_topology(doc))
    assert len({m["metadata"]["labels"][topology.LABEL_GPU_CLIQUE] for m in ms}) == 12


def test_missing_levels_default_to_one_and_overrides():
    doc = {
        "name": "cpu",
        "namePrefix": "cpu",
        "layout": {"node": 3},
        "node": {
            "gpu": 0,
            "cpu": 16,
            "memory": "64Gi",
            "labels": {"pool": "cpu"},
            "taints": [{"key": "pool", "value": "cpu", "effect": "NoSchedule"}],
        },
    }
    ms = topology.node_manifests(topology.parse_topology(doc))
    assert [m["metadata"]["name"] for m in ms] == ["cpu-b0-s0-r0-n0", "cpu-b0-s0-r0-n1", "cpu-b0-s0-r0-n2"]
    m = ms[0]
    assert topology.RESOURCE_GPU not in m["status"]["capacity"]
    assert topology.LABEL_GPU_CLIQUE not in m["metadata"]["labels"]
    assert m["status"]["capacity"]["cpu"] == "16"
    assert m["metadata"]["labels"]["pool"] == "cpu"
    assert m["spec"]["taints"] == [{"key": "pool", "value": "cpu", "effect": "NoSchedule"}]


def test_manifests_are_plain_yaml_serialisable():
    ms = topology.node_manifests(topology.load_topology("small-4"))
    assert yaml.safe_load(yaml.safe_dump(ms)) == ms


@pytest.mark.parametrize(
    "doc,msg",
    [
        ({}, "name"),
        ({"name": "x", "layout": {"pod": 2}}, "unknown layout"),
        ({"name": "x", "layout": {"node": 0}}, "positive"),
        ({"name": "x", "layout": {"node": True}}, "positive"),
        ({"name": "x", "cliqueLevel": "zone"}, "cliqueLevel"),
        ({"name": "x", "node": {"gpus": 8}}, "unknown node keys"),
        ({"name": "x", "node": {"gpu": -1}}, "non-negative"),
        ({"name": "x", "node": {"taints": [{"effect": "NoSchedule"}]}}, "taints"),
        ({"name": "x", "extra": 1}, "unknown topology keys"),
        ([], "mapping"),
    ],
)
def test_invalid(doc, msg):
    with pytest.raises(topology.TopologyError, match=msg):
        topology.parse_topology(doc)


def test_unknown_topology_name():
    with pytest.raises(topology.TopologyError, match="not found"):
        topology.load_topology("no-such-topology")


def test_bin_dir_is_build_sh_cache_dir(monkeypatch):
    """The Python side finds the binaries where build.sh puts them (build.sh owns the key)."""
    import subprocess

    hack = REPO / "hack" / "cluster"
    out = subprocess.run(
        ["bash", str(hack / "build.sh"), "--print-dir"],
        capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent-home"},
    ).stdout.strip()
    monkeypatch.delenv("PHALANX_BIN_DIR", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent-home")
    monkeypatch.delenv("PHALANX_CACHE", raising=False)
    assert default_bin_dir() == Path(out)
    assert Path(out).name.startswith("v1.")
