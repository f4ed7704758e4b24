"""Planning time of one 1024-pod gang on a 16,384-node, 3-level topology (pure Python).

16 blocks × 32 subblocks × 32 hosts, 8 GPUs each; every 7th node runs a 4-GPU pod, so the gang
needs whole-node fits and spans two blocks. Reports the median of several runs of plan_gang
(feasibility + walk + rank order) with the topology pre-built, and the topology build time.

Then ``plan_queue`` of 16 gangs × 128 pods (incl. the topology build) against the algorithm it
replaced, in the same run: ``sequential`` is plan_gang for each gang in turn on the capacity left
(every gang re-checks all nodes); ``--baseline FILE`` also times another planner.py (e.g. the
pre-incremental one: ``git show 7aa9010:operator/phalanx/gang/planner.py > /tmp/planner_old.py``).
The placements must be identical. Wall and CPU (process) time; the machine may be shared.

    python bench/placement_speed.py [--repeat 5] [--baseline /tmp/planner_old.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import NodeInfo, PodUsage, free_capacity
from phalanx.gang.planner import GangRequest, Placement, plan_gang, plan_queue, queue_order
from phalanx.gang.topology import Topology

LEVELS = TopologyConfig().resolved_levels
GPU = "nvidia.com/gpu"


def cluster(blocks=16, subs=32, hosts=32):
    b_l, s_l, h_l = (lvl.label for lvl in LEVELS)
    return [NodeInfo(f"n{b}-{s}-{h}", {b_l: f"b{b}", s_l: f"b{b}s{s}", h_l: f"n{b}-{s}-{h}"},
                     {GPU: 8, "cpu": 192000, "memory": 2 << 40, "pods": 110})
            for b in range(blocks) for s in range(subs) for h in range(hosts)]


def sequential_queue(gangs, nodes, usage, levels):
    """plan_queue before it was incremental: plan_gang per gang on the capacity left."""
    topo = Topology.build(nodes, levels)
    free = free_capacity(nodes, usage)
    out = {}
    for g in queue_order(gangs):
        res = out[g.key] = plan_gang(g, nodes, topology=topo, free=free)
        if isinstance(res, Placement):
            for node in res.nodes:
                for k, v in res.requests.items():
                    free[node][k] = free[node].get(k, 0) - v
    return out


def timed(fn, *args):
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def load_planner(path):
    spec = importlib.util.spec_from_file_location("baseline_planner", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["baseline_planner"] = mod
    spec.loader.exec_module(mod)
    return mod


def queue_bench(nodes, usage, baseline: str | None, repeat: int) -> None:
    gangs = [GangRequest(f"ns/g{i}", 128, {GPU: 8, "pods": 1}, priority=i % 3) for i in range(16)]
    runs = {"plan_queue (incremental)": lambda: plan_queue(gangs, nodes, usage, LEVELS).results,
            "sequential plan_gang (before)": lambda: sequential_queue(gangs, nodes, usage, LEVELS)}
    if baseline:
        old = load_planner(baseline)
        old_gangs = [old.GangRequest(**g.__dict__) for g in gangs]
        runs[f"plan_queue of {baseline}"] = lambda: old.plan_queue(old_gangs, nodes, usage, LEVELS).results
    want = None
    for name, fn in runs.items():
        walls, cpus = [], []
        for _ in range(repeat):
            res, w, c = timed(fn)
            walls.append(w)
            cpus.append(c)
        nodes_of = {k: getattr(v, "nodes", None) for k, v in res.items()}
        same = want is None or nodes_of == want
        want = want or nodes_of
        print(f"{name}: 16 gangs x 128 pods (incl. topology build): median wall {statistics.median(walls) * 1e3:.0f} ms, "
              f"cpu {statistics.median(cpus) * 1e3:.0f} ms ({repeat} runs), placed "
              f"{sum(1 for v in nodes_of.values() if v)}, same placements: {same}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--queue-repeat", type=int, default=3)
    ap.add_argument("--baseline", help="another planner.py to time plan_queue of (before/after in one run)")
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
    print(f"nodes={len(nodes)} gang=1024 span={res.span}")
    print(f"topology build: {build * 1e3:.0f} ms")
    print(f"plan_gang: median {statistics.median(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms over {args.repeat} runs")
    queue_bench(nodes, usage, args.baseline, args.queue_repeat)


if __name__ == "__main__":
    main()
