"""Where does the real default kube-scheduler put a gang of plain pods? Measured on a local cluster.

Starts a local control plane (``localcluster``: etcd, kube-apiserver,
kube-controller-manager, the real kube-scheduler v1.36 with its default profile, kwok playing the
nodes) and, for each fragmented cluster of ``bench/placement_quality.py``:

1. creates the kwok Nodes: ``--blocks`` × ``--subblocks`` × ``--hosts`` nodes of 8 GPUs with the
   block/subblock labels of the operator's default topology levels;
2. occupies capacity exactly like that benchmark's fragmentation pattern (its ``fragment``
   function), with one filler pod per busy node bound directly (``spec.nodeName``, no scheduler);
3. creates the gang as ``--gang`` plain pods of 8 GPUs each (no gates, no scheduler name, ranks =
   pod index), as a non-gang operator (Kubeflow training-operator) would, and lets kube-scheduler
   bind them; ``--repeats`` times, deleting the gang in between;
4. reads nodes and pods back from the API and predicts the 8B ZeRO-1 gradient allreduce (same
   model, job shape and link figures as the simulated rows) for kube-scheduler's actual placement,
   Phalanx's planner on the same inventory (``plan_gang`` over the nodes + filler pods as read
   back), random feasible nodes, the simulated LeastAllocated spread of placement_quality.py, and
   the lower bound (``compact_nodes``);

then deletes pods and nodes before the next shape. Prints a Markdown table.

    python bench/placement_default_scheduler.py [--seed 0] [--blocks 4 --subblocks 4 --hosts 16 --gang 32]
    python bench/placement_default_scheduler.py --kubeconfig KC   # use a running cluster instead

Needs the cluster binaries (``make cluster-binaries``) and the ``kubernetes`` client.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hack" / "cluster"))  # localcluster (dev-only)

from placement_quality import CFG, GPU, LEVELS, fragment, spread  # noqa: E402

from localcluster import LocalCluster, api_client, create_nodes  # noqa: E402
from localcluster.topology import node_manifests, parse_topology  # noqa: E402
from phalanx.api.types import TrainingJobSpec  # noqa: E402
from phalanx.gang.costmodel import allreduce_estimate, compact_nodes, gradient_bytes, model_params  # noqa: E402
from phalanx.gang.inventory import free_capacity, nodes_from_list, pods_from_list  # noqa: E402
from phalanx.gang.planner import GangRequest, Placement, node_rejection, plan_gang  # noqa: E402
from phalanx.gang.topology import Topology  # noqa: E402

KINDS = ("random-45%", "subblocks+20%", "striped-half-gpu")
NS = "placement-bench"
BENCH_LABEL = "phalanx.dev/bench"
BENCH_VALUE = "placement-default-scheduler"
PAUSE = "registry.k8s.io/pause:3.10"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_for(what: str, cond, timeout: float = 120.0, every: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def pod(name: str, gpus: int, labels: dict[str, str], node: str | None = None) -> dict:
    spec = {
        "containers": [{"name": "main", "image": PAUSE, "resources": {"limits": {GPU: str(gpus)}}}],
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


class Bench:
    def __init__(self, kubeconfig: Path):
        from kubernetes import client

        self.api = api_client(kubeconfig, pool_size=16)
        self.core = client.CoreV1Api(self.api)
        self.kubeconfig = kubeconfig

    def raw(self, fn, *a, **kw) -> dict:
        return json.loads(fn(*a, _preload_content=False, **kw).data)

    def nodes(self) -> list[dict]:
        return self.raw(self.core.list_node, label_selector=f"{BENCH_LABEL}={BENCH_VALUE}")["items"]

    def pods(self, selector: str) -> list[dict]:
        return self.raw(self.core.list_namespaced_pod, NS, label_selector=selector)["items"]

    def ensure_namespace(self) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": NS}})
        except ApiException as e:
            if e.status != 409:
                raise

        def sa():
            try:
                return self.core.read_namespaced_service_account("default", NS)
            except ApiException:
                return None
        wait_for("the default ServiceAccount", sa, 60)

    def create_pods(self, manifests: list[dict]) -> None:
        with ThreadPoolExecutor(max_workers=8) as ex:
            list(ex.map(lambda m: self.core.create_namespaced_pod(NS, m), manifests))

    def delete_pods(self, selector: str) -> None:
        self.core.delete_collection_namespaced_pod(NS, label_selector=selector, grace_period_seconds=0)
        wait_for(f"pods {selector} gone", lambda: not self.pods(selector), 120)

    def delete_nodes(self) -> None:
        self.core.delete_collection_node(label_selector=f"{BENCH_LABEL}={BENCH_VALUE}")
        wait_for("bench nodes gone", lambda: not self.nodes(), 120)

    def server_version(self) -> str:
        from kubernetes import client

        return client.VersionApi(self.api).get_code().git_version


def all_untainted_ready(items: list[dict], n: int) -> bool:
    if len(items) != n:
        return False
    for it in items:
        if it["spec"].get("taints"):
            return False
        conds = {c["type"]: c["status"] for c in it["status"].get("conditions") or []}
        if conds.get("Ready") != "True":
            return False
    return True


def run_shape(b: Bench, kind: str, topo_doc: dict, args, rng: random.Random, spec, req, kw) -> list[tuple]:
    t0 = time.monotonic()
    ktopo = parse_topology(topo_doc)
    order = [m["metadata"]["name"] for m in node_manifests(ktopo)]  # tree order, as cluster() in placement_quality
    create_nodes(b.kubeconfig, ktopo, workers=8)
    def nodes_ready():
        it = b.nodes()
        return it if all_untainted_ready(it, len(order)) else None
    items = wait_for("nodes Ready without taints", nodes_ready, 120)
    log(f"{kind}: {len(items)} nodes Ready ({time.monotonic() - t0:.1f}s)")

    # (2) fill exactly like placement_quality's fragmentation, binding directly.
    pos = {name: i for i, name in enumerate(order)}
    inv0 = sorted(nodes_from_list(items), key=lambda n: pos[n.name])
    busy = fragment(inv0, kind, rng)
    fill_labels = {"app": "filler"}
    b.create_pods([pod(f"fill-{u.node_name}", u.requests[GPU], fill_labels, node=u.node_name) for u in busy])
    def fillers_running():
        ps = b.pods("app=filler")
        return len(ps) == len(busy) and all(p["status"].get("phase") == "Running" for p in ps)
    wait_for("filler pods Running", fillers_running, 120)
    time.sleep(2.0)  # let kube-scheduler's informer cache take in the last filler pods
    log(f"{kind}: {len(busy)} filler pods Running ({time.monotonic() - t0:.1f}s)")

    # (4a) the inventory as read back from the API: what Phalanx's planner would see.
    nodes = sorted(nodes_from_list(b.nodes()), key=lambda n: pos[n.name])
    usage = pods_from_list(b.pods("app=filler"))
    assert sorted((u.node_name, u.requests[GPU]) for u in usage) == sorted((u.node_name, u.requests[GPU]) for u in busy)
    topo = Topology.build(nodes, LEVELS)
    free = free_capacity(nodes, usage)
    feas = [n.name for n in nodes if node_rejection(n, free[n.name], req) is None]
    ours = plan_gang(req, nodes, usage, LEVELS, topology=topo)
    assert isinstance(ours, Placement), ours
    rand = sorted(rng.sample(feas, args.gang), key=pos.get)
    spr = spread(nodes, free, req, rng)
    lb_nodes = compact_nodes(args.gang, nodes, topo, dict(req.requests))

    # (3) the gang as plain pods; the default scheduler binds them.
    runs = []
    for r in range(args.repeats):
        sel = f"app=gang,run=r{r}"
        labels = {"app": "gang", "run": f"r{r}", "training.kubeflow.org/job-name": "llm-8b",
                  "training.kubeflow.org/replica-type": "worker"}
        names = [f"llm-8b-r{r}-worker-{i}" for i in range(args.gang)]
        ts = time.monotonic()
        for i, name in enumerate(names):  # one by one, in rank order, like an operator's loop
            b.core.create_namespaced_pod(NS, pod(name, 8, {**labels, "training.kubeflow.org/replica-index": str(i)}))
        def all_bound(sel=sel):
            ps = b.pods(sel)
            return ps if len(ps) == args.gang and all(p["spec"].get("nodeName") for p in ps) else None
        bound = wait_for("gang bound", all_bound, 120)
        bind_s = time.monotonic() - ts
        by_name = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in bound}
        placed = [by_name[n] for n in names]  # rank i = worker-i
        assert len(set(placed)) == args.gang
        bad = [x for x in placed if x not in feas]  # a node without 8 free GPUs would be a bench error
        assert not bad, f"kube-scheduler used nodes that were not free: {bad}"
        runs.append((placed, bind_s))
        log(f"{kind}: run {r + 1}: {args.gang} pods bound in {bind_s:.1f}s, span {topo.span(placed)}: "
            + " ".join(placed))
        b.delete_pods(sel)
        time.sleep(1.0)  # scheduler cache sees the deletions before the next run

    b.delete_pods("app=filler")
    b.delete_nodes()
    log(f"{kind}: cleaned up ({time.monotonic() - t0:.1f}s)")

    lb = allreduce_estimate(lb_nodes, topo, CFG, **kw)
    rows = []
    label = f"{kind} ({len(feas)} free)"
    for i, (placed, bind_s) in enumerate(runs):
        rows.append((label, f"**kube-scheduler, measured** (run {i + 1}, bound in {bind_s:.1f} s)", placed))
    rows += [(label, "phalanx (plan_gang)", ours.nodes), (label, "random", rand),
             (label, "spread (simulated LeastAllocated)", spr), (label, "lower bound (empty)", lb_nodes)]
    out = []
    for lab, name, placed in rows:
        est = allreduce_estimate(placed, topo, CFG, **kw)
        sp = topo.span(placed)
        out.append((lab, name, f"{sp['block']}/{sp['subblock']}", est.bottleneck.level,
                    est.ring_seconds, est.hierarchical_seconds, est.ring_seconds / lb.ring_seconds))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--subblocks", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--gang", type=int, default=32, help="gang size in nodes (pods of 8 GPUs)")
    ap.add_argument("--repeats", type=int, default=3, help="gang submissions per cluster shape")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--kubeconfig", help="use this running cluster instead of starting one")
    ap.add_argument("--work-dir", help="work dir of the cluster started here (default: a temp dir)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t_start = time.monotonic()

    spec = TrainingJobSpec(image="x", nodes=args.gang, procs_per_node=8, resources={"gpus": 8},
                           model={"preset": "8b"}, parallelism={"zero": 1})
    req = GangRequest.from_spec(spec, f"{NS}/llm-8b")
    kw = dict(size_bytes=gradient_bytes(model_params(spec)), procs_per_node=8)
    topo_doc = {
        "name": "pq", "namePrefix": "gpu", "cliqueLevel": "node",
        "layout": {"block": args.blocks, "subblock": args.subblocks, "rack": 1, "node": args.hosts},
        "node": {"gpu": 8, "labels": {BENCH_LABEL: BENCH_VALUE}},
    }

    cluster = None
    if args.kubeconfig:
        kubeconfig = Path(args.kubeconfig)
    else:
        wd = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="phalanx-pds-"))
        cluster = LocalCluster(work_dir=wd).start()
        kubeconfig = cluster.kubeconfig
        log(f"local cluster up in {wd} ({time.monotonic() - t_start:.1f}s)")
    try:
        b = Bench(kubeconfig)
        version = b.server_version()
        b.ensure_namespace()
        if b.nodes():
            b.delete_nodes()
        rows = []
        for kind in args.kinds.split(","):
            rows += run_shape(b, kind, topo_doc, args, rng, spec, req, kw)
    finally:
        if cluster is not None:
            cluster.stop()

    n_nodes = args.blocks * args.subblocks * args.hosts
    print(f"Cluster: {args.blocks} blocks × {args.subblocks} subblocks × {args.hosts} hosts = {n_nodes} kwok nodes "
          f"of 8 GPUs; gang: {args.gang} plain pods × 8 GPUs; job: 8B ZeRO-1 "
          f"({kw['size_bytes'] / 1e9:.0f} GB fp32 gradients, {args.gang * 8} ranks); seed {args.seed}")
    print(f"kube-apiserver/kube-scheduler {version}, python {platform.python_version()}, "
          f"kubernetes client {__import__('kubernetes').__version__}, {os.cpu_count()} CPUs; "
          f"total {time.monotonic() - t_start:.0f} s")
    print()
    print("| cluster | placement | span block/subblock | bottleneck | ring (s) | hierarchical (s) | vs lower bound |")
    print("|---|---|---|---|---|---|---|")
    for lab, name, sp, bott, ring, hier, ratio in rows:
        print(f"| {lab} | {name} | {sp} | {bott} | {ring:.3f} | {hier:.3f} | {ratio:.2f}× |")

    # The same, one line per cluster shape (the format of the simulated table in docs/benchmarks.md).
    print()
    print("Ring seconds (× lower bound), span blocks/subblocks:")
    print()
    print(f"| fragmentation (free nodes) | kube-scheduler, measured ({args.repeats} runs) | phalanx | random "
          "| spread (simulated LeastAllocated) | lower bound (empty cluster) |")
    print("|---|---|---|---|---|---|")
    by_kind: dict[str, list] = {}
    for r in rows:
        by_kind.setdefault(r[0], []).append(r)
    for lab, rs in by_kind.items():
        ks = [r for r in rs if r[1].startswith("**kube-scheduler")]
        rest = {r[1].split(" (")[0]: r for r in rs if r not in ks}
        rings = sorted({f"{r[4]:.3f} ({r[6]:.2f}×)" for r in ks})
        cell = lambda r: f"{r[4]:.3f} ({r[6]:.2f}×), {r[2]}"  # noqa: E731
        lb = rest["lower bound"]
        print(f"| {lab} | {' / '.join(rings)}, {', '.join(r[2] for r in ks)} | {cell(rest['phalanx'])} "
              f"| {cell(rest['random'])} | {cell(rest['spread'])} | {lb[4]:.3f}, {lb[2]} |")

if __name__ == "__main__":
    main()
