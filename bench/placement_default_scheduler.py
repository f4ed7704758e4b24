"""Phalanx native vs kube-scheduler 1.36 topology-aware workloads vs plain kube-scheduler, measured.

Starts a local control plane (``localcluster``: etcd, kube-apiserver, kube-controller-manager,
the real kube-scheduler v1.36 with its default profile, kwok playing the nodes) with the alpha
Workload API feature set (``features=["workload"]``: GenericWorkload, GangScheduling,
TopologyAwareWorkloadScheduling, scheduling.k8s.io/v1alpha2), the TrainingJob CRD and the real
Phalanx operator (``phalanx operator``, default config), and, for each fragmented cluster of
``bench/placement_quality.py``:

1. creates the kwok Nodes: ``--blocks`` × ``--subblocks`` × ``--hosts`` nodes of 8 GPUs with the
   block/subblock labels of the operator's default topology levels;
2. occupies capacity exactly like that benchmark's fragmentation pattern (its ``fragment``
   function), with one filler pod per busy node bound directly (``spec.nodeName``, no scheduler);
3. places the same gang of ``--gang`` pods × 8 GPUs, ``--repeats`` times each, deleting it in between:
   * **plain kube-scheduler**: plain pods (no gates, no group, ranks = pod index) created one by
     one, as a non-gang operator (Kubeflow training-operator) would;
   * **phalanx native**: a TrainingJob (``scheduling.backend: native``, no topology request) —
     the operator creates the gated pods, plans the gang, pins and releases it;
   * **kube-scheduler TAS workload**: a TrainingJob with ``scheduling.backend: workload`` and
     ``topology.required: block`` (``--tas-level``; the API has no soft constraint and a
     32-node gang cannot fit one 16-host subblock) — the operator creates the Workload, the
     PodGroup (``schedulingConstraints.topology: [{key: phalanx.dev/topology-block}]``) and
     ungated pods; kube-scheduler places the whole group in the best feasible block or nothing;
4. reads nodes and pods back from the API and predicts the 8B ZeRO-1 gradient allreduce (same
   model, job shape and link figures as the simulated rows) for each measured placement, and for
   Phalanx's planner on the same inventory (``plan_gang``), random feasible nodes, the simulated
   LeastAllocated spread of placement_quality.py and the lower bound (``compact_nodes``);
5. ``--cannot-fit``: a gang of (free nodes + 4) pods, per approach, watched for
   ``--watch`` seconds: how many pods get bound (= nodes held by a gang that cannot run) and the
   reason each reports;

then deletes pods and nodes before the next shape. Prints Markdown tables. The functions are
importable (``Bench``, ``setup_shape``, ``run_plain``, ``run_job``, ``watch_partial``) for other
comparisons (e.g. Kueue TAS) on the same shapes.

    python bench/placement_default_scheduler.py [--seed 0] [--blocks 4 --subblocks 4 --hosts 16 --gang 32]
    python bench/placement_default_scheduler.py --kubeconfig KC   # a running cluster (with the CRD)

Needs the cluster binaries (``make cluster-binaries``) and the ``kubernetes`` client.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hack" / "cluster"))  # localcluster (dev-only)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.integration.harness (operator process)

from placement_quality import CFG, GPU, LEVELS, fragment, spread  # noqa: E402

from localcluster import LocalCluster, api_client, create_nodes  # noqa: E402
from localcluster.topology import node_manifests, parse_topology  # noqa: E402
from phalanx import constants  # noqa: E402
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
        self.custom = client.CustomObjectsApi(self.api)
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


def setup_shape(b: Bench, kind: str, topo_doc: dict, rng: random.Random, req: GangRequest) -> dict:
    """Nodes + fragmentation fillers; returns what the planners see (nodes, usage, topo, free nodes, order)."""
    t0 = time.monotonic()
    ktopo = parse_topology(topo_doc)
    order = [m["metadata"]["name"] for m in node_manifests(ktopo)]  # tree order, as cluster() in placement_quality
    create_nodes(b.kubeconfig, ktopo, workers=8)

    def nodes_ready():
        it = b.nodes()
        return it if all_untainted_ready(it, len(order)) else None
    items = wait_for("nodes Ready without taints", nodes_ready, 120)
    log(f"{kind}: {len(items)} nodes Ready ({time.monotonic() - t0:.1f}s)")

    # fill exactly like placement_quality's fragmentation, binding directly.
    pos = {name: i for i, name in enumerate(order)}
    inv0 = sorted(nodes_from_list(items), key=lambda n: pos[n.name])
    busy = fragment(inv0, kind, rng)
    b.create_pods([pod(f"fill-{u.node_name}", u.requests[GPU], {"app": "filler"}, node=u.node_name) for u in busy])

    def fillers_running():
        ps = b.pods("app=filler")
        return len(ps) == len(busy) and all(p["status"].get("phase") == "Running" for p in ps)
    wait_for("filler pods Running", fillers_running, 120)
    time.sleep(2.0)  # let kube-scheduler's (and the operator's) informer caches take in the last fillers
    log(f"{kind}: {len(busy)} filler pods Running ({time.monotonic() - t0:.1f}s)")

    nodes = sorted(nodes_from_list(b.nodes()), key=lambda n: pos[n.name])
    usage = pods_from_list(b.pods("app=filler"))
    assert sorted((u.node_name, u.requests[GPU]) for u in usage) == sorted((u.node_name, u.requests[GPU]) for u in busy)
    topo = Topology.build(nodes, LEVELS)
    free = free_capacity(nodes, usage)
    feas = [n.name for n in nodes if node_rejection(n, free[n.name], req) is None]
    return {"nodes": nodes, "usage": usage, "topo": topo, "free": free, "feas": feas, "pos": pos}


def run_plain(b: Bench, tag: str, n: int, timeout: float = 120.0) -> tuple[list[str] | None, float]:
    """``n`` plain pods created one by one in rank order; (nodes by rank, seconds to all bound)."""
    sel = f"app=gang,run={tag}"
    labels = {"app": "gang", "run": tag, "training.kubeflow.org/job-name": "llm-8b",
              "training.kubeflow.org/replica-type": "worker"}
    names = [f"llm-8b-{tag}-worker-{i}" for i in range(n)]
    ts = time.monotonic()
    for i, name in enumerate(names):  # one by one, in rank order, like an operator's loop
        b.core.create_namespaced_pod(NS, pod(name, 8, {**labels, "training.kubeflow.org/replica-index": str(i)}))

    def all_bound():
        ps = b.pods(sel)
        return ps if len(ps) == n and all(p["spec"].get("nodeName") for p in ps) else None
    got = wait_for("plain gang bound", all_bound, timeout)
    secs = time.monotonic() - ts
    by_name = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in got}
    b.delete_pods(sel)
    return [by_name[x] for x in names], secs


def job_manifest(name: str, n: int, backend: str = "native", required: str | None = None) -> dict:
    """A TrainingJob of ``n`` pods × 8 GPUs on the bench nodes (the operator renders the rest)."""
    scheduling: dict = {"backend": backend, "gangTimeoutSeconds": 0}
    if required:
        scheduling["topology"] = {"required": required}
    return {"apiVersion": f"{constants.GROUP}/{constants.VERSION}", "kind": constants.KIND, "metadata": {"name": name},
            "spec": {"image": "phalanx/runtime:bench", "nodes": n, "procsPerNode": 8,
                     "resources": {"gpus": 8, "cpu": "1", "memory": "1Gi"}, "model": {"preset": "debug"},
                     "training": {"globalBatchSize": n * 8}, "nodeSelector": {BENCH_LABEL: BENCH_VALUE},
                     "scheduling": scheduling}}


def job_selector(name: str) -> str:
    return f"{constants.LABEL_JOB_NAME}={name}"


def job_condition(b: Bench, name: str, type_: str = "Schedulable") -> dict:
    obj = b.custom.get_namespaced_custom_object(constants.GROUP, constants.VERSION, NS, constants.PLURAL, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def run_job(b: Bench, manifest: dict, timeout: float = 120.0) -> tuple[list[str] | None, float, str]:
    """Create the TrainingJob; (nodes by node-rank or None, seconds create → all bound, why not).
    Gives up early when the job says Schedulable=False (a gang that will not be placed)."""
    name, n = manifest["metadata"]["name"], manifest["spec"]["nodes"]
    ts = time.monotonic()
    b.custom.create_namespaced_custom_object(constants.GROUP, constants.VERSION, NS, constants.PLURAL, manifest)
    placed, note = None, ""
    deadline = ts + timeout
    while time.monotonic() < deadline:
        ps = b.pods(job_selector(name))
        if len(ps) == n and all(p["spec"].get("nodeName") for p in ps):
            ranks = {int(p["metadata"]["labels"][constants.LABEL_NODE_RANK]): p["spec"]["nodeName"] for p in ps}
            placed = [ranks[r] for r in range(n)]
            break
        cond = job_condition(b, name)
        if cond.get("status") == "False" and time.monotonic() - ts > 5:
            note = f"{cond.get('reason')}: {cond.get('message')}"
            if not any(p["spec"].get("nodeName") for p in ps):
                break
        time.sleep(0.1)
    secs = time.monotonic() - ts
    if placed is None and not note:
        note = f"not placed in {timeout:.0f}s"
    delete_job(b, name)
    return placed, secs, note


def delete_job(b: Bench, name: str) -> None:
    b.custom.delete_namespaced_custom_object(constants.GROUP, constants.VERSION, NS, constants.PLURAL, name, body={"propagationPolicy": "Background"})
    wait_for(f"{name}'s pods gone", lambda: not b.pods(job_selector(name)), 120)
    time.sleep(1.0)  # scheduler cache sees the deletions before the next run


def watch_partial(b: Bench, selector: str, seconds: float) -> dict:
    """Watch pods of ``selector`` for ``seconds``: most bound at once, when the first bound, bound at the end."""
    ts = time.monotonic()
    most, first, last = 0, None, 0
    while time.monotonic() - ts < seconds:
        bound = sum(1 for p in b.pods(selector) if p["spec"].get("nodeName"))
        most = max(most, bound)
        if bound and first is None:
            first = time.monotonic() - ts
        last = bound
        time.sleep(0.5)
    return {"most": most, "first_s": first, "end": last, "watched_s": seconds}


def cannot_fit(b: Bench, kind: str, n: int, seconds: float, tas_level: str) -> list[tuple]:
    """A gang of ``n`` (> free nodes) per approach: what does each hold while it cannot run?"""
    out = []
    tag = "nofit"
    labels = {"app": "gang", "run": tag}
    for i in range(n):
        b.core.create_namespaced_pod(NS, pod(f"nofit-worker-{i}", 8, labels))
    w = watch_partial(b, f"app=gang,run={tag}", seconds)
    b.delete_pods(f"app=gang,run={tag}")
    out.append((kind, "plain kube-scheduler", n, w, "pods Pending: Insufficient nvidia.com/gpu (the bound ones keep their nodes)"))
    for label, manifest in (("phalanx native", job_manifest("nofit-native", n)),
                            ("kube-scheduler gang workload (no topology)", job_manifest("nofit-wl", n, "workload")),
                            (f"kube-scheduler TAS workload (required {tas_level})", job_manifest("nofit-tas", n, "workload", tas_level))):
        name = manifest["metadata"]["name"]
        b.custom.create_namespaced_custom_object(constants.GROUP, constants.VERSION, NS, constants.PLURAL, manifest)
        w = watch_partial(b, job_selector(name), seconds)
        cond = job_condition(b, name)
        out.append((kind, label, n, w, f"Schedulable={cond.get('status')} {cond.get('reason')}: {cond.get('message', '')}"))
        delete_job(b, name)
    for row in out:
        log(f"{kind}: cannot fit ({n} pods): {row[1]}: {row[3]} — {row[4][:160]}")
    return out


def run_shape(b: Bench, kind: str, topo_doc: dict, args, rng: random.Random, spec, req, kw) -> tuple[list[tuple], list[tuple]]:
    t0 = time.monotonic()
    sh = setup_shape(b, kind, topo_doc, rng, req)
    nodes, usage, topo, free, feas, pos = (sh[k] for k in ("nodes", "usage", "topo", "free", "feas", "pos"))
    ours = plan_gang(req, nodes, usage, LEVELS, topology=topo)
    assert isinstance(ours, Placement), ours
    rand = sorted(rng.sample(feas, args.gang), key=pos.get)
    spr = spread(nodes, free, req, rng)
    lb_nodes = compact_nodes(args.gang, nodes, topo, dict(req.requests))

    measured: list[tuple[str, list[str] | None, float, str]] = []  # (approach, placed, seconds, note)
    for r in range(args.repeats):
        placed, secs = run_plain(b, f"r{r}", args.gang)
        measured.append(("kube-scheduler, plain pods", placed, secs, ""))
        log(f"{kind}: plain run {r + 1}: bound in {secs:.1f}s, span {topo.span(placed)}")
        time.sleep(1.0)
    approaches = [("phalanx native (operator)", "native", None),
                  (f"kube-scheduler TAS workload (required {args.tas_level})", "workload", args.tas_level)]
    if args.gang_only:
        approaches.append(("kube-scheduler gang workload (no topology)", "workload", None))
    for r in range(args.repeats):
        for label, backend, level in approaches:
            name = f"{backend}-{level or 'any'}-r{r}"
            placed, secs, note = run_job(b, job_manifest(name, args.gang, backend, level), args.timeout)
            measured.append((label, placed, secs, note))
            log(f"{kind}: {label} run {r + 1}: " + (f"bound in {secs:.1f}s, span {topo.span(placed)}" if placed
                                                     else f"NOT placed after {secs:.1f}s: {note[:200]}"))
    nofit = cannot_fit(b, kind, len(feas) + 4, args.watch, args.tas_level) if args.cannot_fit else []

    b.delete_pods("app=filler")
    b.delete_nodes()
    log(f"{kind}: cleaned up ({time.monotonic() - t0:.1f}s)")

    lb = allreduce_estimate(lb_nodes, topo, CFG, **kw)
    label = f"{kind} ({len(feas)} free)"
    out = []
    runs: dict[str, int] = {}
    for name, placed, secs, note in measured:
        runs[name] = runs.get(name, 0) + 1
        title = f"**{name}, measured** (run {runs[name]})"
        if placed is None:
            out.append((label, title, "—", "—", None, None, None, secs, note))
            continue
        est = allreduce_estimate(placed, topo, CFG, **kw)
        sp = topo.span(placed)
        out.append((label, title, f"{sp['block']}/{sp['subblock']}", est.bottleneck.level, est.ring_seconds,
                    est.hierarchical_seconds, est.ring_seconds / lb.ring_seconds, secs, note))
    for name, placed in (("phalanx plan_gang (simulated, same inventory)", ours.nodes), ("random", rand),
                         ("spread (simulated LeastAllocated)", spr), ("lower bound (empty)", lb_nodes)):
        est = allreduce_estimate(placed, topo, CFG, **kw)
        sp = topo.span(placed)
        out.append((label, name, f"{sp['block']}/{sp['subblock']}", est.bottleneck.level, est.ring_seconds,
                    est.hierarchical_seconds, est.ring_seconds / lb.ring_seconds, None, ""))
    return out, nofit


def start_cluster_and_operator(work: Path, features=("workload",)):
    """A feature-gated LocalCluster with the CRD and a running operator: (cluster, operator)."""
    from tests.integration.harness import CRD_FILE, OperatorProcess

    cluster = LocalCluster(work_dir=work, features=list(features)).start()
    kc = f"--kubeconfig={cluster.kubeconfig}"
    subprocess.run([cluster.kubectl, kc, "apply", "--server-side", "-f", str(CRD_FILE)], check=True, capture_output=True)
    subprocess.run([cluster.kubectl, kc, "wait", "--for=condition=Established", "--timeout=60s",
                    f"crd/{constants.PLURAL}.{constants.GROUP}"], check=True, capture_output=True)
    op = OperatorProcess(cluster.kubeconfig, work).start()
    return cluster, op


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--subblocks", type=int, default=4)
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--gang", type=int, default=32, help="gang size in nodes (pods of 8 GPUs)")
    ap.add_argument("--repeats", type=int, default=3, help="gang submissions per approach and cluster shape")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--tas-level", default="block", help="topology.required of the TAS workload runs")
    ap.add_argument("--gang-only", action="store_true", help="also a workload run without topology constraint")
    ap.add_argument("--cannot-fit", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--watch", type=float, default=20.0, help="seconds to watch each gang that cannot fit")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a gang to be bound")
    ap.add_argument("--kubeconfig", help="use this running cluster (CRD installed, operator running) instead")
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

    cluster = op = None
    if args.kubeconfig:
        kubeconfig = Path(args.kubeconfig)
    else:
        wd = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="phalanx-pds-"))
        cluster, op = start_cluster_and_operator(wd)
        kubeconfig = cluster.kubeconfig
        log(f"local cluster (features: workload) + operator up in {wd} ({time.monotonic() - t_start:.1f}s)")
    try:
        b = Bench(kubeconfig)
        version = b.server_version()
        b.ensure_namespace()
        if b.nodes():
            b.delete_nodes()
        rows, nofit = [], []
        for kind in args.kinds.split(","):
            r, nf = run_shape(b, kind, topo_doc, args, rng, spec, req, kw)
            rows += r
            nofit += nf
    finally:
        if op is not None:
            op.stop()
        if cluster is not None:
            cluster.stop()

    n_nodes = args.blocks * args.subblocks * args.hosts
    print(f"Cluster: {args.blocks} blocks × {args.subblocks} subblocks × {args.hosts} hosts = {n_nodes} kwok nodes "
          f"of 8 GPUs; gang: {args.gang} pods × 8 GPUs; job: 8B ZeRO-1 "
          f"({kw['size_bytes'] / 1e9:.0f} GB fp32 gradients, {args.gang * 8} ranks); seed {args.seed}")
    print(f"kube-apiserver/kube-scheduler {version} (GenericWorkload, GangScheduling, TopologyAwareWorkloadScheduling on), "
          f"python {platform.python_version()}, kubernetes client {__import__('kubernetes').__version__}, "
          f"{os.cpu_count()} CPUs; total {time.monotonic() - t_start:.0f} s")
    print()
    print("| cluster | placement | span block/subblock | bottleneck | ring (s) | hierarchical (s) | vs lower bound | create → all bound (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for lab, name, sp, bott, ring, hier, ratio, secs, note in rows:
        t = f"{secs:.1f}" if secs is not None else ""
        if ring is None:
            print(f"| {lab} | {name} | not placed | — | — | — | — | {note[:160]} (gave up after {secs:.0f} s) |")
        else:
            print(f"| {lab} | {name} | {sp} | {bott} | {ring:.3f} | {hier:.3f} | {ratio:.2f}× | {t} |")
    if nofit:
        print()
        print(f"A gang that cannot fit (free nodes + 4 pods), watched {args.watch:.0f} s:")
        print()
        print("| cluster | approach | gang | most pods bound | first bound after (s) | still bound at the end | what it says |")
        print("|---|---|---|---|---|---|---|")
        for kind, approach, n, w, says in nofit:
            first = f"{w['first_s']:.1f}" if w["first_s"] is not None else "—"
            print(f"| {kind} | {approach} | {n} | {w['most']} | {first} | {w['end']} | {says[:200]} |")


if __name__ == "__main__":
    main()
