"""Where does Kueue's Topology-Aware Scheduling put a gang? Measured on a local cluster with a real Kueue.

The same clusters, fragmentation and gang as ``bench/placement_default_scheduler.py`` (its
helpers, the same seed and the same random draws, so every shape has the same busy nodes), with
Kueue v0.17.0 (built by ``hack/kueue/build.sh``, run by ``hack/cluster/localcluster/kueue.py``) admitting the
gang as one plain-pod group:

1. a Topology of the operator's default levels (block, subblock, hostname), a ResourceFlavor over
   the bench nodes with that topologyName, a ClusterQueue with room for every GPU, a LocalQueue;
2. for each fragmentation: the kwok nodes, one filler pod per busy node bound with
   ``spec.nodeName`` (not managed by Kueue: TAS must count them as used capacity);
3. the gang as ``--gang`` plain pods of 8 GPUs, created one at a time in rank order, carrying
   kueue.x-k8s.io/queue-name, pod-group-name, pod-group-total-count and one TAS annotation:
   ``podset-preferred-topology: block`` (Kueue's soft "as few blocks as possible") and
   ``podset-required-topology: block`` (hard); ``--repeats`` times each, deleting it in between.
   Kueue gates the pods, admits the group, assigns TAS domains, lifts the gates; kube-scheduler
   binds. Measured: create of the first pod → every pod bound;
4. what happens when the gang cannot fit: ``required: subblock`` (16 hosts, the gang is 32), and a
   gang larger than the free nodes (preferred) — does anything bind (a partial hold)?

and predicts the 8B ZeRO-1 allreduce of each placement (rank i = pod worker-i) against Phalanx's
``plan_gang`` on the same inventory and the lower bound. Prints Markdown tables.

    python bench/placement_kueue.py [--seed 0] [--blocks 4 --subblocks 4 --hosts 16 --gang 32 --repeats 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "hack" / "cluster"))  # localcluster (dev-only)

from placement_default_scheduler import (  # noqa: E402
    BENCH_LABEL,
    BENCH_VALUE,
    GPU,
    KINDS,
    NS,
    Bench,
    all_untainted_ready,
    log,
    pod,
    wait_for,
)
from placement_quality import CFG, LEVELS, fragment, spread  # noqa: E402

from localcluster import LocalCluster, create_nodes, finish_pod  # noqa: E402
from localcluster import kueue as kueuelocal  # noqa: E402
from localcluster.topology import node_manifests, parse_topology  # noqa: E402
from phalanx.api.types import TrainingJobSpec  # noqa: E402
from phalanx.gang.costmodel import allreduce_estimate, compact_nodes, gradient_bytes, model_params  # noqa: E402
from phalanx.gang.inventory import free_capacity, nodes_from_list, pods_from_list  # noqa: E402
from phalanx.gang.planner import GangRequest, Placement, node_rejection, plan_gang  # noqa: E402
from phalanx.gang.topology import Topology  # noqa: E402

KQ, KV = "kueue.x-k8s.io", "v1beta2"
QUEUE = "bench"




def setup_kueue(b: Bench, n_nodes: int) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(b.api)
    key, value = kueuelocal.MANAGED_LABEL
    b.core.patch_namespace(NS, {"metadata": {"labels": {key: value}}})
    levels = [{"nodeLabel": lvl.label} for lvl in LEVELS]
    objs = [
        ("topologies", {"kind": "Topology", "metadata": {"name": "bench"}, "spec": {"levels": levels}}),
        ("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": "bench"},
                             "spec": {"nodeLabels": {BENCH_LABEL: BENCH_VALUE}, "topologyName": "bench"}}),
        ("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": "bench"}, "spec": {
            "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU], "flavors": [{
                "name": "bench", "resources": [{"name": "cpu", "nominalQuota": "100000"}, {"name": "memory", "nominalQuota": "100000Gi"},
                                               {"name": GPU, "nominalQuota": str(8 * n_nodes)}]}]}]}}),
    ]
    for plural, body in objs:
        body = {"apiVersion": f"{KQ}/{KV}", **body}
        try:
            custom.create_cluster_custom_object(KQ, KV, plural, body)
        except client.ApiException as e:
            if e.status != 409:
                raise
    try:
        custom.create_namespaced_custom_object(KQ, KV, NS, "localqueues", {
            "apiVersion": f"{KQ}/{KV}", "kind": "LocalQueue", "metadata": {"name": QUEUE}, "spec": {"clusterQueue": "bench"}})
    except client.ApiException as e:
        if e.status != 409:
            raise


def workload(b: Bench, name: str) -> dict | None:
    from kubernetes import client

    try:
        return client.CustomObjectsApi(b.api).get_namespaced_custom_object(KQ, KV, NS, "workloads", name)
    except client.ApiException:
        return None


def gang_pods(run: str, n: int, topo_key: str, level: str) -> list[dict]:
    labels = {"app": "gang", "run": run, "kueue.x-k8s.io/queue-name": QUEUE, "kueue.x-k8s.io/pod-group-name": run}
    out = []
    for i in range(n):
        m = pod(f"{run}-worker-{i}", 8, {**labels, "rank": str(i)})
        m["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": str(n), topo_key: level}
        out.append(m)
    return out


def submit(b: Bench, run: str, n: int, topo_key: str, level: str, timeout: float) -> tuple[list[str] | None, float, dict]:
    """Create the group in rank order; (placement by rank or None, seconds to all bound, workload)."""
    sel = f"app=gang,run={run}"
    ts = time.monotonic()
    for m in gang_pods(run, n, topo_key, level):
        b.core.create_namespaced_pod(NS, m)

    def all_bound():
        ps = b.pods(sel)
        return ps if len(ps) == n and all(p["spec"].get("nodeName") for p in ps) else None
    try:
        bound = wait_for(f"{run} bound", all_bound, timeout)
    except TimeoutError:
        return None, time.monotonic() - ts, workload(b, run) or {}
    secs = time.monotonic() - ts
    by_name = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound}
    return [by_name[f"{run}-worker-{i}"] for i in range(n)], secs, workload(b, run) or {}


def cleanup_gang(b: Bench, run: str) -> None:
    """End the gang as a kubelet would (kwok does not: a deleted Running pod stays Running, and
    Kueue keeps its finalizer on group pods until they end): bound pods Succeeded; then delete the
    Workload (Kueue then stops and finalizes the group) and the pods. Finalizers still left after
    30 s are removed here (counted in the log)."""
    from kubernetes import client

    sel = f"app=gang,run={run}"
    for p in b.pods(sel):
        if p["spec"].get("nodeName") and p["status"].get("phase") == "Running":
            finish_pod(b.api, NS, p["metadata"]["name"], 0, via="status")
    custom = client.CustomObjectsApi(b.api)
    try:
        custom.delete_namespaced_custom_object(KQ, KV, NS, "workloads", run)
    except client.ApiException as e:
        if e.status != 404:
            raise
    b.core.delete_collection_namespaced_pod(NS, label_selector=sel, grace_period_seconds=0)
    try:
        wait_for(f"{run} pods gone", lambda: not b.pods(sel), 30)
    except TimeoutError:
        left = b.pods(sel)
        log(f"{run}: {len(left)} pods still held by a finalizer after 30 s; removing it")
        for p in left:
            b.core.patch_namespaced_pod(p["metadata"]["name"], NS, {"metadata": {"finalizers": None}})
        wait_for(f"{run} pods gone", lambda: not b.pods(sel), 60)

    def gone():
        try:
            custom.get_namespaced_custom_object(KQ, KV, NS, "workloads", run)
        except client.ApiException as e:
            return e.status == 404
        return False
    wait_for(f"workload {run} gone", gone, 60, every=0.5)


def pending_reason(wl: dict) -> str:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c["type"] == "QuotaReserved":
            return f"{c['reason']}: {c.get('message', '')}"
    return "no QuotaReserved condition"


def run_shape(b: Bench, kind: str, topo_doc: dict, args, rng: random.Random, spec, req, kw) -> tuple[list[tuple], list[str]]:
    t0 = time.monotonic()
    ktopo = parse_topology(topo_doc)
    order = [m["metadata"]["name"] for m in node_manifests(ktopo)]
    create_nodes(b.kubeconfig, ktopo, workers=8)

    def nodes_ready():
        it = b.nodes()
        return it if all_untainted_ready(it, len(order)) else None
    items = wait_for("nodes Ready without taints", nodes_ready, 120)
    pos = {name: i for i, name in enumerate(order)}
    inv0 = sorted(nodes_from_list(items), key=lambda n: pos[n.name])
    busy = fragment(inv0, kind, rng)
    b.create_pods([pod(f"fill-{u.node_name}", u.requests[GPU], {"app": "filler"}, node=u.node_name) for u in busy])

    def fillers_running():
        ps = b.pods("app=filler")
        return len(ps) == len(busy) and all(p["status"].get("phase") == "Running" for p in ps)
    wait_for("filler pods Running", fillers_running, 120)
    time.sleep(3.0)  # Kueue's TAS cache and kube-scheduler's take in the filler pods
    log(f"{kind}: {len(items)} nodes, {len(busy)} fillers ({time.monotonic() - t0:.1f}s)")

    nodes = sorted(nodes_from_list(b.nodes()), key=lambda n: pos[n.name])
    usage = pods_from_list(b.pods("app=filler"))
    topo = Topology.build(nodes, LEVELS)
    free = free_capacity(nodes, usage)
    feas = [n.name for n in nodes if node_rejection(n, free[n.name], req) is None]
    ours = plan_gang(req, nodes, usage, LEVELS, topology=topo)
    assert isinstance(ours, Placement), ours
    rng.sample(feas, args.gang)  # the default-scheduler bench's draws, so the next shape's fragmentation matches
    spread(nodes, free, req, rng)
    lb_nodes = compact_nodes(args.gang, nodes, topo, dict(req.requests))
    block, subblock = LEVELS[0].label, LEVELS[1].label

    runs = []
    notes = []
    for mode, key, level in (("preferred block", "kueue.x-k8s.io/podset-preferred-topology", block),
                             ("required block", "kueue.x-k8s.io/podset-required-topology", block)):
        for r in range(args.repeats):
            run = f"g{len(runs)}"
            placed, secs, _ = submit(b, run, args.gang, key, level, 120)
            if placed is None:
                notes.append(f"{kind}: {mode} run {r + 1}: not bound in 120 s")
            else:
                bad = [x for x in placed if x not in feas]
                assert not bad, f"Kueue/kube-scheduler used nodes that were not free: {bad}"
                runs.append((mode, placed, secs))
                log(f"{kind}: {mode} run {r + 1}: bound in {secs:.1f}s, span {topo.span(placed)}")
            cleanup_gang(b, run)
            time.sleep(1.0)

    # When the gang cannot fit: nothing may bind (no partial hold); Kueue's reason.
    for mode, key, level, n in (("required subblock (16 hosts)", "kueue.x-k8s.io/podset-required-topology", subblock, args.gang),
                                (f"preferred block, {len(feas) + 8} pods > {len(feas)} free", "kueue.x-k8s.io/podset-preferred-topology",
                                 block, len(feas) + 8)):
        run = f"g{len(runs) + len(notes) + 10}"
        placed, secs, wl = submit(b, run, n, key, level, args.wait_unfit)
        ps = b.pods(f"app=gang,run={run}")
        nbound = sum(1 for p in ps if p["spec"].get("nodeName"))
        gated = sum(1 for p in ps if p["spec"].get("schedulingGates"))
        notes.append(f"{kind}: {mode}: after {secs:.0f} s {nbound}/{n} bound, {gated} gated; Kueue: {pending_reason(wl)}")
        log(notes[-1])
        cleanup_gang(b, run)

    b.delete_pods("app=filler")
    b.delete_nodes()
    lb = allreduce_estimate(lb_nodes, topo, CFG, **kw)
    label = f"{kind} ({len(feas)} free)"
    rows = [(label, f"**Kueue TAS {mode}, measured** (bound in {secs:.1f} s)", placed) for mode, placed, secs in runs]
    rows += [(label, "phalanx (plan_gang)", ours.nodes), (label, "lower bound (empty)", lb_nodes)]
    out = []
    for lab, name, placed in rows:
        est = allreduce_estimate(placed, topo, CFG, **kw)
        sp = topo.span(placed)
        out.append((lab, name, f"{sp['block']}/{sp['subblock']}", est.bottleneck.level,
                    est.ring_seconds, est.hierarchical_seconds, est.ring_seconds / lb.ring_seconds))
    return out, notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--subblocks", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--gang", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--wait-unfit", type=float, default=20.0, help="seconds to watch a gang that cannot fit")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--work-dir", help="work dir of the cluster started here (default: a temp dir)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t_start = time.monotonic()
    spec = TrainingJobSpec(image="x", nodes=args.gang, procs_per_node=8, resources={"gpus": 8},
                           model={"preset": "8b"}, parallelism={"zero": 1})
    req = GangRequest.from_spec(spec, f"{NS}/llm-8b")
    kw = dict(size_bytes=gradient_bytes(model_params(spec)), procs_per_node=8)
    topo_doc = {"name": "pq", "namePrefix": "gpu", "cliqueLevel": "node",
                "layout": {"block": args.blocks, "subblock": args.subblocks, "rack": 1, "node": args.hosts},
                "node": {"gpu": 8, "labels": {BENCH_LABEL: BENCH_VALUE}}}
    kdir = kueuelocal.build()
    wd = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="phalanx-pkq-"))
    cluster = LocalCluster(work_dir=wd).start()
    kueue = None
    try:
        kueue = kueuelocal.LocalKueue(cluster.kubeconfig, wd / "kueue", cluster.kubectl, kueue_dir=kdir, log_level=1).start()
        log(f"cluster + kueue up in {time.monotonic() - t_start:.1f}s")
        b = Bench(cluster.kubeconfig)
        version = b.server_version()
        b.ensure_namespace()
        n_nodes = args.blocks * args.subblocks * args.hosts
        setup_kueue(b, n_nodes)
        rows, notes = [], []
        for kind in args.kinds.split(","):
            r, n = run_shape(b, kind, topo_doc, args, rng, spec, req, kw)
            rows += r
            notes += n
    finally:
        if kueue is not None:
            kueue.stop()
        cluster.stop()

    print(f"Cluster: {args.blocks} blocks × {args.subblocks} subblocks × {args.hosts} hosts = {n_nodes} kwok nodes "
          f"of 8 GPUs; gang: {args.gang} plain pods × 8 GPUs in one Kueue pod group; job: 8B ZeRO-1; seed {args.seed}")
    print(f"Kueue {kdir.name}, kube-apiserver/kube-scheduler {version}, python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs; total {time.monotonic() - t_start:.0f} s")
    print()
    print("| cluster | placement | span block/subblock | bottleneck | ring (s) | hierarchical (s) | vs lower bound |")
    print("|---|---|---|---|---|---|---|")
    for lab, name, sp, bott, ring, hier, ratio in rows:
        print(f"| {lab} | {name} | {sp} | {bott} | {ring:.3f} | {hier:.3f} | {ratio:.2f}× |")
    print()
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
