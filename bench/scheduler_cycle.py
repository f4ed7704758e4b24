"""Planning CPU per node event with 1-64 gangs waiting: every woken job planning the queue (the
per-job path) against the operator's one scheduler (one cycle), in the same run (pure Python).

A 1,024-node, 3-level cluster (4 blocks × 16 subblocks × 16 hosts, 8 GPUs each), 70 % of the nodes
running a pod that takes all 8 GPUs; N gangs of 384-416 whole-GPU nodes wait (none fits). A node
event: one more node joins (every gang's count of fitting nodes moves: every row changes); last,
one full node is updated (a new NodeInfo, nothing else: no row changes). Per-job path: the event
wakes every waiting job, and each one plans the whole queue (``admit``) and keeps its own row —
N plans. Scheduler: one cycle plans the queue
once (``Scheduler.cycle``) and publishes each gang's row, waking the jobs whose row changed. Each
path builds the topology once per event (the node set changed). The rows must equal the per-job
answers. CPU (process) time per event, median of ``--repeat`` events.

    python bench/scheduler_cycle.py [--repeat 5] [--gangs 1,2,4,8,16,32,64] [--no-doc]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from runtime_common import ROOT, commit, write_result

from phalanx.api.config import OperatorConfig, TopologyConfig
from phalanx.gang import topology
from phalanx.gang.admission import admit
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.planner import GangRequest
from phalanx.scheduler import Scheduler

GPU = "nvidia.com/gpu"
CONFIG = OperatorConfig()
LEVELS = TopologyConfig().resolved_levels
HEADING = "### Scheduling cycle per node event (`bench/scheduler_cycle.py`)"


def node(b: int, s: int, h: int) -> NodeInfo:
    b_l, s_l, h_l = (level.label for level in LEVELS)
    name = f"n{b}-{s}-{h}"
    return NodeInfo(name, {b_l: f"b{b}", s_l: f"b{b}s{s}", h_l: name}, {GPU: 8, "cpu": 192000, "memory": 2 << 40, "pods": 110})


def cluster(blocks: int = 4, subs: int = 16, hosts: int = 16) -> tuple[dict[str, list[NodeInfo]], list[dict]]:
    """kopf's node index ({name: [NodeInfo]}) and the bound pods (every node but each 10th of 3)."""
    nodes = {n.name: [n] for b in range(blocks) for s in range(subs) for h in range(hosts) for n in [node(b, s, h)]}
    busy = [name for i, name in enumerate(nodes) if i % 10 >= 3]
    pods = [{"metadata": {"name": f"p-{name}", "namespace": "other", "labels": {}},
             "spec": {"nodeName": name, "containers": [{"resources": {"requests": {GPU: "8"}}}]},
             "status": {"phase": "Running"}} for name in busy]
    return nodes, pods


def gangs(count: int) -> list[GangRequest]:
    return [GangRequest(f"ns/g{i}", 384 + i % 33, {GPU: 8, "pods": 1}, priority=i % 3,
                        creation=f"2026-12-01T00:{i // 60:02d}:{i % 60:02d}Z") for i in range(count)]


def per_job(queue: list[GangRequest], nodes: dict, usage: list) -> tuple[dict, float]:
    """Every waiting job woken, each planning the queue and reading its own row (the per-job path)."""
    t0 = time.process_time()
    inventory = [n for store in nodes.values() for n in store]
    rows = {g.key: admit(queue, inventory, usage, CONFIG, []).results[g.key] for g in queue}
    return rows, time.process_time() - t0


def one_cycle(scheduler: Scheduler) -> tuple[dict, float]:
    t0 = time.process_time()
    scheduler.cycle(None, CONFIG)
    return {k: row.result for k, row in scheduler.rows.items()}, time.process_time() - t0


def measure(count: int, repeat: int) -> dict:
    nodes, usage = cluster()
    queue = gangs(count)
    woken: list[str] = []
    scheduler = Scheduler(wake=lambda namespace, name: woken.append(name))
    scheduler.attach(nodes, {None: usage})
    for g in queue:
        scheduler.submit(g.key, g)
    scheduler.cycle(None, CONFIG)  # the queue as it stood before the events
    per_job_cpu, cycle_cpu, woken_counts, same = [], [], [], True
    for event in range(repeat):
        joined = node(9, event, 0)  # a node joins: every gang's count of fitting nodes moves
        nodes[joined.name] = [joined]
        woken.clear()
        for path in (("cycle", "per_job") if event % 2 else ("per_job", "cycle")):
            topology._last_built = None  # after a node event each path builds the topology once
            if path == "cycle":
                rows, cpu = one_cycle(scheduler)
                cycle_cpu.append(cpu)
            else:
                want, cpu = per_job(queue, nodes, usage)
                per_job_cpu.append(cpu)
        woken_counts.append(len(woken))
        same = same and rows == want
    busy = usage[0]["spec"]["nodeName"]
    nodes[busy] = [dataclasses.replace(nodes[busy][0])]  # an update of a full node (a heartbeat): no row changes
    woken.clear()
    scheduler.cycle(None, CONFIG)
    quiet = len(woken)
    return {"quiet": quiet, "gangs": count, "per_job": statistics.median(per_job_cpu), "cycle": statistics.median(cycle_cpu),
            "woken": statistics.median(woken_counts), "same": same}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, load avg {os.getloadavg()[0]:.1f} at start"


def table(results: list[dict]) -> str:
    lines = ["| gangs waiting | per-job path: plans, CPU | scheduler: plans, CPU | per-job / scheduler | jobs woken: node joins / full node updated | same rows |",
             "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['gangs']} | {r['gangs']}, {r['per_job'] * 1e3:,.1f} ms | 1, {r['cycle'] * 1e3:,.1f} ms | "
                     f"**{r['per_job'] / r['cycle']:.1f}×** | {r['woken']:.0f} / {r['quiet']} | {r['same']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--gangs", default="1,2,4,8,16,32,64")
    ap.add_argument("--no-doc", action="store_true", help="print only; docs/benchmarks.md is left as it is")
    args = ap.parse_args()
    started = machine()
    results = []
    for count in (int(c) for c in args.gangs.split(",")):
        results.append(measure(count, args.repeat))
        r = results[-1]
        print(f"{count:3d} gangs: per-job {r['per_job'] * 1e3:8.1f} ms CPU ({count} plans), scheduler "
              f"{r['cycle'] * 1e3:7.1f} ms CPU (1 plan), {r['per_job'] / r['cycle']:5.1f}x, woken {r['woken']:.0f} / {r['quiet']}, "
              f"same rows: {r['same']}", flush=True)
    command = "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    body = (f"**{time.strftime('%Y-%m-%d')}**, commit {commit()} — {started}. Command: `{command}`. "
            f"1,024 nodes (one more per event), median of {args.repeat} events.\n\n{table(results)}")
    print(body)
    if not args.no_doc:
        write_result("scheduler-cycle", HEADING, body, parent="## Placement")


if __name__ == "__main__":
    main()
