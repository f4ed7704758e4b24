"""Predicted gradient allreduce of four placements on three fragmented clusters.

Cluster: 4 blocks × 8 subblocks × 16 hosts = 512 nodes of 8 GPUs, default link figures
(block 200 Gb/s with 2:1 oversubscription, subblock 400 Gb/s, host 400 Gb/s). Job: 64 nodes × 8 GPUs,
8B model, ZeRO-1 (pure DP, 32 GB fp32 gradients). Placements compared:

- phalanx: ``plan_gang`` (span-minimising, best fit, DFS ranks)
- lower bound: the most compact placement of 64 nodes on the empty cluster
- random: 64 random feasible nodes, ranks in name order
- spread: kube-scheduler-like LeastAllocated scoring, one pod at a time (highest free-GPU
  fraction first, ties broken at random), ranks in pod-creation order

Fragmentation: (a) 45 % of nodes busy at random; (b) whole subblocks busy plus 20 % random;
(c) half the nodes with 4 of 8 GPUs used (they cannot take a pod) in a striped pattern.

    python bench/placement_quality.py [--seed 0]
"""

from __future__ import annotations

import argparse
import random

from phalanx.api.config import TopologyConfig
from phalanx.api.types import TrainingJobSpec
from phalanx.gang.costmodel import allreduce_estimate, compact_nodes, gradient_bytes, model_params
from phalanx.gang.inventory import NodeInfo, PodUsage, free_capacity
from phalanx.gang.planner import GangRequest, node_rejection, plan_gang
from phalanx.gang.topology import Topology

CFG = TopologyConfig()
LEVELS = CFG.resolved_levels
GPU = "nvidia.com/gpu"


def cluster(blocks=4, subs=8, hosts=16):
    b_l, s_l, h_l = (lvl.label for lvl in LEVELS)
    return [NodeInfo(f"n{b}-{s:02d}-{h:02d}", {b_l: f"b{b}", s_l: f"b{b}s{s}", h_l: f"n{b}-{s:02d}-{h:02d}"},
                     {GPU: 8, "pods": 110})
            for b in range(blocks) for s in range(subs) for h in range(hosts)]


def fragment(nodes, kind, rng):
    busy: dict[str, int] = {}
    if kind == "random-45%":
        for n in rng.sample(nodes, int(0.45 * len(nodes))):
            busy[n.name] = 8
    elif kind == "subblocks+20%":
        subs = sorted({n.labels[LEVELS[1].label] for n in nodes})
        dead = set(rng.sample(subs, len(subs) // 3))
        for n in nodes:
            if n.labels[LEVELS[1].label] in dead or rng.random() < 0.2:
                busy[n.name] = 8
    elif kind == "striped-half-gpu":
        for i, n in enumerate(nodes):
            if (i // 3) % 2 == 0 or rng.random() < 0.1:
                busy[n.name] = 4
    return [PodUsage(f"u-{k}", "x", k, "Running", {GPU: v, "pods": 1}) for k, v in busy.items()]


def spread(nodes, free, req, rng):
    """LeastAllocated: score = free GPU fraction; the best node takes the next pod."""
    cand = [n for n in nodes if node_rejection(n, free[n.name], req) is None]
    chosen = []
    for _ in range(req.count):
        best = max((free[n.name][GPU] / n.allocatable[GPU], rng.random(), n.name) for n in cand if n.name not in chosen)
        chosen.append(best[2])
    return chosen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    spec = TrainingJobSpec(image="x", nodes=64, procs_per_node=8, resources={"gpus": 8},
                           model={"preset": "8b"}, parallelism={"zero": 1})
    size = gradient_bytes(model_params(spec))
    nodes = cluster()
    topo = Topology.build(nodes, LEVELS)
    req = GangRequest.from_spec(spec, "ns/j")
    kw = dict(size_bytes=size, procs_per_node=8)
    lb = allreduce_estimate(compact_nodes(64, nodes, topo, dict(req.requests)), topo, CFG, **kw)
    print("| cluster | placement | span block/subblock | bottleneck | ring (s) | hierarchical (s) | vs lower bound |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("random-45%", "subblocks+20%", "striped-half-gpu"):
        usage = fragment(nodes, kind, rng)
        free = free_capacity(nodes, usage)
        ours = plan_gang(req, nodes, usage, LEVELS, topology=topo)
        feas = [n.name for n in nodes if node_rejection(n, free[n.name], req) is None]
        rand = sorted(rng.sample(feas, 64))
        spr = spread(nodes, free, req, rng)
        rows = [("phalanx", ours.nodes), ("random", rand), ("spread (LeastAllocated)", spr)]
        for name, placed in rows:
            est = allreduce_estimate(placed, topo, CFG, **kw)
            sp = topo.span(placed)
            print(f"| {kind} ({len(feas)} free) | {name} | {sp['block']}/{sp['subblock']} | {est.bottleneck.level} "
                  f"| {est.ring_seconds:.3f} | {est.hierarchical_seconds:.3f} | {est.ring_seconds / lb.ring_seconds:.2f}x |")
        sp = topo.span(compact_nodes(64, nodes, topo))
        print(f"| {kind} | lower bound (empty) | {sp['block']}/{sp['subblock']} | {lb.bottleneck.level} "
              f"| {lb.ring_seconds:.3f} | {lb.hierarchical_seconds:.3f} | 1.00x |")


if __name__ == "__main__":
    main()
