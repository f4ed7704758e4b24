"""Planning time of one 1024-pod gang on a 16,384-node, 3-level topology (pure Python).

16 blocks × 32 subblocks × 32 hosts, 8 GPUs each; every 7th node runs a 4-GPU pod, so the gang
needs whole-node fits and spans two blocks. Reports the median of several runs of plan_gang
(feasibility + walk + rank order) with the topology pre-built, and the topology build time.

    python bench/placement_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import NodeInfo, PodUsage
from phalanx.gang.planner import GangRequest, plan_gang, plan_queue
from phalanx.gang.topology import Topology

LEVELS = TopologyConfig().levels
GPU = "nvidia.com/gpu"


def cluster(blocks=16, subs=32, hosts=32):
    b_l, s_l, h_l = (lvl.label for lvl in LEVELS)
    return [NodeInfo(f"n{b}-{s}-{h}", {b_l: f"b{b}", s_l: f"b{b}s{s}", h_l: f"n{b}-{s}-{h}"},
                     {GPU: 8, "cpu": 192000, "memory": 2 << 40, "pods": 110})
            for b in range(blocks) for s in range(subs) for h in range(hosts)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    nodes = cluster()
    usage = [PodUsage(f"p{i}", "x", n.name, "Running", {GPU: 4, "pods": 1}) for i, n in enumerate(nodes) if i % 7 == 0]
    req = GangRequest("ns/big", 1024, {GPU: 8, "cpu": 96000, "pods": 1})
    t0 = time.perf_counter()
    topo = Topology.build(nodes, LEVELS)
    build = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        res = plan_gang(req, nodes, usage, LEVELS, topology=topo)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    gangs = [GangRequest(f"ns/g{i}", 128, {GPU: 8, "pods": 1}, priority=i % 3) for i in range(16)]
    q = plan_queue(gangs, nodes, usage, LEVELS)
    queue = time.perf_counter() - t0
    print(f"nodes={len(nodes)} gang=1024 span={res.span}")
    print(f"topology build: {build * 1e3:.0f} ms")
    print(f"plan_gang: median {statistics.median(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms over {args.repeat} runs")
    print(f"plan_queue 16 gangs x 128 pods (incl. topology build): {queue * 1e3:.0f} ms, placed {len(q.placed)}")


if __name__ == "__main__":
    main()
