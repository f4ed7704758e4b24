import pytest

from phalanx.api.config import TopologyConfig, TopologyLevel
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.topology import UNKNOWN, Topology, topology_for, topology_levels

LEVELS = TopologyConfig().resolved_levels
B, S, H = (lvl.label for lvl in LEVELS)


def n(name, block=None, sub=None, host=True):
    labels = {}
    if block:
        labels[B] = block
    if sub:
        labels[S] = sub
    if host:
        labels[H] = name
    return NodeInfo(name=name, labels=labels, allocatable={})


def test_tree_paths_and_dfs_order():
    nodes = [n("n10", "b1", "s1"), n("n2", "b1", "s1"), n("n3", "b0", "s9"), n("n1", "b1", "s0")]
    t = Topology.build(nodes, LEVELS)
    assert t.paths["n2"] == ("b1", "s1", "n2")
    assert t.children[()] == [("b0",), ("b1",)]
    assert t.children[("b1",)] == [("b1", "s0"), ("b1", "s1")]
    assert t.order(["n10", "n1", "n2", "n3"]) == ["n3", "n1", "n2", "n10"]  # natural order n2 < n10
    assert t.span(["n10", "n2", "n1"]) == {"block": 1, "subblock": 2, "hostname": 3}
    assert t.counts(["n10", "n2"]) == {(): 2, ("b1",): 2, ("b1", "s1"): 2, ("b1", "s1", "n10"): 1, ("b1", "s1", "n2"): 1}


def test_same_name_under_different_parents_are_different_domains():
    t = Topology.build([n("a", "b0", "s0"), n("b", "b1", "s0")], LEVELS)
    assert t.span(["a", "b"])["subblock"] == 2


def test_missing_labels_go_to_unknown_and_host_falls_back_to_name():
    t = Topology.build([n("x", None, "s1", host=False), n("y", "b1", None)], LEVELS)
    assert t.paths["x"] == (UNKNOWN, "s1", "x")
    assert t.paths["y"] == ("b1", UNKNOWN, "y")
    assert Topology.is_unknown((UNKNOWN,)) and not Topology.is_unknown(("b1",))
    assert t.children[()][-1] == (UNKNOWN,)  # unknown sorts last


def test_level_index_by_name_or_label():
    t = Topology.build([n("a", "b", "s")], LEVELS)
    assert t.level_index("subblock") == 1 and t.level_index(S) == 1
    with pytest.raises(KeyError, match="unknown topology level 'rack'"):
        t.level_index("rack")
    assert t.describe(("b", "s")) == "block=b/subblock=s"


def test_topology_levels_override():
    lv = topology_levels(TopologyConfig(), ["subblock", "example.com/rack", H])
    assert [x.name for x in lv] == ["subblock", "rack", "hostname"]
    assert lv[1].label == "example.com/rack"
    assert topology_levels(TopologyConfig(), None) == TopologyConfig().resolved_levels
    with pytest.raises(ValueError):
        Topology.build([], [])


def test_single_level_topology():
    t = Topology.build([n("a"), n("b")], [TopologyLevel(name="hostname", label=H)])
    assert t.span(["a", "b"]) == {"hostname": 2}


def test_topology_for_reuses_a_build_only_for_the_same_node_objects_and_levels():
    nodes = [n("n1", "b1", "s1"), n("n2", "b1", "s2")]
    first = topology_for(nodes, LEVELS)
    assert topology_for(list(nodes), LEVELS) is first  # same objects, new list
    moved = [nodes[0], n("n2", "b2", "s2")]  # equal name, a new object: the node changed
    assert topology_for(moved, LEVELS).paths["n2"] == ("b2", "s2", "n2")
    assert topology_for(moved, LEVELS[1:]).depth == 2  # other levels
    assert topology_for(moved[:1], LEVELS).paths.keys() == {"n1"}  # a node gone
    for nodes_, levels in ((nodes, LEVELS), (moved, LEVELS[1:])):
        built = Topology.build(nodes_, levels)
        got = topology_for(nodes_, levels)
        assert (got.paths, got.children, got.members) == (built.paths, built.children, built.members)

