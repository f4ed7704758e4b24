import math

import pytest

from phalanx.api.config import TopologyConfig, TopologyLevel
from phalanx.api.types import TrainingJobSpec
from phalanx.gang.costmodel import (
    Link,
    allreduce_estimate,
    compact_nodes,
    cost_report,
    dp_groups,
    gradient_bytes,
    hierarchical_seconds,
    link_between,
    model_params,
    ring_seconds,
    zero_memory_per_gpu,
)
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.topology import Topology

CFG = TopologyConfig()
B, S, H = (lvl.label for lvl in CFG.resolved_levels)


def nodes(blocks=2, subs=2, hosts=2):
    out = []
    for b in range(blocks):
        for s in range(subs):
            for h in range(hosts):
                name = f"n{b}{s}{h}"
                out.append(NodeInfo(name, {B: f"b{b}", S: f"b{b}s{s}", H: name}, {"nvidia.com/gpu": 8}))
    return out


NODES = nodes()
TOPO = Topology.build(NODES, CFG.resolved_levels)


def test_ring_and_hierarchical_formulas():
    link = Link("x", 400.0, 5.0)  # Gb/s: 50 GB/s
    S_ = 1e9
    assert ring_seconds(S_, 1, link) == 0.0
    assert ring_seconds(S_, 4, link) == pytest.approx(2 * 3 / 4 * 1e9 / 50e9 + 2 * 3 * 5e-6)
    nv = Link("nvlink", 3600.0, 1.0)  # 450 GB/s
    got = hierarchical_seconds(S_, 4, 8, link, nv)
    want = 2 * (7 / 8 * 1e9 / 450e9 + 7 * 1e-6) + 2 * 3 / 4 * (1e9 / 8) / (50e9 / 8) + 2 * 3 * 5e-6
    assert got == pytest.approx(want)
    assert hierarchical_seconds(S_, 1, 1, link, nv) == 0.0


def test_link_between_levels_and_oversubscription():
    assert link_between(TOPO, ["n000"], CFG).level == "nvlink"
    assert link_between(TOPO, ["n000", "n001"], CFG) == Link("hostname", 400, 2)
    assert link_between(TOPO, ["n000", "n010"], CFG) == Link("subblock", 400, 5)
    # Crossing blocks: 200 Gb/s / oversubscription 2, worst latency 10 us.
    assert link_between(TOPO, ["n000", "n100"], CFG) == Link("block", 100, 10)


def test_unknown_domain_counts_as_crossing():
    ns = [NodeInfo("a", {H: "a"}, {}), NodeInfo("b", {H: "b"}, {})]
    t = Topology.build(ns, CFG.resolved_levels)
    assert link_between(t, ["a", "b"], CFG).level == "block"


def test_dp_groups_mesh_order():
    # 2 nodes × 4 procs, tp 2, pp 1 -> dp 4; group tp=0: ranks 0,2,4,6 -> nodes 0,0,1,1
    assert dp_groups(8, 4, 2, 1) == [[0, 0, 1, 1], [0, 0, 1, 1]]
    # pp 2: groups per (pp, tp)
    assert dp_groups(8, 4, 1, 2) == [[0, 0, 0, 0], [1, 1, 1, 1]]


def test_allreduce_estimate_shares_nics_between_groups():
    est = allreduce_estimate(["n000", "n001"], TOPO, CFG, size_bytes=10**9, procs_per_node=8, tensor=2)
    assert est.ranks == 8 and est.nodes == 2 and est.ranks_per_node == 4
    assert est.bottleneck.bandwidth_gbps == 200  # 400 Gb/s shared by 2 DP groups per node
    single = allreduce_estimate(["n000"], TOPO, CFG, size_bytes=10**9, procs_per_node=8)
    assert single.bottleneck.level == "nvlink" and single.nodes == 1
    assert single.ring_seconds == pytest.approx(2 * 7 / 8 * 1e9 / 450e9 + 14e-6)


def test_compact_beats_spread():
    kw = dict(size_bytes=4 * 10**9, procs_per_node=8)
    compact = allreduce_estimate(["n000", "n001", "n010", "n011"], TOPO, CFG, **kw)
    spread = allreduce_estimate(["n000", "n010", "n100", "n110"], TOPO, CFG, **kw)
    assert compact.ring_seconds < spread.ring_seconds
    assert spread.ring_seconds / compact.ring_seconds == pytest.approx(4.0, rel=0.01)


def test_gradient_bytes_and_zero_memory():
    assert gradient_bytes(8_000, 2, 2) == 8_000
    psi = 1_000_000
    assert zero_memory_per_gpu(psi, 0) == 16 * psi
    assert zero_memory_per_gpu(psi, 1, shard=4) == 4 * psi + 3 * psi
    assert zero_memory_per_gpu(psi, 2, shard=2) == 2 * psi + 7 * psi
    assert zero_memory_per_gpu(psi, 3, shard=16) == psi
    assert zero_memory_per_gpu(psi, 3, tensor=2, pipeline=2, shard=4) == psi
    with pytest.raises(ValueError):
        zero_memory_per_gpu(psi, 4)


def spec(**kw):
    base = dict(image="x", nodes=4, procs_per_node=8, resources={"gpus": 8}, model={"preset": "8b"})
    base.update(kw)
    return TrainingJobSpec(**base)


def test_model_params_and_report():
    s = spec(parallelism={"zero": 3})
    params = model_params(s)
    assert params == 8030261248
    rep = cost_report(s, ["n000", "n001", "n010", "n100"], NODES, TOPO, CFG)
    assert rep.gradient_bytes == 4 * params
    assert rep.zero_bytes_per_gpu == pytest.approx(16 * params / 32)
    assert rep.lower_bound_span == {"block": 1, "subblock": 2, "hostname": 4}
    assert rep.lower_bound.ring_seconds < rep.estimate.ring_seconds
    assert rep.estimate.bottleneck.level == "block"
    none = cost_report(TrainingJobSpec(image="x", command=["python", "t.py"]), ["n000"], NODES, TOPO, CFG)
    assert none.estimate is None and none.zero_bytes_per_gpu is None


def test_hsdp_shards_inside_replica_group():
    s = spec(parallelism={"zero": 3, "replicate": 2})
    rep = cost_report(s, ["n000", "n001", "n010", "n011"], NODES, TOPO, CFG)
    assert rep.zero_bytes_per_gpu == pytest.approx(16 * model_params(s) / 16)


def test_compact_nodes_ignores_usage_and_health():
    broken = [NodeInfo(n.name, n.labels, n.allocatable, ready=False) for n in NODES]
    assert compact_nodes(2, broken, TOPO) == ["n000", "n001"]
    assert compact_nodes(99, broken, TOPO) is None


def test_custom_level_figures():
    levels = [TopologyLevel(name="rack", label="r", bandwidth_gbps=10, latency_us=3, oversubscription=4),
              TopologyLevel(name="hostname", label=H, bandwidth_gbps=40, latency_us=1)]
    ns = [NodeInfo("a", {"r": "1", H: "a"}, {}), NodeInfo("b", {"r": "2", H: "b"}, {})]
    t = Topology.build(ns, levels)
    link = link_between(t, ["a", "b"], TopologyConfig(levels=levels))
    assert link == Link("rack", 2.5, 3) and math.isfinite(ring_seconds(1, 2, link))
    # Gb/s: a 400 Gb/s link moves 50 GB/s (issue: the figures were once read as GB/s)
    assert ring_seconds(50e9, 2, Link("x", 400, 0)) == pytest.approx(1.0)
