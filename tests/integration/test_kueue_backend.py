"""The kueue backend against a real Kueue v0.17.0 on the real control plane with kwok GPU nodes.

Kueue is built from the Go module proxy by hack/kueue/build.sh (cached) and run as a local
process by hack/cluster/localcluster/kueue.py: its CRDs installed, its webhooks served on 127.0.0.1 with a
generated certificate and registered by URL + caBundle, the plain ``pod`` integration on for
namespaces labelled phalanx.dev/kueue=true, TopologyAwareScheduling on. The real Phalanx operator
renders each TrainingJob as a Kueue pod group; Kueue gates, admits (quota, priority, TAS) and
ungates; the real kube-scheduler binds; the operator mirrors Kueue's verdict into Schedulable.

Without a buildable Kueue the tests skip, or fail under PHALANX_REQUIRE_CLUSTER=1 (CI).
"""

from __future__ import annotations

import os
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import finish_pod
from localcluster import kueue as kueuelocal
from phalanx.lifecycle.resume import FROM_STEP_ZERO
from tests.integration.harness import POOL_LABEL, TOPO_LABELS, Jobs, pooled, wait_for

KQ, KV = "kueue.x-k8s.io", "v1beta2"




@pytest.fixture(scope="module")
def kueue(cluster, tmp_path_factory):
    """A real Kueue for this module (built once, cached by version under ~/.cache/phalanx/bin)."""
    t0 = time.monotonic()
    try:
        kdir = kueuelocal.build()
    except Exception as e:  # noqa: BLE001 - reported as skip or failure below
        msg = f"Kueue could not be built (hack/kueue/build.sh): {e}"
        if os.environ.get("PHALANX_REQUIRE_CLUSTER"):
            pytest.fail(msg + " [PHALANX_REQUIRE_CLUSTER is set]", pytrace=False)
        pytest.skip(msg)
    built = time.monotonic() - t0
    k = kueuelocal.LocalKueue(cluster.kubeconfig, tmp_path_factory.mktemp("kueue"), cluster.kubectl_bin, kueue_dir=kdir)
    try:
        k.start()
    except Exception as e:
        pytest.fail(f"Kueue did not start: {e}", pytrace=False)
    print(f"\nkueue: build/cache {built:.1f}s, start {k.started_in:.1f}s, webhooks on 127.0.0.1:{k.webhook_port}")
    yield k
    k.stop()


@pytest.fixture
def jobs(api, namespace, operator, kueue):
    key, value = kueuelocal.MANAGED_LABEL
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": {key: value}}})
    return Jobs(api, namespace)


class KueueObjects:
    """Cluster-scoped Kueue objects (and LocalQueues) made by one test, deleted after it."""

    def __init__(self, api, pool):
        self.custom = client.CustomObjectsApi(api)
        self.pool = pool
        self.made: list[tuple[str, str | None, str]] = []

    def create(self, plural, body, namespace=None):
        body = {"apiVersion": f"{KQ}/{KV}", **body}
        if namespace:
            self.custom.create_namespaced_custom_object(KQ, KV, namespace, plural, body)
        else:
            self.custom.create_cluster_custom_object(KQ, KV, plural, body)
        self.made.append((plural, namespace, body["metadata"]["name"]))
        return body["metadata"]["name"]

    def queue(self, namespace, gpus, *, topology=False, preemption=None, cpu="1000", memory="10000Gi"):
        """ResourceFlavor over this pool's nodes (TAS: with a Topology of the pool's levels),
        ClusterQueue with ``gpus`` nvidia.com/gpu, LocalQueue ``lq`` in ``namespace``."""
        pid = self.pool["id"]
        flavor = {"nodeLabels": {POOL_LABEL: pid}}
        if topology:
            levels = [*({"nodeLabel": k} for k in TOPO_LABELS), {"nodeLabel": "kubernetes.io/hostname"}]
            flavor["topologyName"] = self.create("topologies", {"kind": "Topology", "metadata": {"name": f"topo-{pid}"},
                                                                "spec": {"levels": levels}})
        rf = self.create("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": f"rf-{pid}"}, "spec": flavor})
        cq_spec = {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": rf, "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": memory},
                                                   {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}
        if preemption:
            cq_spec["preemption"] = preemption
        cq = self.create("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": f"cq-{pid}"}, "spec": cq_spec})
        self.create("localqueues", {"kind": "LocalQueue", "metadata": {"name": "lq", "namespace": namespace},
                                    "spec": {"clusterQueue": cq}}, namespace)
        wait_for(lambda: self.cq_active(cq), 30, f"ClusterQueue {cq} Active")
        return "lq"

    def cq_active(self, name):
        cq = self.custom.get_cluster_custom_object(KQ, KV, "clusterqueues", name)
        return any(c["type"] == "Active" and c["status"] == "True" for c in (cq.get("status") or {}).get("conditions") or [])

    def workload(self, namespace, name):
        try:
            return self.custom.get_namespaced_custom_object(KQ, KV, namespace, "workloads", name)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def delete_all(self):
        for plural, ns, name in reversed(self.made):
            try:
                if ns:
                    self.custom.delete_namespaced_custom_object(KQ, KV, ns, plural, name)
                else:
                    self.custom.delete_cluster_custom_object(KQ, KV, plural, name)
            except ApiException:
                pass


@pytest.fixture
def kq(api, pool, kueue):
    objs = KueueObjects(api, pool)
    yield objs
    objs.delete_all()


def running(jobs, name, n, attempt=0):
    pods = jobs.pods(name, attempt)
    return len(pods) == n and all(p.status.phase == "Running" and p.spec.node_name for p in pods) and pods


def schedulable(jobs, name):
    return jobs.condition(name, "Schedulable") or {}


def kueue_job(pool, name, nodes, queue, **scheduling):
    return pooled(pool, name, nodes, scheduling={"backend": "kueue", "queue": queue, **scheduling})


def test_quota_admits_two_gangs_and_queues_the_third(cluster, jobs, kq, pool):
    # Two 2-node × 8-GPU gangs are 32 GPUs: the ClusterQueue holds exactly two of them.
    lq = kq.queue(jobs.ns, gpus=32)
    for name in ("first", "second"):
        jobs.create(kueue_job(pool, name, 2, lq))
    first = wait_for(lambda: running(jobs, "first", 2), 90, "first admitted, bound, Running")
    wait_for(lambda: running(jobs, "second", 2), 90, "second admitted, bound, Running")
    for name in ("first", "second"):
        cond = wait_for(lambda n=name: (c := schedulable(jobs, n)).get("status") == "True" and c, 30, f"{name} Schedulable")
        assert cond["reason"] == "Admitted" and f"ClusterQueue cq-{pool['id']}" in cond["message"], cond
    jobs.create(kueue_job(pool, "third", 2, lq))
    cond = wait_for(lambda: (c := schedulable(jobs, "third")).get("status") == "False" and c, 60, "third Pending with Kueue's reason")
    wl = kq.workload(jobs.ns, "third")
    qr = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert cond["reason"] == qr["reason"] == "Pending" and qr["message"] in cond["message"], (cond, qr)
    assert "insufficient unused quota for nvidia.com/gpu" in cond["message"], cond
    pods = jobs.pods("third")
    assert len(pods) == 2 and not any(p.spec.node_name for p in pods)
    gates = [{g.name for g in p.spec.scheduling_gates or []} for p in pods]
    assert all("kueue.x-k8s.io/admission" in g and "phalanx.dev/gang" not in g for g in gates), gates
    assert jobs.status("third")["phase"] == "Scheduling"
    for p in first:  # the first gang finishes: Kueue frees its quota and admits the third
        finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 0)
    jobs.wait_phase("first", "Succeeded", 60)
    wait_for(lambda: running(jobs, "third", 2), 90, "third admitted and Running after quota frees")
    wait_for(lambda: schedulable(jobs, "third").get("reason") == "Admitted", 30, "third Schedulable=Admitted")


def test_priority_preemption_suspends_and_resumes_the_low_gang(cluster, api, jobs, kq, pool):
    sched = client.SchedulingV1Api(api)
    low, high = f"low-{pool['id']}", f"high-{pool['id']}"
    sched.create_priority_class({"metadata": {"name": low}, "value": 10})
    sched.create_priority_class({"metadata": {"name": high}, "value": 100000})
    try:
        lq = kq.queue(jobs.ns, gpus=16, preemption={"withinClusterQueue": "LowerPriority"})
        jobs.create(kueue_job(pool, "low", 2, lq, priorityClassName=low))
        wait_for(lambda: running(jobs, "low", 2), 90, "low Running")
        jobs.create(kueue_job(pool, "urgent", 2, lq, priorityClassName=high))
        # Kueue evicts the low gang: its pods are stopped; the operator starts a new attempt
        # that queues again (no restart counted), and says why in Suspended.
        sus = wait_for(lambda: (c := jobs.condition("low", "Suspended") or {}).get("status") == "True" and c, 60, "low Suspended")
        assert sus["reason"] == "Preempted" and "Kueue" in sus["message"], sus
        # The kubelet's part, which kwok does not play: a deleted pod's containers get SIGTERM, the
        # runtime checkpoints and exits 143 (EXIT_PREEMPTED), the pod ends Failed; only then does
        # Kueue drop its finalizer from the stopped pods.
        stopped = wait_for(lambda: len(ps := [p for p in jobs.pods("low", 0) if p.metadata.deletion_timestamp]) == 2 and ps,
                           60, "Kueue deletes low's pods")
        for p in stopped:
            finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 143, via="status")
        urgent = wait_for(lambda: running(jobs, "urgent", 2), 90, "urgent Running")
        wait_for(lambda: not jobs.pods("low", 0), 60, "low's stopped pods gone")
        low_pods = wait_for(lambda: len(ps := jobs.pods("low", 1)) == 2 and ps, 60, "low's attempt 1 queued")
        assert not any(p.spec.node_name for p in low_pods)
        st = jobs.status("low")
        assert st.get("restarts", 0) == 0 and st["restartAttempt"] == 1, st
        cond = wait_for(lambda: (c := schedulable(jobs, "low")).get("status") == "False" and c, 30, "low Schedulable=False")
        assert cond["reason"] == "Preempted", cond
        events = [e for e in jobs.events("low") if e.reason == "Preempted"]
        # The job has no checkpoint volume: the operator's Event does not promise a resume.
        assert any(f"a new gang queues and {FROM_STEP_ZERO}" in e.message for e in events), [e.message for e in events]
        for p in urgent:
            finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 0)
        jobs.wait_phase("urgent", "Succeeded", 60)
        wait_for(lambda: running(jobs, "low", 2, attempt=1), 90, "low re-admitted, attempt 1 Running")
        wait_for(lambda: (jobs.condition("low", "Suspended") or {}).get("status") == "False", 30, "low no longer Suspended")
        st = jobs.wait_phase("low", "Running", 30)
        assert st.get("restarts", 0) == 0 and st["restartAttempt"] == 1, st
    finally:
        sched.delete_priority_class(low)
        sched.delete_priority_class(high)


def test_tas_required_topology_is_honoured(jobs, kq, pool):
    lq = kq.queue(jobs.ns, gpus=128, topology=True)
    jobs.create(kueue_job(pool, "fits", 4, lq, topology={"required": "subblock"}))
    pods = wait_for(lambda: running(jobs, "fits", 4), 90, "4-node gang Running under one subblock")
    subblocks = {pool["labels"][p.spec.node_name]["phalanx.dev/topology-subblock"] for p in pods}
    assert len(subblocks) == 1, subblocks
    cond = schedulable(jobs, "fits")
    assert cond["reason"] == "Admitted" and "TAS" in cond["message"], cond
    # 6 nodes under one subblock (4 nodes each) can never fit: Kueue says so, nothing binds.
    jobs.create(kueue_job(pool, "toobig", 6, lq, topology={"required": "subblock"}))
    cond = wait_for(lambda: (c := schedulable(jobs, "toobig")).get("status") == "False" and c, 60, "toobig Pending")
    assert cond["reason"] == "Pending" and "topology" in cond["message"], cond
    assert not any(p.spec.node_name for p in jobs.pods("toobig"))


def test_a_gang_with_roles_is_one_kueue_workload_of_every_pod(jobs, kq, pool):
    """Workers (8 GPUs each) and a CPU parameter-server role: one pod group, admitted and
    released together; Kueue's Workload holds a pod set per pod shape, counting every pod."""
    lq = kq.queue(jobs.ns, gpus=16)
    job = kueue_job(pool, "mixed", 2, lq)
    job["spec"].pop("model")
    job["spec"].update(command=["python", "train.py"], procsPerNode=1,
                       roles=[{"name": "ps", "replicas": 2, "resources": {"cpu": "1", "memory": "1Gi"}}])
    jobs.create(job)
    pods = wait_for(lambda: running(jobs, "mixed", 4), 90, "all 4 pods admitted, bound, Running")
    assert sorted(p.metadata.labels.get("phalanx.dev/role", "worker") for p in pods) == ["ps", "ps", "worker", "worker"]
    wl = kq.workload(jobs.ns, "mixed")
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 4 and len(wl["spec"]["podSets"]) == 2, wl["spec"]["podSets"]
    wait_for(lambda: schedulable(jobs, "mixed").get("reason") == "Admitted", 30, "Schedulable=Admitted")
