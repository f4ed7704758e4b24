"""One real training job admitted through a real Kueue (v0.17.0) on the kind cluster.

``hack/kueue/kind.sh up`` builds (cached) the Kueue image from the binary of hack/kueue/build.sh
— no registry — loads it onto the nodes and installs Kueue's own Helm chart (internal certificate
management, the plain ``pod`` integration for namespaces labelled phalanx.dev/kueue=true). The
in-cluster operator (charts/phalanx) renders the job as a Kueue pod group; Kueue gates, admits and
ungates it; the job trains and succeeds. ``hack/kueue/kind.sh down`` removes Kueue afterwards, so
its webhooks are gone for the rest of the suite.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.test_kind_e2e import small_job
from tests.integration.harness import wait_for

ROOT = Path(__file__).resolve().parents[2]
KQ, KV = "kueue.x-k8s.io", "v1beta2"
LABEL = ("phalanx.dev/kueue", "true")

pytestmark = pytest.mark.timeout(1500)


def _kind(verb: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "hack" / "kueue" / "kind.sh"), verb], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def kueue_on_kind(e2e_api, operator_deployment):
    t0 = time.monotonic()
    up = _kind("up", 3600)  # a cold machine builds Kueue first (hack/kueue/build.sh)
    if up.returncode != 0:
        pytest.fail(f"hack/kueue/kind.sh up failed ({up.returncode}):\n{up.stderr[-4000:]}", pytrace=False)
    print(f"\nkueue on kind: up in {time.monotonic() - t0:.0f}s")
    yield
    _kind("down", 300)


@pytest.fixture
def kueue_queue(e2e_api, namespace, kueue_on_kind):
    custom = client.CustomObjectsApi(e2e_api)
    core = client.CoreV1Api(e2e_api)
    key, value = LABEL
    core.patch_namespace(namespace, {"metadata": {"labels": {key: value}}})
    objs = [
        ("resourceflavors", None, {"kind": "ResourceFlavor", "metadata": {"name": "e2e-cpu"}, "spec": {}}),
        ("clusterqueues", None, {"kind": "ClusterQueue", "metadata": {"name": "e2e-cq"}, "spec": {
            "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": "e2e-cpu", "resources": [{"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"}]}]}]}}),
        ("localqueues", namespace, {"kind": "LocalQueue", "metadata": {"name": "e2e-lq"}, "spec": {"clusterQueue": "e2e-cq"}}),
    ]
    for plural, ns, body in objs:
        body = {"apiVersion": f"{KQ}/{KV}", **body}
        try:
            if ns:
                custom.create_namespaced_custom_object(KQ, KV, ns, plural, body)
            else:
                custom.create_cluster_custom_object(KQ, KV, plural, body)
        except client.ApiException as e:
            if e.status != 409:
                raise
    yield "e2e-lq"
    for plural, ns, body in reversed(objs):
        try:
            if ns:
                custom.delete_namespaced_custom_object(KQ, KV, ns, plural, body["metadata"]["name"])
            else:
                custom.delete_cluster_custom_object(KQ, KV, plural, body["metadata"]["name"])
        except client.ApiException:
            pass
    core.patch_namespace(namespace, {"metadata": {"labels": {key: None}}})


def test_job_admitted_by_kueue_trains_to_success(jobs, e2e_api, runtime_image, kueue_queue):
    job = small_job("kueue-e2e", runtime_image, steps=10, interval=5)
    job["spec"]["scheduling"] = {"backend": "kueue", "queue": kueue_queue}
    t0 = time.monotonic()
    jobs.create(job)
    # Kueue's webhook gated the pods and made one Workload for the pod group; it admits it.
    pods = wait_for(lambda: len(ps := jobs.pods("kueue-e2e")) == 2 and ps, 120, "2 pods")
    assert all(p.metadata.labels.get("kueue.x-k8s.io/queue-name") == kueue_queue for p in pods)
    custom = client.CustomObjectsApi(e2e_api)

    def admitted():
        try:
            wl = custom.get_namespaced_custom_object(KQ, KV, jobs.ns, "workloads", "kueue-e2e")
        except client.ApiException:
            return None
        conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}
        return (conds.get("Admitted") or {}).get("status") == "True" and wl

    wl = wait_for(admitted, 180, "Kueue admits the pod group")
    assert wl["status"]["admission"]["clusterQueue"] == "e2e-cq"
    cond = wait_for(lambda: (c := jobs.condition("kueue-e2e", "Schedulable") or {}).get("reason") == "Admitted" and c,
                    120, "Schedulable mirrors Kueue's admission")
    assert "ClusterQueue e2e-cq" in cond["message"], cond
    status = jobs.wait_phase("kueue-e2e", "Succeeded", 900)
    assert status.get("restarts", 0) == 0 and status["step"] == 10, status
    print(f"\nkueue e2e job: created → Succeeded in {time.monotonic() - t0:.0f}s")
