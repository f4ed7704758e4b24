"""Operator memory (RSS) at scale, and under churn, on a local control plane of its own.

1. Fill: a fresh LocalCluster (temp work dir, never the shared one) with ``--nodes`` kwok nodes
   (8 GPUs each), the Phalanx operator as a process (``python -m phalanx operator -A``), then
   ``--jobs`` TrainingJobs of ``--pods-per-job`` one-GPU pods each (200 × 25 = 5,000 pods by
   default), created ``--create-parallel`` at a time. Waits until every pod exists and is bound
   (the gangs were planned, pinned and released), lets it settle, and reads the operator's RSS.
2. Churn (``--churn-minutes``, 0 to skip): every ``--churn-every`` seconds the oldest job is
   deleted and a new one created (the count stays ``--jobs``), RSS sampled throughout. Reports
   RSS at the start and end of the churn and the slope over its second half (MB/min): per-job
   state that is never pruned shows as a steady climb. ``--reap`` force-deletes each deleted
   job's pods (grace 0) so that the indexed pod count stays put while jobs churn.

RSS is /proc/<pid>/status VmRSS, sampled every ``--sample-every`` s; peak is VmHWM.
``--tracemalloc N``: tracemalloc (N frames; slower, RSS inflated) starts in the operator once it
is up (SIGUSR1), and the top sites of what was allocated since and is live after the fill go to
<work dir>/tracemalloc-*.txt (SIGUSR1 again).

    python bench/operator_memory.py [--nodes 1000 --jobs 200 --pods-per-job 25] [--churn-minutes 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from operator_scale import PHALANX_CRD, Phalanx, Proc, free_port, http_ok, kubectl, log, wait_for  # noqa: E402

from localcluster import LocalCluster, api_client, create_nodes, parse_topology  # noqa: E402
from phalanx import constants  # noqa: E402

GROUP, VERSION, PLURAL, JOB_LABEL = constants.GROUP, constants.VERSION, constants.PLURAL, constants.LABEL_JOB_NAME


def topology(nodes: int) -> dict[str, Any]:
    per_rack = 8
    racks = max(1, nodes // per_rack)
    return {"name": f"mem-{nodes}", "namePrefix": "gpu", "layout": {"block": 1, "subblock": 1, "rack": racks, "node": per_rack},
            "cliqueLevel": "rack",
            "node": {"gpu": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "cpu": "192", "memory": "2Ti", "pods": "110"}}


def manifest(name: str, pods: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"image": "phalanx/runtime:test", "nodes": pods, "procsPerNode": 1,
                     "resources": {"gpus": 1, "cpu": "100m", "memory": "64Mi"},
                     "model": {"preset": "debug"}, "training": {"globalBatchSize": pods}}}


TRACED = r"""
import signal, sys, tracemalloc
def dump(*_):
    if not tracemalloc.is_tracing():  # the first signal: trace from now on (imports are not traced)
        tracemalloc.start({frames})
        return
    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    total = sum(s.size for s in snap.statistics("filename"))
    with open({out!r} + "-" + str(len(dump.n)) + ".txt", "w") as f:
        dump.n.append(1)
        f.write(f"traced total {{total / 2**20:.1f}} MiB\n\n== by file ==\n")
        for s in snap.statistics("filename")[:30]:
            f.write(f"{{s.size / 2**20:8.1f}} MiB {{s.count:9d}} {{s.traceback}}\n")
        f.write("\n== by traceback ==\n")
        for s in snap.statistics("traceback")[:25]:
            f.write(f"{{s.size / 2**20:8.1f}} MiB {{s.count:9d}}\n    " + "\n    ".join(s.traceback.format()) + "\n")
dump.n = []
signal.signal(signal.SIGUSR1, dump)
sys.argv = ["phalanx", *{argv!r}]
from phalanx.cli import main
sys.exit(main())
"""


def start_traced(op: Phalanx, frames: int) -> None:
    """Phalanx.start, under tracemalloc with a SIGUSR1 dump."""
    import yaml

    cfg = op.work / "phalanx-config.yaml"
    cfg.write_text(yaml.safe_dump(op.config))
    op.live, op.mport = free_port(), free_port()
    argv = ["operator", f"--kubeconfig={op.kubeconfig}", "-A", f"--config={cfg}", f"--liveness-port={op.live}",
            f"--metrics-port={op.mport}"]
    code = TRACED.format(frames=frames, out=str(op.work / "tracemalloc"), argv=argv)
    op.p = Proc("phalanx", [sys.executable, "-c", code], op.work / "phalanx-mem.log", {"PYTHONUNBUFFERED": "1"})
    wait_for(lambda: op.p.check() or http_ok(f"http://127.0.0.1:{op.live}/healthz"), 180, "phalanx /healthz")
    time.sleep(2)


def proc_status(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024  # MiB
    return out


class Sampler(threading.Thread):
    def __init__(self, pid: int, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.samples, self.stop = pid, every, [], threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                s = proc_status(self.pid)
            except OSError:
                return
            self.samples.append((time.monotonic() - self.t0, s["VmRSS"], s["VmHWM"], os.getloadavg()[0]))
            self.stop.wait(self.every)

    def now(self) -> float:
        return time.monotonic() - self.t0


def pod_counts(api: Any, ns: str) -> tuple[int, int, int]:
    """(pods, bound, Running) of the bench's jobs: listed 500 at a time (5,000 pods are ~45 MB of
    JSON), a failed listing retried."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    for attempt in range(5):
        total = bound = running = 0
        token = None
        try:
            while True:
                r = core.list_namespaced_pod(ns, label_selector=JOB_LABEL, limit=500, _continue=token,
                                             _preload_content=False, _request_timeout=120)
                page = json.loads(r.data)
                for p in page["items"]:
                    total += 1
                    bound += bool(p["spec"].get("nodeName"))
                    running += (p.get("status") or {}).get("phase") == "Running"
                token = page["metadata"].get("continue")
                if not token:
                    return total, bound, running
        except Exception as exc:  # noqa: BLE001 - a loaded apiserver: try again
            log(f"listing pods failed ({exc!r:.120}); retrying")
            time.sleep(5 * (attempt + 1))
    return -1, -1, -1


def create_jobs(api: Any, ns: str, names: list[str], pods: int, parallel: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client

    co = client.CustomObjectsApi(api)
    with ThreadPoolExecutor(parallel) as ex:
        list(ex.map(lambda n: co.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest(n, pods)), names))


def delete_job(api: Any, ns: str, name: str) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name,
                                                                 body={"propagationPolicy": "Background"})


def fill(api: Any, ns: str, args: argparse.Namespace, sampler: Sampler) -> dict[str, Any]:
    names = [f"job-{i:04d}" for i in range(args.jobs)]
    want = args.jobs * args.pods_per_job
    t0 = sampler.now()
    create_jobs(api, ns, names, args.pods_per_job, args.create_parallel)
    log(f"{args.jobs} jobs created in {sampler.now() - t0:.1f} s")
    deadline = time.monotonic() + args.timeout
    counts = (0, 0, 0)
    while time.monotonic() < deadline:
        counts = pod_counts(api, ns)
        log(f"pods {counts[0]}/{want}, bound {counts[1]}, Running {counts[2]}; operator RSS {sampler.samples[-1][1]:.0f} MiB")
        if counts[0] >= want and counts[1] >= want:
            break
        time.sleep(10)
    filled = sampler.now()
    time.sleep(args.settle)
    rss = proc_status(sampler.pid)
    return {"jobs": args.jobs, "pods": counts[0], "bound": counts[1], "running": counts[2],
            "fill_seconds": round(filled - t0, 1), "rss_mib": round(rss["VmRSS"], 1), "peak_rss_mib": round(rss["VmHWM"], 1),
            "complete": counts[0] >= want and counts[1] >= want}


def reap_pods(api: Any, ns: str, job: str) -> None:
    """Play a kubelet that stops its containers at once: the deleted job's pods go with grace
    period 0. kwok's own delete stage falls behind on a loaded machine, and the pods it leaves
    Terminating stay indexed: RSS would follow their count, not show what the operator keeps."""
    from kubernetes import client

    client.CoreV1Api(api).delete_collection_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job}",
                                                           grace_period_seconds=0)


def churn(api: Any, ns: str, args: argparse.Namespace, sampler: Sampler) -> dict[str, Any]:
    live = [f"job-{i:04d}" for i in range(args.jobs)]
    start, end = sampler.now(), sampler.now() + args.churn_minutes * 60
    made = 0
    pods_start = pod_counts(api, ns)[0]
    while sampler.now() < end:
        t = time.monotonic()
        gone = live.pop(0)
        delete_job(api, ns, gone)
        if args.reap:
            reap_pods(api, ns, gone)
        name = f"churn-{made:05d}"
        create_jobs(api, ns, [name], args.pods_per_job, 1)
        live.append(name)
        made += 1
        if made % 20 == 0:
            counts = pod_counts(api, ns)
            log(f"churn: {made} replaced; pods {counts[0]}, bound {counts[1]}; RSS {sampler.samples[-1][1]:.0f} MiB")
        time.sleep(max(0.0, args.churn_every - (time.monotonic() - t)))
    window = [s for s in sampler.samples if s[0] >= start]
    half = [s for s in window if s[0] >= start + (sampler.now() - start) / 2]
    slope = 0.0
    if len(half) >= 3:  # least squares, MiB per minute
        n = len(half)
        mx, my = sum(s[0] for s in half) / n, sum(s[1] for s in half) / n
        var = sum((s[0] - mx) ** 2 for s in half)
        slope = sum((s[0] - mx) * (s[1] - my) for s in half) / var * 60 if var else 0.0
    return {"minutes": args.churn_minutes, "replaced": made, "reaped": args.reap,
            "pods_start": pods_start, "pods_end": pod_counts(api, ns)[0], "rss_start_mib": round(window[0][1], 1),
            "rss_end_mib": round(window[-1][1], 1), "rss_max_mib": round(max(s[1] for s in window), 1),
            "slope_second_half_mib_per_min": round(slope, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--pods-per-job", type=int, default=25)
    ap.add_argument("--create-parallel", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=1200.0, help="fill: until every pod exists and is bound")
    ap.add_argument("--settle", type=float, default=30.0)
    ap.add_argument("--churn-minutes", type=float, default=0.0)
    ap.add_argument("--churn-every", type=float, default=3.0, help="seconds per job replaced")
    ap.add_argument("--reap", action="store_true",
                    help="churn: force-delete a deleted job's pods (grace 0), as a fast kubelet would")
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--work-dir", type=Path, help="default: a new temp dir")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tracemalloc", type=int, default=0, help="frames; profile the operator's allocations")
    args = ap.parse_args()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="phalanx-opmem-"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": " ".join(sys.argv),
                           "machine": f"{os.cpu_count()} cores, {platform.machine()}", "python": platform.python_version(),
                           "work_dir": str(work)}
    with LocalCluster(work_dir=work / "cluster") as cluster:
        t = time.time()
        topo = parse_topology(topology(args.nodes))
        create_nodes(cluster.kubeconfig, topo)
        log(f"{topo.node_count} kwok nodes Ready in {time.time() - t:.1f} s")
        kubectl(cluster, "apply", "--server-side", "-f", str(PHALANX_CRD))
        # `kubectl wait` fails at once while the CRD is not visible yet (a loaded API server): retry
        wait_for(lambda: subprocess.run([cluster.kubectl, f"--kubeconfig={cluster.kubeconfig}", "wait",
                                         "--for=condition=Established", "--timeout=10s", "crd/trainingjobs.phalanx.dev"],
                                        capture_output=True).returncode == 0, 120, "the CRD Established", interval=1.0)
        ns = "mem"
        kubectl(cluster, "create", "namespace", ns)
        op = Phalanx(cluster.kubeconfig, work, {})
        if args.tracemalloc:
            start_traced(op, args.tracemalloc)
        else:
            op.start("mem")
        if args.tracemalloc:
            os.kill(op.p.proc.pid, signal.SIGUSR1)
        sampler = Sampler(op.p.proc.pid, args.sample_every)
        sampler.start()
        time.sleep(args.sample_every)
        out["idle_rss_mib"] = round(proc_status(op.p.proc.pid)["VmRSS"], 1)
        log(f"operator up, {args.nodes} nodes indexed: RSS {out['idle_rss_mib']} MiB")
        api = api_client(cluster.kubeconfig, pool_size=16)
        try:
            out["fill"] = fill(api, ns, args, sampler)
            log(f"fill: {out['fill']}")
            if args.tracemalloc:
                os.kill(op.p.proc.pid, signal.SIGUSR1)
                time.sleep(20)
            if args.churn_minutes > 0:
                out["churn"] = churn(api, ns, args, sampler)
                log(f"churn: {out['churn']}")
        finally:
            sampler.stop.set()
            out["samples"] = sampler.samples
            op.p.check()
            op.p.stop()
    text = json.dumps(out, indent=1)
    (work / "results.json").write_text(text)
    if args.json:
        args.json.write_text(text)
    print(json.dumps({k: v for k, v in out.items() if k != "samples"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
