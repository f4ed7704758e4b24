"""The operator as several replicas (leader election on a Lease) and in namespaced mode, on the
real control plane. Each test runs its own operator processes on a private 3-node kwok pool;
the session's cluster-wide operator is paused meanwhile, so whatever reconciles is ours."""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import finish_pod, node_manifests, parse_topology, wait_nodes_ready
from tests.integration.harness import POOL_LABEL, Jobs, OperatorProcess, pooled, wait_for

LEASE = {"duration": 4, "renew": 3, "retry": 0.5}  # short, so a failover fits in a test


@pytest.fixture
def alone():
    """Pause the session's cluster-wide operator(s) for this test; restart them after."""
    paused = [op for op in list(OperatorProcess.running) if not op.namespaces]
    for op in paused:
        op.stop()
    yield
    for op in paused:
        op.start()


@pytest.fixture
def pool3(cluster, api):
    """3 kwok nodes × 8 GPUs in one rack, tainted for this test only."""
    pid = uuid.uuid4().hex[:6]
    topo = parse_topology({"name": f"ha-{pid}", "namePrefix": f"ha{pid}", "layout": {"node": 3},
                           "node": {"gpu": 8, "labels": {POOL_LABEL: pid},
                                    "taints": [{"key": POOL_LABEL, "value": pid, "effect": "NoSchedule"}]}})
    core = client.CoreV1Api(api)
    names = []
    for m in node_manifests(topo):
        for key in [k for k in m["metadata"]["labels"] if k.startswith("phalanx.dev/topology-")]:
            m["metadata"]["labels"][key] = f"{pid}-{m['metadata']['labels'][key]}"  # domains private to this pool
        core.create_node(m)
        names.append(m["metadata"]["name"])
    wait_nodes_ready(cluster.kubeconfig, set(names), timeout=60)
    yield {"id": pid, "nodes": names}
    for n in names:
        try:
            core.delete_node(n)
        except ApiException:
            pass


def drain(api, namespace: str, timeout: float = 30) -> None:
    """Delete the namespace's jobs while an operator still runs (it removes kopf's finalizer);
    whatever is left then loses the finalizer, so the namespace never hangs in Terminating."""
    jobs = Jobs(api, namespace)
    names = lambda: [j["metadata"]["name"] for j in jobs.custom.list_namespaced_custom_object(  # noqa: E731
        "phalanx.dev", "v1alpha1", namespace, "trainingjobs")["items"]]
    for name in names():
        jobs.delete(name)
    try:
        wait_for(lambda: not names(), timeout, "jobs deleted")
    except AssertionError:
        for name in names():
            jobs.patch(name, {"metadata": {"finalizers": None}})


def elected(cluster, tmp_path, namespace, lease, name):
    args = ["--leader-elect", f"--leader-elect-lease-name={lease}", f"--leader-elect-namespace={namespace}",
            f"--leader-elect-lease-duration={LEASE['duration']}", f"--leader-elect-renew-deadline={LEASE['renew']}",
            f"--leader-elect-retry-period={LEASE['retry']}"]
    return OperatorProcess(cluster.kubeconfig, tmp_path, namespaces=[namespace], extra_args=args, name=name)


def says(op, text, timeout=30.0):
    return wait_for(lambda: text in op.log.read_text(), timeout, f"{op.name} log: {text!r}", interval=0.1)


def running(jobs, name, n, attempt=0):
    pods = jobs.pods(name, attempt)
    return len(pods) == n and all(p.status.phase == "Running" for p in pods) and pods


@pytest.fixture
def pair(cluster, crd, api, tmp_path, namespace, alone):
    """Two replicas of one operator on one lease: `a` started first (leads), `b` a standby."""
    lease = f"ha-{uuid.uuid4().hex[:6]}"
    a = elected(cluster, tmp_path, namespace, lease, "a")
    b = elected(cluster, tmp_path, namespace, lease, "b")
    try:
        a.start()
        says(a, "acquired leadership")
        b.start()
        says(b, "standby: lease")
        yield a, b
        drain(api, namespace)
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def namespaced(cluster, crd, api, tmp_path, namespace, alone):
    """Start (on demand) an operator for `namespace` only; drained and stopped afterwards."""
    started = []

    def start():
        started.append(OperatorProcess(cluster.kubeconfig, tmp_path, namespaces=[namespace], name="ns").start())
        return started[-1]

    yield start
    if started:
        drain(api, namespace)
        started[0].stop()


def test_only_the_leader_reconciles(api, namespace, pool3, pair):
    a, b = pair
    jobs = Jobs(api, namespace)
    jobs.create(pooled(pool3, "ha", 2))
    wait_for(lambda: running(jobs, "ha", 2), 45, "gang Running")
    jobs.wait_phase("ha", "Running", 20)
    assert a.metric_reaching("phalanx_pods_created_total", 2) == 2
    assert b.metric("phalanx_pods_created_total") == 0
    assert b.metric("phalanx_reconciles_total", 'result="ok"') == 0
    assert (a.metric("phalanx_leader"), b.metric("phalanx_leader")) == (1, 0)
    lease = client.CoordinationV1Api(api).list_namespaced_lease(namespace).items[0]
    assert lease.spec.holder_identity in a.log.read_text()
    assert "acquired leadership" not in b.log.read_text()
    # a clean stop hands the lease over at once, not after it expires
    stopping = time.monotonic()
    a.stop()
    says(b, "acquired leadership", timeout=LEASE["duration"] + 10)
    assert "released lease" in a.log.read_text()
    assert time.monotonic() - stopping < LEASE["duration"], "the standby waited for expiry"


def test_kill_the_leader_the_standby_takes_over_and_the_job_proceeds(cluster, api, namespace, pool3, pair):
    a, b = pair
    jobs = Jobs(api, namespace)
    jobs.create(pooled(pool3, "failover", 2))
    pods = wait_for(lambda: running(jobs, "failover", 2), 45, "gang Running")
    jobs.wait_phase("failover", "Running", 20)
    a.kill()  # SIGKILL: no release of the lease, the standby must wait for it to expire
    killed = time.monotonic()
    says(b, "acquired leadership", timeout=LEASE["duration"] + 10)
    took = time.monotonic() - killed
    assert took <= LEASE["duration"] + 3 * LEASE["retry"] + 1, f"takeover after {took:.1f}s"
    # the new leader acts: a retryable failure restarts the gang, and it creates the new pods
    finish_pod(cluster.kubeconfig, namespace, pods[0].metadata.name, 137)
    wait_for(lambda: running(jobs, "failover", 2, attempt=1), 45, "attempt 1 Running")
    assert b.metric_reaching("phalanx_pods_created_total", 2) == 2
    for p in jobs.pods("failover", 1):
        finish_pod(cluster.kubeconfig, namespace, p.metadata.name, 0)
    jobs.wait_phase("failover", "Succeeded", 30)


def test_namespaced_mode_counts_gpus_held_in_other_namespaces(api, namespace, pool3, namespaced):
    """A pod of another (unwatched) namespace holds all 8 GPUs of one pool node: a 2-node gang
    goes on the other two, and a third gang waits instead of being pinned onto the full node.
    When that pod goes, the waiting gang is placed there (the reflector wakes it)."""
    core = client.CoreV1Api(api)
    other = f"{namespace}-x"
    core.create_namespace({"metadata": {"name": other, "labels": {"phalanx.dev/test": "true"}}})
    try:
        full = pool3["nodes"][0]
        wait_for(lambda: _service_account(core, other), 30, "default service account")
        core.create_namespaced_pod(other, _gpu_hog(full, pool3["id"]))
        wait_for(lambda: core.read_namespaced_pod("hog", other).status.phase == "Running", 30, "hog Running")
        op = namespaced()  # after the hog: the reflector's first list must show it
        says(op, "pod reflector synced")
        jobs = Jobs(api, namespace)
        jobs.create(pooled(pool3, "wide", 2))
        wait_for(lambda: running(jobs, "wide", 2), 45, "wide Running")
        # The pods can run (kwok) before the pass that released them has written its status.
        placement = wait_for(lambda: jobs.status("wide").get("placement"), 30, "wide's placement in its status")
        assert full not in placement["nodes"]
        jobs.create(pooled(pool3, "more", 1))
        cond = wait_for(lambda: (c := jobs.condition("more", "Schedulable") or {}).get("status") == "False" and c,
                        30, "more waits")
        assert "8 free nvidia.com/gpu" in cond["message"] and "0 fit" in cond["message"], cond["message"]
        assert all(p.spec.scheduling_gates for p in jobs.pods("more"))  # not pinned onto the full node
        core.delete_namespaced_pod("hog", other, grace_period_seconds=0)
        wait_for(lambda: running(jobs, "more", 1), 45, "more Running once the hog is gone")
        placement = wait_for(lambda: jobs.status("more").get("placement"), 30, "more's placement in its status")
        assert placement["nodes"] == [full]
    finally:
        core.delete_namespace(other)


def _service_account(core, ns):
    try:
        return core.read_namespaced_service_account("default", ns)
    except ApiException:
        return None


def _gpu_hog(node: str, pid: str) -> dict:
    gpus = {"nvidia.com/gpu": "8"}
    return {"metadata": {"name": "hog"},
            "spec": {"nodeName": node, "tolerations": [{"key": POOL_LABEL, "operator": "Exists"}],
                     "containers": [{"name": "c", "image": "busybox", "resources": {"requests": gpus, "limits": gpus}}]}}
