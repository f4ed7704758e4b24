"""Run the real operator as a process against the test cluster, plus waiting helpers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import node_manifests, parse_topology, wait_nodes_ready
from phalanx_common.net import free_port

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "crds" / "phalanx.dev_trainingjobs.yaml"
GROUP, VERSION, PLURAL = "phalanx.dev", "v1alpha1", "trainingjobs"




def wait_for(fn, timeout: float = 60.0, what: str = "condition", interval: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


def http_ready(proc: subprocess.Popen | None, url: str, exited: Any) -> bool:
    """True once ``url`` answers 200; raises (with ``exited()``) if the process has died."""
    if proc is None or proc.poll() is not None:
        raise AssertionError(exited())
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


RUNTIME_IMAGE = "phalanx/runtime:test"


class OperatorProcess:
    """`phalanx operator` exactly as the chart's Deployment runs it, but as a local process."""

    running: ClassVar[set[OperatorProcess]] = set()  # started and not stopped, in this test session

    def __init__(self, kubeconfig: Path, log_dir: Path, config: dict[str, Any] | None = None,
                 namespaces: list[str] | None = None, extra_args: list[str] | None = None, name: str = "operator"):
        """``namespaces``: namespaced mode (``-n`` each) instead of ``--all-namespaces``;
        ``extra_args`` e.g. ``--leader-elect ...``; ``name`` keeps several processes' files apart."""
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.name = name
        self.namespaces = list(namespaces or [])
        self.extra_args = list(extra_args or [])
        self.config_path = log_dir / f"{name}-config.yaml"
        # as the chart installs it: with a runtime image for the jobs that name none (examples/)
        self.config_path.write_text(yaml.safe_dump({"runtimeImage": RUNTIME_IMAGE, **(config or {})}))
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> OperatorProcess:
        self.liveness_port, self.metrics_port = free_port(), free_port()
        self.starts += 1
        self.log = self.log_dir / f"{self.name}-{self.starts}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        scope = [f"--namespace={ns}" for ns in self.namespaces] or ["--all-namespaces"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "phalanx", "operator", f"--kubeconfig={self.kubeconfig}", *scope,
             f"--config={self.config_path}", f"--liveness-port={self.liveness_port}", f"--metrics-port={self.metrics_port}",
             *self.extra_args],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
        OperatorProcess.running.add(self)
        wait_for(self.healthy, 60, "operator /healthz")
        return self

    def healthy(self) -> bool:
        return http_ready(self.proc, f"http://127.0.0.1:{self.liveness_port}/healthz", lambda: f"operator exited; log:\n{self.tail()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, labels: str = "") -> float:
        needle = f"{name}{{{labels}}}" if labels else name
        for line in self.metrics().splitlines():
            if line.startswith(needle + " "):
                return float(line.split()[-1])
        return 0.0

    def metric_reaching(self, name: str, value: float, timeout: float = 10.0) -> float:
        """The counter once it reaches ``value`` (an AssertionError after ``timeout``): the
        operator counts a create when its response is back on the event loop, which can be
        after the pod is already Running, so a reading taken at once can trail by one."""
        wait_for(lambda: self.metric(name) >= value, timeout, f"{name} to reach {value}", interval=0.1)
        return self.metric(name)

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, like a node dying under the operator."""
        OperatorProcess.running.discard(self)
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        OperatorProcess.running.discard(self)
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log.read_text().splitlines()[-n:]) if self.log.exists() else ""


def install_crd(cluster) -> None:
    """Every Phalanx CRD (TrainingJob, TrainingSweep), established before an operator starts:
    kopf resolves its resources at start-up."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE.parent))
    crds = [f"crd/{plural}.{GROUP}" for plural in (PLURAL, "trainingsweeps")]
    for _ in range(3):  # kubectl wait fails at once (not after its timeout) on a NotFound
        done = cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *crds, check=False, timeout=70)
        if done.returncode == 0:
            return
        time.sleep(2)
    raise RuntimeError(f"the CRDs are not Established: kubectl wait said {done.stderr.strip() or done.stdout.strip()}")


@pytest.fixture(scope="session")
def crd(cluster):
    install_crd(cluster)
    return CRD_FILE


@pytest.fixture(scope="session")
def operator(cluster, crd, tmp_path_factory):
    op = OperatorProcess(cluster.kubeconfig, tmp_path_factory.mktemp("operator")).start()
    yield op
    op.stop()


@pytest.fixture
def api(cluster):
    with cluster.api(pool_size=16) as a:
        yield a


class Jobs:
    """TrainingJob CRUD and observations in one namespace."""

    def __init__(self, api_client, namespace: str):
        self.ns = namespace
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.ns}}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, obj)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name)

    def patch(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, body)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, name, body={"propagationPolicy": "Background"})

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def config_map(self, name: str, data: dict[str, str]) -> str:
        """A ConfigMap of files for a job's pods (scripts), replacing one an earlier run left."""
        try:
            self.core.delete_namespaced_config_map(name, self.ns)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.core.create_namespaced_config_map(
            self.ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data))
        return name

    def table_row(self, name: str) -> dict[str, Any]:
        """The job's row as `kubectl get tj` prints it: the API server's Table (the CRD's printer
        columns), column name → cell."""
        table = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, name, _headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
        names = [column["name"] for column in table["columnDefinitions"]]
        return dict(zip(names, table["rows"][0]["cells"], strict=True))

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == type_), None)

    def pods(self, name: str, attempt: int | None = None) -> list[Any]:
        sel = f"phalanx.dev/job-name={name}"
        if attempt is not None:
            sel += f",phalanx.dev/restart-attempt={attempt}"
        return self.core.list_namespaced_pod(self.ns, label_selector=sel).items

    def events(self, name: str) -> list[Any]:
        return [e for e in self.core.list_namespaced_event(self.ns).items if e.involved_object.name == name]

    def wait_phase(self, name: str, phase: str, timeout: float = 60.0) -> dict[str, Any]:
        return wait_for(lambda: (s := self.status(name)).get("phase") == phase and s, timeout, f"{name} phase {phase}")


def job_manifest(name: str, nodes: int = 2, procs: int = 4, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    base = {
        "image": RUNTIME_IMAGE,
        "nodes": nodes,
        "procsPerNode": procs,
        "resources": {"gpus": gpus, "cpu": "1", "memory": "1Gi"},
        "model": {"preset": "debug"},
        "training": {"globalBatchSize": nodes * procs},
        "failurePolicy": {"backoffSeconds": 1},
    }
    base.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": base}


POOL_LABEL = "phalanx.dev/test-pool"
TOPO_LABELS = ("phalanx.dev/topology-block", "phalanx.dev/topology-subblock", "phalanx.dev/topology-rack")


def create_pool_nodes(api, kubeconfig, pid: str, prefix: str, layout: dict, status: dict | None = None,
                      timeout: float = 60) -> list[str]:
    """kwok GPU nodes of ``layout`` tainted and labelled for one test (pool ``pid``), in topology
    domains private to the pool; ``status`` is merged into each node's status. Their names, Ready."""
    topo = parse_topology({"name": f"pool-{pid}", "namePrefix": f"{prefix}{pid}", "layout": layout,
                           "node": {"gpu": 8, "labels": {POOL_LABEL: pid},
                                    "taints": [{"key": POOL_LABEL, "value": pid, "effect": "NoSchedule"}]}})
    core, names = client.CoreV1Api(api), []
    for m in node_manifests(topo):
        for key in TOPO_LABELS:  # domains private to this pool
            m["metadata"]["labels"][key] = f"{pid}-{m['metadata']['labels'][key]}"
        m.setdefault("status", {}).update(status or {})
        core.create_node(m)
        names.append(m["metadata"]["name"])
    wait_nodes_ready(kubeconfig, set(names), timeout=timeout)
    return names


def delete_nodes(api, names) -> None:
    core = client.CoreV1Api(api)
    for n in names:
        try:
            core.delete_node(n)
        except ApiException:
            pass


@pytest.fixture
def pool(cluster, api):
    """16 nodes × 8 GPUs: 2 blocks × 2 subblocks × 2 racks × 2 nodes, tainted for this test only."""
    pid = uuid.uuid4().hex[:6]
    names = create_pool_nodes(api, cluster.kubeconfig, pid, "p", {"block": 2, "subblock": 2, "rack": 2, "node": 2})
    core = client.CoreV1Api(api)
    yield {"id": pid, "nodes": names, "labels": {n: core.read_node(n).metadata.labels for n in names}}
    delete_nodes(api, names)


def pooled(pool, name, nodes, **spec):
    pid = pool["id"]
    return job_manifest(
        name, nodes=nodes, procs=8, gpus=8,
        tolerations=[{"key": POOL_LABEL, "operator": "Equal", "value": pid, "effect": "NoSchedule"}],
        nodeSelector={POOL_LABEL: pid}, **spec,
    )


