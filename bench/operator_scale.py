"""Operator scale: create → all pods Running for a 512-pod gang, Phalanx vs Kubeflow training-operator.

One local control plane (localcluster: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok) with 512 kwok nodes × 8 GPUs (4 blocks × 4 subblocks × 4 racks × 8 nodes).
Each trial, alone on the cluster, in a fresh namespace:

* ``phalanx``: ``python -m phalanx operator`` as a process; a TrainingJob with nodes=512,
  procsPerNode=8, gpus=8 (one pod per node, the whole cluster).
* ``kubeflow``: the real Kubeflow training-operator (``hack/bench/build.sh``, pinned in
  hack/bench/go.mod), PyTorchJob controller only (``--enable-scheme=pytorchjob``), no gang
  scheduler (default kube-scheduler); a PyTorchJob with 1 Master + 511 Workers, 8 GPUs each.

* ``direct`` (baseline, no operator): the bench creates 512 pods already pinned (nodeSelector
  hostname, no gates) itself on 32 threads; what apiserver + kube-scheduler + kwok need alone.
* ``direct-rendered`` (baseline, no operator): the same with the pods Phalanx renders for the
  ``phalanx`` trial's job (env, ports, volumes: ~9× the bytes), pinned as create-pinned pins them.

The operator under test runs only during its own trial (started before, stopped after), so the
API-request counts are its own. Timer: from just before the create request until a watch on the
namespace has seen every pod Running. Then the job is deleted, its pods waited out, the namespace
deleted, the operator stopped.

API requests per job come from the apiserver's audit log (level Metadata, leases and
RequestReceived omitted), counted by user agent from create to all-Running + settle seconds, and
until the operator has been idle for 5 s (Kubeflow creates its 512 Services after the pods).
Phalanx's own ``phalanx_api_requests_total`` (its pod/service/configmap/patch calls, not kopf's
watches and patches) is reported next to it.

Training-operator webhooks: no ValidatingWebhookConfiguration is applied, so the apiserver never
calls the webhook. The binary still insists on its cert rotator: it needs the Secret
``kubeflow/training-operator-webhook-cert`` (created empty; the rotator fills it) and waits
until the certs appear under /tmp/k8s-webhook-server/serving-certs (hard-coded), which a
kubelet's secret volume would do; this script copies them there itself.

    python bench/operator_scale.py [--order phalanx,kubeflow,kubeflow,phalanx] [--json out.json] [--profile]
    python bench/operator_scale.py --jobs 64 --pods 8 --order direct,phalanx,kubeflow   # many jobs at once
    bench/operator_scale.sh ...        # same, and builds the binaries first

Needs the cluster binaries (hack/cluster/build.sh) and the training-operator
(hack/bench/build.sh); both cache under ${PHALANX_CACHE:-~/.cache/phalanx}.
"""

from __future__ import annotations

import abc
import argparse
import base64
import collections
import datetime as dt
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hack" / "cluster"))  # localcluster (dev-only)
from localcluster import LocalCluster, api_client, create_nodes, parse_topology  # noqa: E402
from phalanx import constants  # noqa: E402
from phalanx_common.net import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("PHALANX_CACHE", Path.home() / ".cache" / "phalanx"))
PHALANX_CRD = ROOT / "crds" / "phalanx.dev_trainingjobs.yaml"
BENCH_UA = "phalanx-bench"
TO_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # hard-coded in training-operator v1.8
TO_NAMESPACE = "kubeflow"
TO_SECRET = "training-operator-webhook-cert"
IMAGE = "phalanx/runtime:test"
JOB_LABELS = (constants.LABEL_JOB_NAME, "training.kubeflow.org/job-name", "job")  # Phalanx, Kubeflow, direct

TOPOLOGY = {
    "name": "scale-512",
    "description": "4 blocks x 4 subblocks x 4 racks x 8 nodes, 8 GPUs each",
    "namePrefix": "gpu",
    "layout": {"block": 4, "subblock": 4, "rack": 4, "node": 8},
    "cliqueLevel": "rack",
    "node": {"gpu": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "cpu": "192", "memory": "2Ti", "pods": "110"},
}

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/metrics"]},
        {"level": "Metadata"},
    ],
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)




def wait_for(fn, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its reaped children (clock ticks → s)."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


# ---- pod watch -----------------------------------------------------------------------------


class PodWatch(threading.Thread):
    """Raw-JSON watch of one namespace's pods: when each pod was first seen, had its
    scheduling gates lifted, got a node, and went Running (wall clock, time.time())."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(daemon=True)
        self.core = client.CoreV1Api(api)
        self.ns = namespace
        self.seen: dict[str, float] = {}
        self.job_of: dict[str, str] = {}  # pod → its job (from the operator's job label)
        self.ungated: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.events = 0
        self.cond = threading.Condition()
        self.stopped = False
        lst = self.core.list_namespaced_pod(namespace, _preload_content=False)
        body = json.loads(lst.data)
        self.rv = body["metadata"]["resourceVersion"]
        now = time.time()
        for p in body["items"]:
            self._update("ADDED", p, now)

    def _update(self, typ: str, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        if typ == "DELETED":
            self.gone.setdefault(name, now)
            return
        self.seen.setdefault(name, now)
        labels = pod["metadata"].get("labels") or {}
        self.job_of.setdefault(name, next((labels[k] for k in JOB_LABELS if k in labels), "?"))
        spec, status = pod.get("spec", {}), pod.get("status", {})
        if not spec.get("schedulingGates"):
            self.ungated.setdefault(name, now)
        if spec.get("nodeName"):
            self.bound.setdefault(name, now)
        if status.get("phase") == "Running":
            self.running.setdefault(name, now)

    def run(self) -> None:
        while not self.stopped:
            try:
                resp = self.core.list_namespaced_pod(
                    self.ns, watch=True, resource_version=self.rv, timeout_seconds=1800,
                    allow_watch_bookmarks=True, _preload_content=False,
                )
                for line in resp:
                    if self.stopped:
                        break
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    now = time.time()
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    self.rv = obj["metadata"].get("resourceVersion", self.rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    with self.cond:
                        self.events += 1
                        self._update(ev["type"], obj, now)
                        self.cond.notify_all()
            except Exception as exc:  # noqa: BLE001 - keep watching; relist on 410
                if self.stopped:
                    return
                log(f"pod watch restarted: {exc}")
                time.sleep(0.5)

    def wait(self, pred, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout}s waiting for {what} "
                                       f"(seen {len(self.seen)}, bound {len(self.bound)}, running {len(self.running)})")
                self.cond.wait(min(left, 1.0))

    def live(self) -> int:
        return len(set(self.seen) - set(self.gone))


# ---- operators -----------------------------------------------------------------------------


class Proc:
    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.proc = subprocess.Popen(
            argv, stdout=log_path.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, start_new_session=True,
        )

    def check(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}); log tail:\n{self.tail()}")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def trainingjob(name: str, pods: int) -> dict[str, Any]:
    """The TrainingJob of the phalanx trials (and the pods of direct-rendered): one 8-GPU pod per node."""
    return {
        "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {
            "image": IMAGE, "nodes": pods, "procsPerNode": 8,
            "resources": {"gpus": 8, "cpu": "1", "memory": "1Gi"},
            "model": {"preset": "debug"}, "training": {"globalBatchSize": pods * 8},
        },
    }


class Operator(abc.ABC):
    kind = "?"
    group = api_version = plural = ""
    p: Proc | None = None

    @abc.abstractmethod
    def manifest(self, name: str, pods: int) -> dict[str, Any]:
        """The job object this operator reconciles."""

    def create_job(self, api: client.ApiClient, ns: str, name: str, pods: int) -> None:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            self.group, self.api_version, ns, self.plural, self.manifest(name, pods))

    def delete_job(self, api: client.ApiClient, ns: str, name: str) -> None:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            self.group, self.api_version, ns, self.plural, name, body={"propagationPolicy": "Background"})

    def prepare(self, names: list[str], pods: int) -> None:
        """Anything the trial needs before its timer starts."""
        return None

    def create_jobs(self, api: client.ApiClient, ns: str, names: list[str], pods: int) -> None:
        """All jobs at once, as a CI system or a team's scripts would submit them."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(len(names), 16)) as ex:
            list(ex.map(lambda n: self.create_job(api, ns, n, pods), names))


class Direct(Operator):
    """Baseline, no operator: the bench itself creates the pods already pinned (nodeSelector
    hostname, no gates) on 32 threads with keep-alive connections. The cluster's own floor
    (apiserver + kube-scheduler + kwok) for 512 pods on this machine."""

    kind = "direct"
    ua_prefixes = (BENCH_UA,)
    version = "-"

    def start(self, tag: str) -> None:
        pass

    def manifest(self, name: str, pods: int) -> dict[str, Any]:
        return {}  # no job object: the pods themselves (create_jobs)

    def create_job(self, api: client.ApiClient, ns: str, name: str, pods: int) -> None:
        self.create_jobs(api, ns, [name], pods)

    def create_jobs(self, api: client.ApiClient, ns: str, names: list[str], pods: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        core = client.CoreV1Api(api)
        nodes = sorted(n["metadata"]["name"] for n in json.loads(core.list_node(
            label_selector="type=kwok", _preload_content=False).data)["items"])

        def one(i: int) -> None:
            r = core.create_namespaced_pod(ns, self.pod(names[i // pods], i % pods, nodes[i]), _preload_content=False)
            r.data  # noqa: B018 - read the body: returns the connection to the pool
            r.release_conn()

        with ThreadPoolExecutor(32) as ex:
            list(ex.map(one, range(len(names) * pods)))

    def pod(self, job: str, index: int, node: str) -> dict[str, Any]:
        res = {"nvidia.com/gpu": "8", "cpu": "1", "memory": "1Gi"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{job}-{index}", "labels": {"job": job}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [
                    {"name": "trainer", "image": IMAGE, "resources": {"requests": res, "limits": res}}]}}

    def delete_job(self, api: client.ApiClient, ns: str, name: str) -> None:
        client.CoreV1Api(api).delete_collection_namespaced_pod(ns, label_selector=f"job={name}")


class DirectRendered(Direct):
    """Baseline, no operator, with Phalanx's own pods: the bench renders the TrainingJob that the
    ``phalanx`` trial creates (``render_children``), pins each pod as create-pinned does
    (``pin_pod``: node affinity, no gate) and creates them itself, like ``direct``. Phalanx's pods
    carry ~3.6 KB (env, ports, volumes, security context) where ``direct``'s carry ~0.4 KB, and
    the API server, etcd, the scheduler and kwok handle each one several times: this is the floor
    for those pods, so its gap to ``phalanx`` is the operator's own. Rendered before the timer."""

    kind = "direct-rendered"

    def prepare(self, names: list[str], pods: int) -> None:
        from phalanx.api.config import OperatorConfig
        from phalanx.render import render_children
        from phalanx.validate import validate_job

        self.rendered: dict[tuple[str, int], dict[str, Any]] = {}
        for name in names:
            job, problems = validate_job({**trainingjob(name, pods),
                                          "metadata": {"name": name, "namespace": "default", "uid": "bench"}})
            assert job is not None and not problems, problems
            workers = [o for o in render_children(job, OperatorConfig()) if o["kind"] == "Pod"]
            for i, pod in enumerate(workers):
                pod["metadata"].pop("namespace", None)
                pod["metadata"].pop("ownerReferences", None)  # no owner: the garbage collector would delete them
                pod["metadata"]["labels"]["job"] = name
                self.rendered[name, i] = pod

    def pod(self, job: str, index: int, node: str) -> dict[str, Any]:
        from phalanx.gang.pins import pin_pod

        pod = self.rendered[job, index]
        pin_pod(pod, node)
        return pod


class Phalanx(Operator):
    kind = "phalanx"
    ua_prefixes = ("kopf/", "OpenAPI-Generator/")  # kopf's aiohttp + the kubernetes client in phalanx.kube

    def __init__(self, kubeconfig: Path, work: Path, config: dict[str, Any], kind: str = "phalanx") -> None:
        self.kubeconfig, self.work, self.config, self.kind = kubeconfig, work, config, kind
        self.version = subprocess.run([sys.executable, "-m", "phalanx", "--version"], capture_output=True,
                                      text=True).stdout.strip()

    def start(self, tag: str) -> None:
        cfg = self.work / f"phalanx-config-{tag}.yaml"
        cfg.write_text(yaml.safe_dump(self.config))
        self.live, self.mport = free_port(), free_port()
        self.p = Proc("phalanx", [sys.executable, "-m", "phalanx", "operator", f"--kubeconfig={self.kubeconfig}", "-A",
                                  f"--config={cfg}", f"--liveness-port={self.live}", f"--metrics-port={self.mport}"],
                      self.work / f"phalanx-{tag}.log", {"PYTHONUNBUFFERED": "1"})
        wait_for(lambda: self.p.check() or http_ok(f"http://127.0.0.1:{self.live}/healthz"), 90, "phalanx /healthz")
        time.sleep(2)  # initial node/pod/priorityclass listings into the indexes

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(("phalanx_api_requests_total", "phalanx_pods_created_total", "phalanx_reconciles_total",
                                "phalanx_reconcile_duration_seconds_sum", "phalanx_reconcile_duration_seconds_count")):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def manifest(self, name: str, pods: int) -> dict[str, Any]:
        return trainingjob(name, pods)

    group, api_version, plural = "phalanx.dev", "v1alpha1", "trainingjobs"


class Kubeflow(Operator):
    kind = "kubeflow"
    ua_prefixes = ("training-operator/",)

    def __init__(self, kubeconfig: Path, work: Path, binary: Path, version: str) -> None:
        self.kubeconfig, self.work, self.binary, self.version = kubeconfig, work, binary, version

    def start(self, tag: str, core: client.CoreV1Api) -> None:
        self.mport, self.probe, self.wport = free_port(), free_port(), free_port()
        self.p = Proc("training-operator", [
            str(self.binary), "--enable-scheme=pytorchjob",
            f"--metrics-bind-address=127.0.0.1:{self.mport}", f"--health-probe-bind-address=127.0.0.1:{self.probe}",
            f"--webhook-server-port={self.wport}", "--leader-elect=false", "--zap-log-level=info",
        ], self.work / f"training-operator-{tag}.log",
            {"KUBECONFIG": str(self.kubeconfig), "MY_POD_NAMESPACE": TO_NAMESPACE})

        def certs() -> bool:  # play kubelet: project the Secret into the cert dir
            self.p.check()
            data = core.read_namespaced_secret(TO_SECRET, TO_NAMESPACE).data or {}
            if "tls.crt" not in data:
                return False
            TO_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for k, v in data.items():
                (TO_CERT_DIR / k).write_bytes(base64.b64decode(v))
            return True

        wait_for(certs, 60, "training-operator webhook cert in the Secret")
        wait_for(lambda: self.p.check() or http_ok(f"http://127.0.0.1:{self.probe}/readyz"), 120,
                 "training-operator /readyz")
        wait_for(lambda: self.p.check() or re.search(r"Starting workers.*pytorchjob", self.p.log_path.read_text()),
                 60, "pytorchjob controller workers")

    def manifest(self, name: str, pods: int) -> dict[str, Any]:
        def spec(replicas: int) -> dict[str, Any]:
            res = {"nvidia.com/gpu": 8, "cpu": "1", "memory": "1Gi"}
            return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [
                {"name": "pytorch", "image": IMAGE, "resources": {"requests": res, "limits": res}}]}}}

        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
                "spec": {"pytorchReplicaSpecs": {"Master": spec(1), "Worker": spec(pods - 1)}}}

    group, api_version, plural = "kubeflow.org", "v1", "pytorchjobs"


# ---- audit log -----------------------------------------------------------------------------


def audit_counts(path: Path, t0: float, t1: float) -> dict[str, collections.Counter]:
    """Requests received in [t0, t1] by user agent (first token), keyed by auditID."""
    by_ua: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for p in sorted(path.parent.glob(path.name + "*")):
        with p.open() as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                ts = dt.datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
                if not t0 <= ts <= t1:
                    continue
                ua = (ev.get("userAgent") or "-").split(" ")[0]
                ref = ev.get("objectRef") or {}
                what = f"{ev['verb']} {ref.get('resource', ev.get('requestURI', '?').split('?')[0])}"
                if ref.get("subresource"):
                    what += "/" + ref["subresource"]
                by_ua[ua][ev["auditID"]] = what
    return {ua: collections.Counter(ids.values()) for ua, ids in by_ua.items()}


def wait_quiet(path: Path, prefixes: tuple[str, ...], t0: float, quiet_s: float, limit_s: float) -> float:
    """Time of the operator's last non-watch request once it has been idle for quiet_s (≤ limit_s)."""
    deadline = time.time() + limit_s
    last = t0
    while True:
        for p in sorted(path.parent.glob(path.name + "*")):
            with p.open() as f:
                for line in f:
                    if '"userAgent":"' not in line:
                        continue
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    if ev["verb"] == "watch" or not (ev.get("userAgent") or "").startswith(prefixes):
                        continue
                    ts = dt.datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
                    last = max(last, ts)
        if time.time() - last >= quiet_s or time.time() > deadline:
            return last + 0.001
        time.sleep(1.0)


# ---- trial ---------------------------------------------------------------------------------


def run_trial(op, tag: str, pods: int, api: client.ApiClient, audit_log: Path, settle: float,
              timeout: float, profile: bool = False, jobs: int = 1) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    ns = f"bench-{tag}"
    core.create_namespace({"metadata": {"name": ns}})
    wait_for(lambda: _exists(lambda: core.read_namespaced_service_account("default", ns)), 60, "default SA")
    if isinstance(op, Kubeflow):
        op.start(tag, core)
    else:
        op.start(tag)
    pid = op.p.proc.pid if op.p else os.getpid()
    cpu0 = cpu_seconds(pid)
    m0 = op.metrics() if isinstance(op, Phalanx) else {}
    watch = PodWatch(api, ns)
    watch.start()
    names = ["scale"] if jobs == 1 else [f"scale-{j:02d}" for j in range(jobs)]
    total = pods * jobs
    time.sleep(1.0)  # watch connected
    spy = None
    if profile and isinstance(op, Phalanx):  # sampled stacks of the operator, create → all Running
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(op.p.proc.pid), "--rate", "50", "--nonblocking",
                                "--format", "raw", "-o", str(op.work / f"profile-{tag}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    op.prepare(names, pods)
    t0 = time.time()
    op.create_jobs(api, ns, names, pods)
    t_created = time.time()
    watch.wait(lambda: len(watch.running) >= total, timeout, f"{total} pods Running")
    t_run = max(watch.running.values())
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    cpu1 = cpu_seconds(pid)
    time.sleep(settle)
    t_end = time.time()
    t_quiet = wait_quiet(audit_log, op.ua_prefixes, t0, quiet_s=5.0, limit_s=120.0)
    m1 = op.metrics() if isinstance(op, Phalanx) else {}
    cpu2 = cpu_seconds(pid)
    if op.p:
        op.p.check()

    def span(d: dict[str, float]) -> dict[str, float] | None:
        if not d:
            return None
        v = sorted(d.values())
        return {"first": round(v[0] - t0, 3), "p50": round(v[len(v) // 2] - t0, 3), "last": round(v[-1] - t0, 3),
                "n": len(v)}

    res: dict[str, Any] = {
        "operator": op.kind, "tag": tag, "pods": total, "jobs": jobs, "pods_per_job": pods,
        "create_call_s": round(t_created - t0, 3),
        "all_running_s": round(t_run - t0, 3),
        "pods_per_s": round(total / (t_run - t0), 1),
        "job_running_s": job_spans(watch, t0),
        "seen": span(watch.seen), "ungated": span(watch.ungated), "bound": span(watch.bound),
        "running": span(watch.running), "watch_events": watch.events,
        "operator_cpu_s_to_running": round(cpu1 - cpu0, 2),
        "operator_cpu_s_with_settle": round(cpu2 - cpu0, 2),
        "window": [t0, t_end],
        "loadavg_1m_at_running": round(os.getloadavg()[0], 2),
    }
    if m0 or m1:
        res["phalanx_metrics"] = {k: m1.get(k, 0) - m0.get(k, 0) for k in sorted(set(m0) | set(m1))
                                  if m1.get(k, 0) - m0.get(k, 0)}
    log(f"{tag}: all {total} Running after {res['all_running_s']} s ({res['pods_per_s']} pods/s); "
        f"seen last {res['seen']['last']} s, bound last {res['bound']['last']} s")

    # Tear down: job, its pods, the namespace, then the operator.
    for name in names:
        op.delete_job(api, ns, name)
    td = time.time()
    try:
        watch.wait(lambda: watch.live() == 0, 300, "pods deleted")
    except TimeoutError as exc:
        log(f"{tag}: {exc}")
    res["delete_s"] = round(time.time() - td, 2)
    watch.stopped = True
    drop_namespace(core, ns, op, tag)
    time.sleep(3)
    # Audit: requests received between create and all-Running + settle.
    res["audit"] = {ua: dict(c) for ua, c in audit_counts(audit_log, t0, t_end).items()}
    mine = collections.Counter()
    for ua, c in res["audit"].items():
        if ua.startswith(op.ua_prefixes):
            mine.update(c)
    res["operator_requests"] = sum(mine.values())
    res["operator_requests_by_verb"] = dict(mine.most_common())
    # The job's whole set-up: until the operator made no request for 5 s (Kubeflow creates its
    # 512 Services after the pods, mostly after all-Running).
    upto = collections.Counter()
    for ua, c in audit_counts(audit_log, t0, t_quiet).items():
        if ua.startswith(op.ua_prefixes):
            upto.update(c)
    res["operator_requests_until_quiet"] = sum(upto.values())
    res["operator_requests_until_quiet_by_verb"] = dict(upto.most_common())
    res["quiet_after_s"] = round(t_quiet - t0, 2)
    res["all_requests"] = sum(sum(c.values()) for c in res["audit"].values())
    log(f"{tag}: operator API requests {res['operator_requests']} (all clients {res['all_requests']}); "
        f"operator CPU {res['operator_cpu_s_to_running']} s; delete {res['delete_s']} s")
    return res


def job_spans(watch: PodWatch, t0: float) -> dict[str, float]:
    """Each job's create → all its pods Running: first, median and last job (a starved job shows
    as a last far behind the median)."""
    done: dict[str, float] = collections.defaultdict(float)
    for pod, t in watch.running.items():
        job = watch.job_of.get(pod, "?")
        done[job] = max(done[job], t - t0)
    v = sorted(done.values())
    return {"first": round(v[0], 3), "p50": round(v[len(v) // 2], 3), "last": round(v[-1], 3), "n": len(v)}


def drop_namespace(core, ns: str, op: Operator, tag: str) -> None:
    """Delete the trial's namespace, wait until it is gone, stop the trial's operator."""
    core.delete_namespace(ns)
    try:
        wait_for(lambda: not _exists(lambda: core.read_namespace(ns)), 180, f"namespace {ns} gone", 0.5)
    except TimeoutError as exc:
        log(f"{tag}: {exc}")
    if op.p:
        op.p.stop()


def _exists(fn) -> bool:
    try:
        fn()
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def kubectl(c: LocalCluster, *args: str) -> str:
    return subprocess.run([c.kubectl, f"--kubeconfig={c.kubeconfig}", *args], check=True, capture_output=True,
                          text=True).stdout


def summarize(results: list[dict[str, Any]]) -> str:
    lines = ["| trial | operator | all Running (s) | jobs Running first / median / last (s) | pods/s | "
             "last pod created (s) | last bound (s) | "
             "operator API requests to all-Running / until idle | operator CPU (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        js = r["job_running_s"]
        lines.append(f"| {r['tag']} | {r['operator']} | {r['all_running_s']:.2f} | "
                     f"{js['first']:.1f} / {js['p50']:.1f} / {js['last']:.1f} ({js['n']} jobs) | {r['pods_per_s']:.0f} | "
                     f"{r['seen']['last']:.2f} | {r['bound']['last']:.2f} | {r['operator_requests']} / "
                     f"{r['operator_requests_until_quiet']} | "
                     f"{r['operator_cpu_s_to_running']:.1f} |")
    by: dict[str, list[float]] = collections.defaultdict(list)
    for r in results:
        by[r["operator"]].append(r["all_running_s"])
    med = {k: sorted(v)[len(v) // 2] if len(v) % 2 else sum(sorted(v)[len(v) // 2 - 1:len(v) // 2 + 1]) / 2
           for k, v in by.items()}
    lines.append("")
    for k, v in med.items():
        lines.append(f"median {k}: {v:.2f} s ({results[0]['pods'] / v:.0f} pods/s) over {len(by[k])} runs")
    if "phalanx" in med and "kubeflow" in med:
        lines.append(f"ratio kubeflow/phalanx (median): {med['kubeflow'] / med['phalanx']:.2f}x")
    for floor in ("direct", "direct-rendered"):
        for k in ("phalanx", "phalanx-gated", "kubeflow"):
            if k in med and floor in med:
                lines.append(f"ratio {k}/{floor} (median): {med[k] / med[floor]:.2f}x")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--order", default="phalanx,kubeflow,kubeflow,phalanx",
                    help="comma-separated trials, each phalanx, phalanx-gated (createPinned: false), kubeflow or "
                         "direct (no operator: the bench creates pre-pinned pods; the cluster's floor) or direct-rendered "
                         "(the same, with the pods Phalanx renders for the phalanx trial's job) (default: %(default)s)")
    ap.add_argument("--pods", type=int, default=512, help="gang size (one 8-GPU pod per node; jobs × pods ≤ nodes)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="jobs created together per trial, each of --pods pods (e.g. --jobs 64 --pods 8)")
    ap.add_argument("--work-dir", type=Path, help="default: $PHALANX_CACHE/operator-scale/<timestamp>")
    ap.add_argument("--pod-create-concurrency", type=int, help="Phalanx OperatorConfig.podCreateConcurrency")
    ap.add_argument("--settle", type=float, default=5.0, help="seconds after all-Running still counted as the job's")
    ap.add_argument("--timeout", type=float, default=600.0, help="per trial, create → all Running")
    ap.add_argument("--kwok-parallelism", type=int,
                    help="kwok podPlayStageParallelism (kwok's default, and the local cluster's, is 4: "
                         "at most 4 pod-status patches in flight, the cluster's floor for a 512-pod burst)")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--profile", action="store_true",
                    help="py-spy the Phalanx operator from create to all Running (profile-<trial>.txt, raw stacks)")
    args = ap.parse_args()
    order = [o.strip() for o in args.order.split(",") if o.strip()]
    if any(o not in ("phalanx", "phalanx-gated", "kubeflow", "direct", "direct-rendered") for o in order):
        ap.error("--order takes phalanx, phalanx-gated, kubeflow, direct and direct-rendered")

    work = args.work_dir or CACHE / "operator-scale" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True, exist_ok=True)
    kf = None
    if "kubeflow" in order:
        build = ROOT / "hack" / "bench" / "build.sh"
        bin_dir = Path(subprocess.run([str(build)], check=True, capture_output=True, text=True).stdout.strip())
        crd_dir = Path(subprocess.run([str(build), "--crd-dir"], check=True, capture_output=True,
                                      text=True).stdout.strip())
        gomod = (ROOT / "hack" / "bench" / "go.mod").read_text()
        to_version = re.search(r"github.com/kubeflow/training-operator (v\S+)", gomod).group(1)
    policy = work / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    audit_log = work / "audit.log"
    kwok_config = None
    if args.kwok_parallelism:  # the local cluster's stages, plus a KwokConfiguration
        from importlib import resources

        stages = resources.files("localcluster").joinpath("kwok-stages.yaml").read_text()
        kwok_config = work / "kwok-config.yaml"
        kwok_config.write_text(yaml.safe_dump({
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            # kwok leaves unset parallelisms at 0 once a KwokConfiguration is given: spell all out.
            "options": {"podPlayStageParallelism": args.kwok_parallelism,
                        "nodePlayStageParallelism": args.kwok_parallelism,
                        "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 1},
        }) + "---\n" + stages)
    cluster = LocalCluster(work_dir=work / "cluster", kwok_config=kwok_config, extra_apiserver_args=[
        f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}", "--audit-log-mode=batch",
        "--audit-log-maxsize=2000", "--audit-log-maxbackup=20",
    ])
    results: list[dict[str, Any]] = []
    with cluster:
        log(f"cluster up: {cluster.server} (work dir {work})")
        t = time.time()
        topo = parse_topology(TOPOLOGY)
        create_nodes(cluster.kubeconfig, topo)
        log(f"{topo.layout}: {topo.node_count} nodes Ready in {time.time() - t:.1f} s")
        kubectl(cluster, "apply", "--server-side", "-f", str(PHALANX_CRD))
        crds = ["crd/trainingjobs.phalanx.dev"]
        if kf is None and "kubeflow" in order:
            kubectl(cluster, "apply", "--server-side", "-f", str(crd_dir / "kubeflow.org_pytorchjobs.yaml"))
            crds.append("crd/pytorchjobs.kubeflow.org")
            kubectl(cluster, "create", "namespace", TO_NAMESPACE)
            kubectl(cluster, "create", "secret", "generic", TO_SECRET, "-n", TO_NAMESPACE)
            kf = Kubeflow(cluster.kubeconfig, work, bin_dir / "training-operator", to_version)
        kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", *crds)
        cfg: dict[str, Any] = {}
        if args.pod_create_concurrency:
            cfg["podCreateConcurrency"] = args.pod_create_concurrency
        ph = Phalanx(cluster.kubeconfig, work, cfg)
        gated = Phalanx(cluster.kubeconfig, work, {**cfg, "createPinned": False}, kind="phalanx-gated")  # all gated
        api = api_client(cluster.kubeconfig, pool_size=8)
        api.user_agent = BENCH_UA
        for i, kind in enumerate(order):
            op = {"phalanx": ph, "phalanx-gated": gated, "kubeflow": kf, "direct": Direct(),
                  "direct-rendered": DirectRendered()}[kind]
            try:
                results.append(run_trial(op, f"{kind}-{i}", args.pods, api, audit_log, args.settle, args.timeout,
                                         args.profile, args.jobs))
            except BaseException:
                if getattr(op, "p", None) is not None:
                    op.p.stop()
                raise
            time.sleep(5)
        versions = {"kubernetes": kubectl(cluster, "version", "-o", "json"), "phalanx": ph.version,
                    "training-operator": kf.version if kf else None}
    server = json.loads(versions["kubernetes"]).get("serverVersion", {}).get("gitVersion")
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "python": platform.python_version(), "kubernetes": server, "phalanx": versions["phalanx"],
        "training_operator": versions["training-operator"], "command": " ".join([sys.argv[0], *sys.argv[1:]]),
        "kwok_pod_play_stage_parallelism": args.kwok_parallelism or 4,
        "work_dir": str(work), "results": results,
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    (work / "results.json").write_text(json.dumps(out, indent=1))
    print(summarize(results))
    print(f"results: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
