"""Recovery: time from a failure to the gang running again, by failure kind and restart path.

Three parts, each selectable (``--parts kwok,kind,checkpoint``):

* ``kwok``: the control-plane part on the local control plane (bench/operator_scale.py's harness:
  kwok nodes, the operator as a process, one TrainingJob of one 8-GPU pod per node), at each of
  ``--scales`` (default 64,512), the trials of ``--trials`` in the same cluster, one at a time, each
  in a fresh namespace with its own operator (``backoffSeconds: 0``):

  - ``recreate`` (restartInPlace off): one pod's trainer exits 137 (its status patched Failed, as a
    kubelet would) → every pod of the new attempt Running;
  - ``in-place`` (restartInPlace on; the nodes declare RestartAllContainersOnContainerExits so the
    operator's discovery turns it on): kwok runs no containers, so the bench plays the kubelet: it
    marks one pod's trainer restarted (restartCount+1, lastState terminated with exit 75) through
    the status subresource → the operator counted the restart and asked every other pod (the
    ``phalanx.dev/restart-request`` annotation), while all pods stayed Running (checked);
  - ``node-loss`` (restartInPlace off): one pod's node is deleted → every pod of the new attempt
    Running (the operator's reaction to node loss, whichever path it takes);
  - ``replace-node``: the same node loss in a gang that restarts in place (as ``in-place``; the
    operator's replaceLostNodes on by default, ``--replace-config`` merged into its config) → the
    lost rank's pod Running again on another node, reported with how many of the other pods kept
    their UID (all of them: a single-node replacement; none: a gang recreate) and the job's
    status.nodeReplacement (the spare, its domain);
  - ``hang`` (hangTimeoutSeconds ``--hang-timeout``): kwok pods report no step progress, so the
    gang hangs from the moment it runs → the operator's restart; reported as the timeout and the
    overshoot past it.

  Detection: failure → the first status the bench's watch sees with the restart counted (status
  .restarts up, the Restarting condition's reason and status.lastFailure recorded).

* ``kind``: a real cluster ($KUBECONFIG, e.g. ``hack/kind-e2e.sh up``; one pod per worker node, so
  ``--kind-pods`` at most the workers): a data-parallel job with a checkpoint every 5 steps applied
  afresh (bench/startup.py: apply → first step, status.startup), its first checkpoint awaited,
  then rank 1's worker processes SIGKILLed (``kubectl exec``) → the first step after it in the
  status; in place (the operator's restartInPlace on), then recreate (off: its ConfigMap patched
  and the operator restarted; put back after), next to the job's own start-up.

* ``checkpoint``: save and restore of a sharded DCP checkpoint by the runtime's checkpointer
  (``--ckpt-mb`` of parameters, 2 ranks on this machine) in GB/s, against ``dd`` on the same
  directory (write with conv=fdatasync; read after dropping the page cache, else with iflag=direct).

    python bench/recovery.py --parts kwok --scales 64,512 --trials recreate,in-place,node-loss,replace-node,hang
    python bench/recovery.py --parts checkpoint
    KUBECONFIG=... python bench/recovery.py --parts kind

Prints the tables and writes the results as JSON (``--json``); docs/benchmarks.md, "Recovery".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# This checkout's code, here and in the operator processes the trials start (they inherit the
# environment): an installed phalanx may be another checkout's.
SOURCES = [str(ROOT / part) for part in ("operator", "runtime", "common")] + [str(ROOT)]
sys.path[:0] = SOURCES
os.environ["PYTHONPATH"] = os.pathsep.join([*SOURCES, *filter(None, [os.environ.get("PYTHONPATH")])])

from bench.operator_scale import (  # noqa: E402
    CACHE,
    PHALANX_CRD,
    TOPOLOGY,
    Phalanx,
    PodWatch,
    _exists,
    drop_namespace,
    kubectl,
    log,
    trainingjob,
    wait_for,
)
from localcluster import LocalCluster, api_client, create_nodes, node_manifests, parse_topology  # noqa: E402
from phalanx import constants  # noqa: E402
from phalanx_common.contract import StartupPhase  # noqa: E402

EXIT_KILLED = 137
KWOK_TRIALS = ("recreate", "in-place", "node-loss", "replace-node", "hang")
IN_PLACE_TRIALS = ("in-place", "replace-node")  # a lost node is replaced alone only in a gang that restarts in place


# ---- what the watches saw (pure) ------------------------------------------------------------


@dataclass(frozen=True)
class PodEvent:
    """One watch event of one pod, as far as recovery needs it."""

    t: float
    kind: str  # ADDED, MODIFIED, DELETED
    name: str
    uid: str
    phase: str
    node: str
    requested: int  # the phalanx.dev/restart-request annotation (0: none)
    restarts: int  # the trainer container's restartCount


def replay(events: list[PodEvent], until: float) -> dict[str, PodEvent]:
    """Each pod's last event at or before ``until`` (by UID; deleted pods left out)."""
    state: dict[str, PodEvent] = {}
    for ev in events:
        if ev.t > until:
            break
        if ev.kind == "DELETED":
            state.pop(ev.uid, None)
        else:
            state[ev.uid] = ev
    return state


def first_time(events: list[PodEvent], after: float, pred) -> float | None:
    """The first event time ≥ ``after`` at which ``pred(pods)`` holds for the pods then alive."""
    state: dict[str, PodEvent] = {}
    for ev in events:
        if ev.kind == "DELETED":
            state.pop(ev.uid, None)
        else:
            state[ev.uid] = ev
        if ev.t >= after and pred(state):
            return ev.t
    return None


def new_gang_running(n: int, old: set[str]):
    """Predicate: ``n`` pods that were not in ``old`` Running."""
    return lambda pods: sum(1 for p in pods.values() if p.uid not in old and p.phase == "Running") >= n


def all_asked(n: int, target: int, kept: set[str]):
    """Predicate: the ``n`` pods of ``kept`` alive, Running, each restarted or asked to reach ``target``."""
    def pred(pods: dict[str, PodEvent]) -> bool:
        mine = [p for p in pods.values() if p.uid in kept]
        return len(mine) == n and all(p.phase == "Running" and max(p.requested, p.restarts) >= target for p in mine)
    return pred


def replaced(n: int, old: set[str]):
    """Predicate: ``n`` pods Running of which at least one is new (the lost rank's replacement)."""
    def pred(pods: dict[str, PodEvent]) -> bool:
        running = [p for p in pods.values() if p.phase == "Running"]
        return len(running) >= n and any(p.uid not in old for p in running)
    return pred


def last_replacement(history: list[tuple[float, dict[str, Any]]]) -> dict[str, Any]:
    """The newest status.nodeReplacement the job watch saw: the spare, its domain ('' or None: the
    gang's nodes share none), the message."""
    record = next((status["nodeReplacement"] for _, status in reversed(history) if status.get("nodeReplacement")), {})
    return {key: record.get(key) for key in ("newNode", "domain", "message")}


def median(values: list[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


# ---- watches --------------------------------------------------------------------------------


class PodHistory(PodWatch):
    """operator_scale's pod watch, keeping every event (names and nodes repeat across attempts)."""

    def __init__(self, api, namespace: str) -> None:
        self.history: list[PodEvent] = []
        super().__init__(api, namespace)

    def _update(self, typ: str, pod: dict[str, Any], now: float) -> None:
        super()._update(typ, pod, now)
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        value = (meta.get("annotations") or {}).get(constants.ANNOTATION_RESTART_REQUEST, "")
        trainer = next((c for c in status.get("containerStatuses") or [] if c.get("name") == constants.CONTAINER_NAME), {})
        self.history.append(PodEvent(now, typ, meta["name"], meta["uid"], status.get("phase", ""),
                                     spec.get("nodeName", ""), int(value) if value.isdigit() else 0,
                                     trainer.get("restartCount") or 0))


class JobWatch(threading.Thread):
    """Every status of the TrainingJobs of one namespace, with the time the watch saw it."""

    def __init__(self, api, namespace: str) -> None:
        super().__init__(daemon=True)
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api)
        self.ns = namespace
        self.history: list[tuple[float, dict[str, Any]]] = []
        self.stopped = False

    def run(self) -> None:
        rv = None
        while not self.stopped:
            try:
                resp = self.custom.list_namespaced_custom_object(
                    "phalanx.dev", "v1alpha1", self.ns, "trainingjobs", watch=True, resource_version=rv,
                    timeout_seconds=600, _preload_content=False)
                for line in resp:
                    if self.stopped:
                        return
                    if line.strip():
                        ev = json.loads(line)
                        rv = ev["object"]["metadata"].get("resourceVersion", rv)
                        if ev["type"] in ("ADDED", "MODIFIED"):
                            self.history.append((time.time(), ev["object"].get("status") or {}))
            except Exception as exc:  # noqa: BLE001 - keep watching
                if not self.stopped:
                    log(f"job watch restarted: {exc}")
                    rv = None
                    time.sleep(0.5)

    def first(self, after: float, pred, timeout: float) -> tuple[float, dict[str, Any]]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for t, status in list(self.history):
                if t >= after and pred(status):
                    return t, status
            time.sleep(0.05)
        raise TimeoutError(f"no matching job status within {timeout} s (last: {self.history[-1:]})")


def restart_counted(status: dict[str, Any]) -> bool:
    return (status.get("restarts") or 0) >= 1


# ---- kwok: the control-plane part -----------------------------------------------------------


@dataclass
class KwokRun:
    """What a kwok trial needs of the cluster it runs on."""

    cluster: LocalCluster
    api: Any
    topology: Any
    work: Path
    hang_timeout: int
    replace_config: dict[str, Any]
    timeout: float


def declare_in_place(core, nodes: list[str]) -> None:
    """Every node's kubelet declares the in-place restart feature (kwok's declare none), so the
    operator's discovery turns in-place restarts on."""
    from concurrent.futures import ThreadPoolExecutor

    body = {"status": {"declaredFeatures": [constants.FEATURE_RESTART_ALL_CONTAINERS]}}
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda n: core.patch_node_status(n, body), nodes))


def play_in_place_restart(core, ns: str, name: str) -> None:
    """As the kubelet reports a trainer that exited 75 and was restarted in place."""
    pod = core.read_namespaced_pod(name, ns, _preload_content=False)
    status = json.loads(pod.data)["status"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for c in status["containerStatuses"]:
        if c["name"] == constants.CONTAINER_NAME:
            c["restartCount"] = (c.get("restartCount") or 0) + 1
            c["lastState"] = {"terminated": {"exitCode": constants.EXIT_RESTART_IN_PLACE, "reason": "Error",
                                             "startedAt": now, "finishedAt": now}}
            c["state"] = {"running": {"startedAt": now}}
    core.patch_namespaced_pod_status(name, ns, {"status": {"containerStatuses": status["containerStatuses"]}})


def fail_pod(core, ns: str, name: str) -> None:
    """As the kubelet reports a trainer killed (exit 137): the pod Failed."""
    from localcluster import finish_pod

    finish_pod(core.api_client, ns, name, EXIT_KILLED, via="status")


def restore_node(run: KwokRun, name: str) -> None:
    """The deleted node back, as the topology has it, Ready."""
    from kubernetes import client

    core = client.CoreV1Api(run.api)
    manifest = next(m for m in node_manifests(run.topology) if m["metadata"]["name"] == name)
    wait_for(lambda: not _exists(lambda: core.read_node(name)), 120, f"node {name} gone", 0.5)
    core.create_node(manifest)
    wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in core.read_node(name).status.conditions or []),
             120, f"node {name} Ready", 0.5)


def trial_config(trial: str, run: KwokRun) -> dict[str, Any]:
    config: dict[str, Any] = {"restartInPlace": trial in IN_PLACE_TRIALS}
    if trial == "replace-node":
        config.update(run.replace_config)
    return config


def job_manifest(trial: str, pods: int, hang_timeout: int) -> dict[str, Any]:
    job = trainingjob("rec", pods)
    job["spec"]["failurePolicy"] = {"backoffSeconds": 0, "maxRestarts": 3}
    if trial == "hang":
        job["spec"]["failurePolicy"]["hangTimeoutSeconds"] = hang_timeout
    return job


def kwok_trial(trial: str, tag: str, pods: int, run: KwokRun) -> dict[str, Any]:
    """One trial in a fresh namespace with its own operator; torn down after."""
    from kubernetes import client

    core = client.CoreV1Api(run.api)
    ns = f"rec-{tag}"
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: _exists(lambda: core.read_namespaced_service_account("default", ns)), 60, "default SA")
    if trial in IN_PLACE_TRIALS:
        declare_in_place(core, [n.metadata.name for n in core.list_node(label_selector="type=kwok").items])
    op = Phalanx(run.cluster.kubeconfig, run.work, trial_config(trial, run), kind=trial)
    op.start(tag)
    pod_watch, job_watch = PodHistory(run.api, ns), JobWatch(run.api, ns)
    pod_watch.start()
    job_watch.start()
    try:
        time.sleep(1.0)  # watches connected
        client.CustomObjectsApi(run.api).create_namespaced_custom_object(
            "phalanx.dev", "v1alpha1", ns, "trainingjobs", job_manifest(trial, pods, run.hang_timeout))
        pod_watch.wait(lambda: len(pod_watch.running) >= pods, run.timeout, f"{pods} pods Running")
        res = measure(trial, pods, run, core, ns, pod_watch, job_watch)
        res.update(trial=trial, tag=tag, pods=pods, loadavg=[round(x, 2) for x in os.getloadavg()])
        op.p.check()
        log(f"{tag}: {json.dumps(res)}")
        return res
    finally:
        teardown(run, core, ns, op, pod_watch, job_watch)


def teardown(run: KwokRun, core, ns: str, op: Phalanx, pod_watch: PodHistory, job_watch: JobWatch) -> None:
    from kubernetes import client

    try:
        client.CustomObjectsApi(run.api).delete_namespaced_custom_object(
            "phalanx.dev", "v1alpha1", ns, "trainingjobs", "rec", body={"propagationPolicy": "Background"})
        wait_for(lambda: not core.list_namespaced_pod(ns, limit=1).items, 180, "pods deleted", 1.0)
    except Exception as exc:  # noqa: BLE001 - a failed trial still tears down what it can
        log(f"{ns}: teardown: {exc}")
    pod_watch.stopped = job_watch.stopped = True
    drop_namespace(core, ns, op, ns)


def victim_of(pod_watch: PodHistory, now: float) -> PodEvent:
    """The pod of the gang's middle rank (by name order)."""
    alive = sorted(replay(pod_watch.history, now).values(), key=lambda p: p.name)
    return alive[len(alive) // 2]


def measure(trial: str, pods: int, run: KwokRun, core, ns: str, pod_watch: PodHistory,
            job_watch: JobWatch) -> dict[str, Any]:
    """Inject the trial's failure; the seconds to detection and to the trial's recovery."""
    t_running = max(pod_watch.running.values())
    time.sleep(2.0)  # the operator has seen the gang Running
    before = replay(pod_watch.history, time.time())
    old = set(before)
    victim = victim_of(pod_watch, time.time())
    res: dict[str, Any] = {}
    if trial == "in-place":
        spec = core.read_namespaced_pod(victim.name, ns).spec
        trainer = next(c for c in spec.containers if c.name == constants.CONTAINER_NAME)
        if not getattr(trainer, "restart_policy_rules", None):
            raise RuntimeError("the gang's pods carry no restart rules: the operator found in-place restarts off")
    t_fail = time.time()
    if trial == "recreate":
        fail_pod(core, ns, victim.name)
    elif trial == "in-place":
        play_in_place_restart(core, ns, victim.name)
    elif trial in ("node-loss", "replace-node"):
        core.delete_node(victim.node)
    else:  # hang: no failure to inject; the clock is the gang's own start
        t_fail = t_running
        res["hang_timeout_s"] = run.hang_timeout
    t_seen, status = job_watch.first(t_fail, restart_counted, run.timeout)
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Restarting"), {})
    res.update(detect_s=round(t_seen - t_fail, 3), reason=cond.get("reason"),
               last_failure=(status.get("lastFailure") or {}).get("category"),
               restart_mode=status.get("lastRestartMode"))
    if trial == "hang":
        res["overshoot_s"] = round(t_seen - t_fail - run.hang_timeout, 3)
    recovered = recovery_predicate(trial, pods, old, victim)
    pod_watch.wait(lambda: first_time(pod_watch.history, t_fail, recovered) is not None, run.timeout,
                   f"{trial} recovery")
    t_done = first_time(pod_watch.history, t_fail, recovered)
    after = replay(pod_watch.history, t_done)
    lost = {victim.uid} if trial in ("node-loss", "replace-node") else set()  # its pod may linger until deleted
    res.update(recover_s=round(t_done - t_fail, 3), pods_kept=len((old - lost) & set(after)),
               victim_node=victim.node, new_nodes=sorted({p.node for p in after.values() if p.uid not in old})[:4])
    if trial == "replace-node":
        res["node_replacement"] = last_replacement(job_watch.history)
    if trial in ("node-loss", "replace-node"):
        restore_node(run, victim.node)
    return res


def recovery_predicate(trial: str, pods: int, old: set[str], victim: PodEvent):
    if trial == "in-place":
        return all_asked(pods, 1, old)
    if trial == "replace-node":
        return replaced(pods, old)
    return new_gang_running(pods, old)


def run_kwok(scales: list[int], trials: list[str], repeat: int, args) -> dict[str, Any]:
    """One local cluster, sized for the largest scale with a spare node per rack; every trial
    at every scale, ``repeat`` times, in the order given."""
    work = args.work_dir or CACHE / "recovery" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    import yaml

    small = ROOT / "hack" / "cluster" / "topologies" / "fattree-64.yaml"
    topo_doc = yaml.safe_load(small.read_text()) if max(scales) <= 64 else json.loads(json.dumps(TOPOLOGY))
    # A ninth node per rack: free nodes for the replace-node trial. The gang fills whole racks in
    # topology order, so they are the nodes after it (its own block's at 64 pods; block 3's at 512).
    topo_doc["layout"]["node"] += 1
    topo_doc["name"] = "recovery"
    topology = parse_topology(topo_doc)
    results: list[dict[str, Any]] = []
    cluster = LocalCluster(work_dir=work / "cluster")
    with cluster:
        t = time.time()
        create_nodes(cluster.kubeconfig, topology)
        log(f"{topology.node_count} nodes Ready in {time.time() - t:.1f} s (work dir {work})")
        kubectl(cluster, "apply", "--server-side", "-f", str(PHALANX_CRD.parent))  # the node-health CRD too
        wait_for(lambda: "True" in kubectl(cluster, "get", "crd", "trainingjobs.phalanx.dev", "-o",
                                           "jsonpath={.status.conditions[?(@.type=='Established')].status}"),
                 120, "the TrainingJob CRD Established", 1.0)
        api = api_client(cluster.kubeconfig, pool_size=16)
        run = KwokRun(cluster, api, topology, work, args.hang_timeout, json.loads(args.replace_config), args.timeout)
        for r in range(repeat):
            for pods in scales:
                for trial in trials:
                    tag = f"{pods}-{trial}-{r}"
                    try:
                        results.append(kwok_trial(trial, tag, pods, run))
                    except Exception as exc:  # noqa: BLE001 - record it, go on with the next trial
                        log(f"{tag}: failed: {exc}")
                        results.append({"trial": trial, "tag": tag, "pods": pods, "error": str(exc)[:500]})
                    time.sleep(3)
        server = json.loads(kubectl(cluster, "version", "-o", "json"))["serverVersion"]["gitVersion"]
    return {"kubernetes": server, "nodes": topology.node_count, "work_dir": str(work), "results": results}


def kwok_tables(results: list[dict[str, Any]]) -> str:
    """Markdown: recovery by trial and scale (median, all runs), then detection by failure kind."""
    ok = [r for r in results if "error" not in r]
    keys = sorted({(r["trial"], r["pods"]) for r in ok}, key=lambda k: (KWOK_TRIALS.index(k[0]), k[1]))
    lines = ["| failure | path | pods | failure → recovered (s), median (runs) | pods kept | detection (s) | "
             "load (1 min) |", "|---|---|---|---|---|---|---|"]
    for trial, pods in keys:
        rs = [r for r in ok if (r["trial"], r["pods"]) == (trial, pods)]
        rec = [r["recover_s"] for r in rs]
        det = [r["detect_s"] for r in rs]
        lines.append(f"| {FAILURE_OF[trial]} | {trial} | {pods} | {median(rec):.2f} "
                     f"({', '.join(f'{x:.2f}' for x in rec)}) | {rs[-1]['pods_kept']}/{pods} | {median(det):.2f} | "
                     f"{', '.join(str(r['loadavg'][0]) for r in rs)} |")
    for r in results:
        if "error" in r:
            lines.append(f"| {FAILURE_OF.get(r['trial'], '?')} | {r['trial']} | {r['pods']} | failed: "
                         f"{r['error'][:120]} | | | |")
    return "\n".join(lines)


FAILURE_OF = {"recreate": "process exit (137)", "in-place": "process exit (75), restarted in place",
              "node-loss": "node deleted", "replace-node": "node deleted", "hang": "hang (no progress)"}


# ---- checkpoint: save/restore vs the disk ---------------------------------------------------


def evict(path: Path) -> None:
    """Drop the files under ``path`` from the page cache (POSIX_FADV_DONTNEED on clean, synced
    pages: no root needed, unlike /proc/sys/vm/drop_caches), so the next read comes from the disk."""
    for f in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def dd_throughput(directory: Path, megabytes: int) -> dict[str, float]:
    """``dd`` on the same directory: write with conv=fdatasync; read after evicting the file, and
    with iflag=direct (GB/s, 1 MiB blocks)."""
    target = directory / "dd.bin"
    out: dict[str, float] = {}
    runs = {"write": ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={megabytes}", "conv=fdatasync"],
            "read": ["dd", f"if={target}", "of=/dev/null", "bs=1M"],
            "read_direct": ["dd", f"if={target}", "of=/dev/null", "bs=1M", "iflag=direct"]}
    for what, argv in runs.items():
        if what != "write":
            evict(target)
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        out[what] = round(megabytes * 2**20 / (time.perf_counter() - t) / 1e9, 3)
    target.unlink()
    return out


def checkpoint_worker(directory: Path, megabytes: int, result: Path) -> None:
    """One rank (RANK/WORLD_SIZE/MASTER_* set): a model of ``megabytes`` of fp32 parameters with
    AdamW's state after one step, saved synchronously and loaded back by the runtime's Checkpointer."""
    import torch
    import torch.distributed as dist

    from phalanx_runtime.components.checkpoint import CheckpointConfig, Checkpointer

    class Loader:
        def state_dict(self):
            return {"position": 0}

        def load_state_dict(self, state):
            return None

    dist.init_process_group("gloo")
    width = 2048
    layers = max(1, megabytes * 2**20 // (4 * width * width))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(layers)))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt = Checkpointer(CheckpointConfig(str(directory), async_save=False), parts=[model], optimizer=optimizer,
                        scheduler=scheduler, loader=Loader(), dp_rank=rank, dp_size=world)
    dist.barrier()
    t = time.perf_counter()
    ckpt.save(1, force_sync=True)
    dist.barrier()
    save_s = time.perf_counter() - t
    step_dir = ckpt.find_resume()[1]
    if rank == 0:
        evict(Path(directory))
    dist.barrier()
    t = time.perf_counter()
    ckpt.load(step_dir)
    dist.barrier()
    load_s = time.perf_counter() - t
    if rank == 0:
        result.write_text(json.dumps({"save_s": save_s, "load_s": load_s, "bytes": tree_bytes(Path(step_dir)),
                                      "layers": layers, "width": width}))
    ckpt.close()
    dist.destroy_process_group()


def run_checkpoint(directory: Path | None, megabytes: int, world: int = 2) -> dict[str, Any]:
    """Save and restore GB/s of the runtime's checkpointer (``world`` ranks on this machine: one
    node) against dd on the same directory, in the same run."""
    import tempfile

    from phalanx_common.net import free_port

    base = Path(tempfile.mkdtemp(prefix="recovery-ckpt-", dir=directory))
    result = base / "result.json"
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, __file__, "--checkpoint-worker", str(base / "ckpt"),
                                       str(megabytes), str(result)], env=env))
    codes = [p.wait(900) for p in procs]
    if codes != [0] * world:
        raise RuntimeError(f"checkpoint workers exited {codes}")
    res = json.loads(result.read_text())
    res["dd"] = dd_throughput(base, max(1, res["bytes"] // 2**20))
    df = subprocess.run(["df", "-T", str(base)], capture_output=True, text=True).stdout.splitlines()[-1].split()
    res.update(save_gbps=round(res["bytes"] / res["save_s"] / 1e9, 3),
               load_gbps=round(res["bytes"] / res["load_s"] / 1e9, 3), ranks=world, directory=str(base),
               filesystem=df[1], loadavg=[round(x, 2) for x in os.getloadavg()])
    subprocess.run(["rm", "-rf", str(base)], check=False)
    return res


def checkpoint_table(res: dict[str, Any]) -> str:
    dd = res["dd"]
    size = f"{res['bytes'] / 1e6:.0f} MB"
    return "\n".join([
        "| what | bytes | time (s) | GB/s per node | disk (dd), same directory, GB/s |", "|---|---|---|---|---|",
        f"| save (DCP, sync, {res['ranks']} ranks) | {size} | {res['save_s']:.2f} | **{res['save_gbps']:.2f}** | "
        f"write, conv=fdatasync: **{dd['write']:.2f}** |",
        f"| restore (DCP, page cache evicted) | {size} | {res['load_s']:.2f} | **{res['load_gbps']:.2f}** | "
        f"read, evicted: **{dd['read']:.2f}**; iflag=direct: {dd['read_direct']:.2f} |",
    ])


# ---- kind -------------------------------------------------------------------------------------


def kind_job(name: str, image: str, nodes: int) -> dict[str, Any]:
    """A data-parallel job of ``nodes`` pods × 1 process, a checkpoint every 5 steps (sync), long
    enough to be killed after one and resume."""
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": {
        "image": image, "nodes": nodes, "procsPerNode": 1, "resources": {"cpu": "500m", "memory": "2Gi"},
        "model": {"preset": "debug"}, "data": {"source": "corpus", "seqLen": 64},
        "training": {"steps": 200, "globalBatchSize": 8, "lr": 0.003, "precision": "fp32"},
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "phalanx-shared"}},
                       "intervalSteps": 5, "async": False},
        "failurePolicy": {"maxRestarts": 3, "backoffSeconds": 0}}}


def kind_status(namespace: str, name: str) -> dict[str, Any]:
    from bench.startup import _kubectl

    return json.loads(_kubectl("-n", namespace, "get", "trainingjob", name, "-o", "json")).get("status") or {}


def poll_status(namespace: str, name: str, until, timeout: float) -> tuple[float, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = kind_status(namespace, name)
        if until(status):
            return time.monotonic(), status
        time.sleep(0.3)
    raise TimeoutError(f"{name}: no such status within {timeout:.0f} s")


def set_in_place(enabled: bool) -> None:
    """The operator's restartInPlace in its ConfigMap, and the operator restarted to read it."""
    import yaml

    from bench.startup import _kubectl

    dep = json.loads(_kubectl("get", "deployment", "-A", "-l", "app.kubernetes.io/name=phalanx-operator",
                              "-o", "json"))["items"][0]
    ns, name = dep["metadata"]["namespace"], dep["metadata"]["name"]
    cm = next(v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
    config = yaml.safe_load(json.loads(_kubectl("-n", ns, "get", "configmap", cm, "-o", "json"))["data"]["config.yaml"]) or {}
    if config.get("restartInPlace", True) == enabled:
        return
    config["restartInPlace"] = enabled
    _kubectl("-n", ns, "patch", "configmap", cm, "--type=merge", "-p",
             json.dumps({"data": {"config.yaml": yaml.safe_dump(config)}}))
    _kubectl("-n", ns, "rollout", "restart", f"deployment/{name}")
    _kubectl("-n", ns, "rollout", "status", f"deployment/{name}", "--timeout=300s")


def kind_trial(path: str, namespace: str, image: str, nodes: int, shared: Path | None) -> dict[str, Any]:
    """Apply the job afresh (bench/startup.py: apply → first step, status.startup), wait for a
    checkpoint, SIGKILL rank 1's worker process → the first step after it."""
    from bench.startup import _kubectl, run_kind
    from tests.e2e.test_inplace_restart_kind import KILL_WORKERS

    set_in_place(path == "in-place")
    name = f"rec-{path}"
    with_job = Path(f"/tmp/{name}.yaml")
    import yaml

    with_job.write_text(yaml.safe_dump(kind_job(name, image, nodes)))
    start = run_kind(with_job, namespace, shared / namespace / name if shared else None)
    _, status = poll_status(namespace, name, lambda s: (s.get("lastCheckpoint") or {}).get("step", 0) >= 5, 600)
    pods = json.loads(_kubectl("-n", namespace, "get", "pods", "-l", f"{constants.LABEL_JOB_NAME}={name}",
                               "-o", "json"))["items"]
    rules = bool(pods[0]["spec"]["containers"][0].get("restartPolicyRules"))
    at_kill = kind_status(namespace, name).get("step") or 0
    victim = sorted(p["metadata"]["name"] for p in pods)[-1]
    killed = time.monotonic()
    _kubectl("-n", namespace, "exec", victim, "-c", constants.CONTAINER_NAME, "--", "python3", "-c", KILL_WORKERS)
    seen, _ = poll_status(namespace, name, lambda s: (s.get("restarts") or 0) >= 1, 300)
    stepped, after = poll_status(namespace, name, lambda s: (s.get("restarts") or 0) >= 1 and (s.get("step") or 0) > at_kill, 900)
    _kubectl("-n", namespace, "delete", "trainingjob", name, "--wait=false")
    own = {k: start[k] for k in ("podsRunning", "applyToFirstStep", StartupPhase.FIRST_STEP) if k in start}
    return {"path": path, "pods": nodes, "rules_on_pods": rules, "restart_mode": after.get("lastRestartMode"),
            "checkpoint_step": status["lastCheckpoint"]["step"], "step_at_kill": at_kill,
            "resumed_step": after.get("resumedStep"), "detect_s": round(seen - killed, 2),
            "kill_to_step_s": round(stepped - killed, 2), "startup": start, "own_startup": own,
            "startup_after": after.get("startup"), "loadavg": [round(x, 2) for x in os.getloadavg()]}


def run_kind_part(namespace: str, image: str, nodes: int, shared: Path | None) -> dict[str, Any]:
    """In place, then recreate (the operator's restartInPlace off), on the cluster of $KUBECONFIG;
    the operator's config is put back after."""
    results = []
    try:
        for path in ("in-place", "recreate"):
            results.append(kind_trial(path, namespace, image, nodes, shared))
            log(f"kind {path}: {json.dumps(results[-1])}")
    finally:
        set_in_place(True)
    return {"results": results}


def kind_table(res: dict[str, Any]) -> str:
    lines = ["| path | pods | kill → restart seen (s) | kill → first step after (s) | job's own start-up: apply → "
             "first step (s) / of it, pods Running (s) | ratio (goal ≤ 2×, to start-up less pod creation) | restart mode |",
             "|---|---|---|---|---|---|---|"]
    for r in res["results"]:
        own = r["own_startup"]
        runtime = own.get(StartupPhase.FIRST_STEP) or (own["applyToFirstStep"] - own.get("podsRunning", 0))
        lines.append(f"| {r['path']} | {r['pods']} | {r['detect_s']:.1f} | **{r['kill_to_step_s']:.1f}** | "
                     f"{own['applyToFirstStep']:.1f} / {own.get('podsRunning', 0):.1f} | "
                     f"{r['kill_to_step_s'] / runtime:.2f}× of {runtime:.1f} s | {r['restart_mode']} |")
    return "\n".join(lines)


# ---- main -----------------------------------------------------------------------------------


def machine() -> str:
    return (f"{os.cpu_count()} cores, {platform.machine()}, "
            f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB")


def commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--checkpoint-worker":  # one rank of run_checkpoint
        checkpoint_worker(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="kwok", help="comma-separated: kwok, kind, checkpoint (default: %(default)s)")
    ap.add_argument("--scales", default="64,512", help="kwok: gang sizes (pods, one per node)")
    ap.add_argument("--trials", default=",".join(KWOK_TRIALS),
                    help=f"kwok: comma-separated, of {', '.join(KWOK_TRIALS)} (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=1, help="kwok: rounds of every trial at every scale")
    ap.add_argument("--hang-timeout", type=int, default=10, help="kwok hang trial: hangTimeoutSeconds")
    ap.add_argument("--replace-config", default="{}",
                    help="kwok replace-node trial: JSON merged into the operator's config (the single-node "
                         "replacement's setting)")
    ap.add_argument("--timeout", type=float, default=300.0, help="kwok: per wait")
    ap.add_argument("--work-dir", type=Path, help="kwok: default $PHALANX_CACHE/recovery/<timestamp>")
    ap.add_argument("--kind-image", default=os.environ.get("PHALANX_E2E_IMAGE", "phalanx/runtime:0.1.0"))
    ap.add_argument("--kind-pods", type=int, default=2, help="kind: the job's pods (one per worker node)")
    ap.add_argument("--kind-shared", type=Path, help="kind: the shared volume's directory here "
                    "($PHALANX_KIND_DIR/shared), to start each job without old checkpoints")
    ap.add_argument("--namespace", default=os.environ.get("PHALANX_NAMESPACE", "default"))
    ap.add_argument("--ckpt-dir", type=Path, help="checkpoint: where to write (default: a temp dir under $TMPDIR)")
    ap.add_argument("--ckpt-mb", type=int, default=128, help="checkpoint: parameter MB (fp32; with AdamW's two moments the checkpoint is ~3x that)")
    ap.add_argument("--json", type=Path, help="write the results here too")
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    trials = [t for t in args.trials.split(",") if t]
    if set(parts) - {"kwok", "kind", "checkpoint"} or set(trials) - set(KWOK_TRIALS):
        ap.error("unknown part or trial")
    out: dict[str, Any] = {"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine(),
                           "command": " ".join(["bench/recovery.py", *sys.argv[1:]]),
                           "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    if "kwok" in parts:
        out["kwok"] = run_kwok([int(s) for s in args.scales.split(",")], trials, args.repeat, args)
        print(kwok_tables(out["kwok"]["results"]))
    if "checkpoint" in parts:
        out["checkpoint"] = run_checkpoint(args.ckpt_dir, args.ckpt_mb)
        print(checkpoint_table(out["checkpoint"]))
    if "kind" in parts:
        out["kind"] = run_kind_part(args.namespace, args.kind_image, args.kind_pods, args.kind_shared)
        print(kind_table(out["kind"]))
    out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
