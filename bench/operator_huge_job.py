"""A 16,384-node TrainingJob's create, as the operator's job loop runs it, and the event loop
meanwhile (no cluster: the indexes are filled in-process).

Pass 1 renders every child (16,384 pods + Service + ConfigMap); pass 2 sees all pods gated and
runs the gang step: the waiting queue planned on 16,384 nodes (16 blocks × 32 subblocks × 32
hosts, 8 GPUs each), pins, the cost model. Each pass is ``JobLoop.decide`` on a real asyncio loop
that also serves ``/healthz`` (aiohttp, as kopf's liveness endpoint) to a probe thread (every
50 ms, 1 s timeout) and runs a 20 ms ticker. Reports each pass's wall and CPU time, the longest
loop stall and probe latency, and the process's peak RSS (VmHWM) over its baseline.
``--on-loop`` calls decide() on the loop instead, for comparison.

    python bench/operator_huge_job.py [--nodes 16384] [--on-loop]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web

from phalanx import constants, gangstep, handlers, jobloop, startup
from phalanx.api.config import OperatorConfig, TopologyConfig
from phalanx.api.policy import ClusterPolicy, PolicyRules
from phalanx.decision import Observed
from phalanx.lifecycle.reconcile import decide
from phalanx.pending import as_sendable

LEVELS = TopologyConfig().resolved_levels


def vm(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def job(nodes: int) -> dict:
    return {"apiVersion": f"{constants.GROUP}/{constants.VERSION}", "kind": "TrainingJob",
            "metadata": {"name": "huge", "namespace": "default", "uid": "uid-huge", "generation": 1,
                         "creationTimestamp": "2026-11-30T00:00:00Z"},
            "spec": {"image": "phalanx/runtime:dev", "nodes": nodes, "procsPerNode": 8,
                     "resources": {"gpus": 8, "cpu": "1", "memory": "1Gi"}, "model": {"preset": "debug"},
                     "training": {"globalBatchSize": nodes * 8}},
            "status": {}}


def node_index(count: int) -> dict:
    b_l, s_l, h_l = (lvl.label for lvl in LEVELS)
    out = {}
    for i in range(count):
        b, s, h = i // 1024, (i // 32) % 32, i % 32
        name = f"n{b}-{s}-{h}"
        body = {"metadata": {"name": name, "labels": {b_l: f"b{b}", s_l: f"b{b}s{s}", h_l: name}},
                "spec": {"taints": [], "unschedulable": False},
                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "192", "memory": "2Ti", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}
        out[name] = [handlers.cluster_nodes(name=name, body=body)[name]]  # as the operator's index keeps it
    return out


class Watch:
    """A ticker on the loop and a /healthz probe thread, for the duration of one pass."""

    def __init__(self, port: int) -> None:
        self.port, self.gaps, self.latencies, self.stop = port, [], [], threading.Event()

    async def tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.02)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    def probe(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1.0).read()
                self.latencies.append(time.perf_counter() - t0)
            except OSError:
                self.latencies.append(float("inf"))
            self.stop.wait(0.05)


async def run_pass(loop_: jobloop.JobLoop, obj: dict, observed: Observed, port: int, on_loop: bool):
    w = Watch(port)
    ticker = asyncio.create_task(w.tick())
    prober = threading.Thread(target=w.probe, daemon=True)
    prober.start()
    await asyncio.sleep(0.1)
    t0, c0 = time.perf_counter(), time.process_time()
    if on_loop:
        plan = decide(obj, observed, datetime.now(UTC), loop_.memo.config, gang=loop_.gang, fits=loop_.fits)
    else:
        plan = await loop_.decide(obj, observed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    await asyncio.sleep(0.1)
    w.stop.set()
    ticker.cancel()
    await asyncio.to_thread(prober.join)
    late = [x for x in w.latencies if x >= 1.0]
    return plan, {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "max_loop_stall_s": round(max(w.gaps), 3),
                  "probes": len(w.latencies), "max_probe_s": round(max(w.latencies), 3) if w.latencies else None,
                  "probes_over_1s": len(late)}


async def main_async(args: argparse.Namespace) -> None:
    app = web.Application()

    async def healthz(_):
        return web.json_response({})

    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    memo = startup.new_memo(OperatorConfig(policy=ClusterPolicy(default=PolicyRules(max_nodes=None))))  # the default caps jobs at 1024 pods
    ix = gangstep.Indexes(job_pods={}, job_services={}, job_config_maps={}, job_network_policies={},
                          cluster_nodes=node_index(args.nodes), usage={None: []}, priority_classes={}, namespace_labels={},
                          resource_quotas={})
    loop_ = jobloop.JobLoop(memo, "default", "huge", {}, ix, gangstep.native_gang_step(memo, ix),
                            gangstep.elastic_probe(memo, "default", "huge", ix))
    base = vm("VmRSS")
    print(f"nodes={args.nodes} decide {'ON the loop' if args.on_loop else 'off the loop'}; "
          f"baseline RSS {base:.0f} MiB (16k node index loaded); load {os.getloadavg()[0]:.1f}")
    obj = job(args.nodes)
    plan, r1 = await run_pass(loop_, obj, Observed(pods=[], service_exists=False, config_map_exists=False,
                                                   network_policy_exists=False), port, args.on_loop)
    print(f"pass 1 (render {len(plan.create)} children): {r1}; RSS {vm('VmRSS'):.0f} MiB, peak {vm('VmHWM'):.0f} MiB "
          f"(+{vm('VmHWM') - base:.0f} MiB over baseline)")
    # pass 2 sees the pods as the pod watch would show them (dicts; these, held by the bench, are not
    # the operator's: its reflector keeps a slim entry per pod), so its RSS includes them
    pods = [as_sendable(c) for c in plan.create if c["kind"] == "Pod"]
    obj2 = {**obj, "status": plan.status}
    plan2, r2 = await run_pass(loop_, obj2, Observed(pods=pods), port, args.on_loop)
    cond = [c for c in plan2.status.get("conditions", []) if c["type"] == "Schedulable"]
    print(f"pass 2 (gang step: plan + pins, released {len(plan2.release)}; {cond[0]['message'] if cond else ''}): {r2}; "
          f"RSS {vm('VmRSS'):.0f} MiB, peak {vm('VmHWM'):.0f} MiB (+{vm('VmHWM') - base:.0f} MiB over baseline); "
          f"load {os.getloadavg()[0]:.1f}")
    memo.decider.shutdown()
    await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16384)
    ap.add_argument("--on-loop", action="store_true", help="decide() on the event loop, to compare")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
