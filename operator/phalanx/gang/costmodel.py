"""Alpha-beta cost model of gradient allreduce over a placement, plus ZeRO memory per GPU.

Link figures come from the topology levels (``OperatorConfig.topology.levels``):

- two nodes whose paths first differ at level i talk across level i: bandwidth
  ``bandwidth_gbps[i] / oversubscription[i]`` (Gb/s per node, bits: 8 Gb/s move 1 GB/s), latency
  ``latency_us[i]``; a node
  in an ``unknown`` domain is assumed to cross that level;
- GPUs of one node talk over NVLink (``intra_node_bandwidth_gbps`` per GPU).

Ranks follow the runtime's mesh order pp → dp → tp (tp innermost), so the data-parallel group
of (pp, tp) holds ranks ``pp·T·D + d·T + tp``; node rank k holds global ranks k·P … k·P+P−1.
A node's network bandwidth is shared by the DP groups it hosts (P / g of them, g = the group's
ranks on that node).

- ring (flat) over n ranks at the bottleneck: t = 2(n−1)/n · S/B + 2(n−1)·α
- hierarchical: reduce-scatter in node, allreduce of S/g across m nodes, all-gather in node:
  t = 2[(g−1)/g · S/B_nvl + (g−1)α_nvl] + 2(m−1)/m · (S/g)/(B/g) + 2(m−1)·α

S = 4 · params / (tensor · pipeline) bytes (fp32 gradients of one model shard).
ZeRO (mixed-precision Adam, 16 bytes per parameter, arXiv 1910.02054), Ψ = params / (tp · pp):
stage 0: 16Ψ, 1: 4Ψ + 12Ψ/N, 2: 2Ψ + 14Ψ/N, 3: 16Ψ/N, N = the sharding degree (dp / replicate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from phalanx.api.config import TopologyConfig, TopologyLevel
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.topology import UNKNOWN, Topology
from phalanx_common.presets import resolve_shape

GBIT = 1e9 / 8  # bytes per second in one Gb/s: every bandwidth figure is in Gb/s, as links are rated
US = 1e-6


@dataclass(frozen=True)
class Link:
    level: str  # level name crossed, or "nvlink" inside one node
    bandwidth_gbps: float  # Gb/s, effective, after oversubscription
    latency_us: float


@dataclass(frozen=True)
class AllreduceEstimate:
    bytes: int
    ranks: int  # n: ranks in one DP group
    nodes: int  # m: nodes spanned by the slowest DP group
    ranks_per_node: int  # g
    bottleneck: Link
    ring_seconds: float
    hierarchical_seconds: float


def model_params(spec: Any) -> int | None:
    """Parameter count of the job's built-in model (None for user entrypoints and pretrained models,
    whose shape is in a config.json on a volume the operator does not read)."""
    model = getattr(spec, "model", None)
    if model is None or not model.preset:
        return None
    return resolve_shape(model.preset, model.overrides.as_dict()).num_params()


def gradient_bytes(params: int, tensor: int = 1, pipeline: int = 1) -> int:
    """fp32 gradient bytes of one model shard: 4 · params / (tensor · pipeline)."""
    return 4 * params // (tensor * pipeline)


def zero_memory_per_gpu(params: int, stage: int, tensor: int = 1, pipeline: int = 1,
                        shard: int = 1) -> float:
    """Bytes of model state (params + grads + Adam) per GPU for a ZeRO stage."""
    psi = params / (tensor * pipeline)
    degree = max(1, shard)
    if stage == 0:
        return 16 * psi
    if stage == 1:
        return 4 * psi + 12 * psi / degree
    if stage == 2:
        return 2 * psi + 14 * psi / degree
    if stage == 3:
        return 16 * psi / degree
    raise ValueError(f"ZeRO stage must be 0-3, got {stage}")


def link_between(topo: Topology, nodes: Sequence[str], config: TopologyConfig) -> Link:
    """The slowest link a collective over ``nodes`` must cross."""
    nodes = list(dict.fromkeys(nodes))
    if len(nodes) <= 1:
        return Link("nvlink", config.intra_node_bandwidth_gbps, config.intra_node_latency_us)
    paths = [topo.paths[node] for node in nodes]
    crossed: list[Link] = []
    for index, lvl in enumerate(topo.levels):
        if len({path[: index + 1] for path in paths}) > 1 or any(path[index] == UNKNOWN for path in paths):
            crossed.append(Link(lvl.name, lvl.bandwidth_gbps / lvl.oversubscription, lvl.latency_us))
    # Distinct nodes always differ at the finest level, so ``crossed`` is never empty.
    slowest = min(crossed, key=lambda link: link.bandwidth_gbps)
    return replace(slowest, latency_us=max(link.latency_us for link in crossed))


def ring_seconds(size: float, ranks: int, link: Link) -> float:
    """The flat ring over ``ranks`` (n in the module's formula)."""
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) / ranks * size / (link.bandwidth_gbps * GBIT) + 2 * (ranks - 1) * link.latency_us * US


def hierarchical_seconds(size: float, nodes: int, per_node: int, net: Link, nvlink: Link) -> float:
    """In-node reduce-scatter, allreduce across ``nodes`` (m), in-node all-gather; ``per_node``
    ranks of the group on each node (g)."""
    seconds = 0.0
    if per_node > 1:
        seconds += 2 * ((per_node - 1) / per_node * size / (nvlink.bandwidth_gbps * GBIT)
                        + (per_node - 1) * nvlink.latency_us * US)
    if nodes > 1:
        seconds += (2 * (nodes - 1) / nodes * (size / per_node) / (net.bandwidth_gbps * GBIT / per_node)
                    + 2 * (nodes - 1) * net.latency_us * US)
    return seconds


def dp_groups(world: int, procs_per_node: int, tensor: int, pipeline: int) -> list[list[int]]:
    """Node ranks of each DP group's ranks (mesh order pp → dp → tp), one list per group."""
    dp = world // (tensor * pipeline)
    groups = []
    for pp in range(pipeline):
        for tp in range(tensor):
            groups.append([(pp * tensor * dp + dp_rank * tensor + tp) // procs_per_node for dp_rank in range(dp)])
    return groups


def allreduce_estimate(
    nodes: Sequence[str],
    topo: Topology,
    config: TopologyConfig,
    *,
    size_bytes: int,
    procs_per_node: int,
    tensor: int = 1,
    pipeline: int = 1,
) -> AllreduceEstimate:
    """Predicted allreduce of ``size_bytes`` per DP group for node-ranks ``nodes``; the slowest
    group decides (all groups run at once)."""
    world = len(nodes) * procs_per_node
    nvlink = Link("nvlink", config.intra_node_bandwidth_gbps, config.intra_node_latency_us)
    best: AllreduceEstimate | None = None
    seen: set[tuple] = set()
    for group in dp_groups(world, procs_per_node, tensor, pipeline):
        group_nodes = [nodes[rank] for rank in group]
        sig = tuple(group_nodes)
        if sig in seen:
            continue
        seen.add(sig)
        per_node: dict[str, int] = {}
        for node in group_nodes:
            per_node[node] = per_node.get(node, 0) + 1
        spanned = len(per_node)
        ranks_per_node = max(per_node.values())
        link = link_between(topo, list(per_node), config)
        if spanned > 1:
            share = max(1, procs_per_node // ranks_per_node)  # DP groups sharing each node's NICs
            link = replace(link, bandwidth_gbps=link.bandwidth_gbps / share)
        ranks = len(group_nodes)
        est = AllreduceEstimate(
            bytes=size_bytes, ranks=ranks, nodes=spanned, ranks_per_node=ranks_per_node, bottleneck=link,
            ring_seconds=ring_seconds(size_bytes, ranks, link),
            hierarchical_seconds=hierarchical_seconds(size_bytes, spanned, ranks_per_node, link, nvlink),
        )
        if best is None or est.ring_seconds > best.ring_seconds:
            best = est
    assert best is not None
    return best


def compact_nodes(count: int, nodes: Sequence[NodeInfo], topo: Topology,
                  requests: dict[str, int] | None = None) -> list[str] | None:
    """Node-ranks of the most compact placement of ``count`` nodes on an empty cluster of the
    same shape (every node ready, nothing running, allocatable ≥ the request)."""
    from phalanx.gang.planner import GangRequest, plan_gang

    empty = [replace(node, ready=True, unschedulable=False, taints=()) for node in nodes]
    req = GangRequest(key="lower-bound", count=count, requests=requests or {})
    res = plan_gang(req, empty, topology=topo, free={node.name: dict(node.allocatable) for node in empty})
    return getattr(res, "nodes", None)


@dataclass(frozen=True)
class CostReport:
    params: int | None
    gradient_bytes: int | None
    estimate: AllreduceEstimate | None
    lower_bound: AllreduceEstimate | None
    lower_bound_span: dict[str, int] | None
    zero_bytes_per_gpu: float | None


def cost_report(
    spec: Any,
    placement_nodes: Sequence[str],
    nodes: Sequence[NodeInfo],
    topo: Topology,
    config: TopologyConfig | None = None,
    *,
    requests: dict[str, int] | None = None,
    params: int | None = None,
) -> CostReport:
    """Everything ``phalanx plan`` prints about a placement of ``spec``."""
    config = config or TopologyConfig(levels=list(topo.levels))
    parallelism = spec.parallelism
    params = params if params is not None else model_params(spec)
    if params is None:
        return CostReport(None, None, None, None, None, None)
    size = gradient_bytes(params, parallelism.tensor, parallelism.pipeline)
    kw = dict(size_bytes=size, procs_per_node=spec.procs_per_node, tensor=parallelism.tensor, pipeline=parallelism.pipeline)
    est = allreduce_estimate(placement_nodes, topo, config, **kw)
    lb_nodes = compact_nodes(len(placement_nodes), nodes, topo, requests)
    lb = allreduce_estimate(lb_nodes, topo, config, **kw) if lb_nodes else None
    dp = spec.data_degree
    shard = dp // parallelism.replicate if parallelism.replicate > 1 else dp
    mem = zero_memory_per_gpu(params, parallelism.zero, parallelism.tensor, parallelism.pipeline, shard)
    return CostReport(params, size, est, lb, topo.span(lb_nodes) if lb_nodes else None, mem)


def levels_config(levels: Sequence[TopologyLevel], base: TopologyConfig | None = None) -> TopologyConfig:
    base = base or TopologyConfig()
    return base.model_copy(update={"levels": list(levels)})
