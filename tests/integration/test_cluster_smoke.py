"""The integration cluster itself works: API, scheduler, kwok, garbage collector, pod exits."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import LABEL_GPU_CLIQUE, finish_pod
from tests.integration.conftest import require_binaries
from tests.integration.harness import wait_for


@pytest.fixture
def core(cluster):
    with cluster.api() as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def kwok_nodes(cluster):
    nodes = cluster.kwok_nodes()
    if not nodes:
        pytest.skip("cluster has no kwok nodes (set PHALANX_TOPOLOGY=small-4 to create them)")
    return nodes


def pod(name: str, **spec) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
            "restartPolicy": "Never",
            **spec,
        },
    }


def running(core, ns, name):
    p = core.read_namespaced_pod(name, ns)
    return p if p.status.phase == "Running" else None


def test_apiserver_answers(cluster, core):
    with cluster.api() as api:
        version = client.VersionApi(api).get_code()
    assert version.major == "1"
    assert core.read_namespace("default").status.phase == "Active"
    if cluster.kubectl_bin:
        out = cluster.kubectl("get", "--raw", "/readyz").stdout
        assert out.strip() == "ok"


def test_kwok_nodes_ready_with_gpus(core, kwok_nodes):
    for name in kwok_nodes[:4]:
        n = core.read_node(name)
        conds = {c.type: c.status for c in n.status.conditions}
        assert conds["Ready"] == "True", conds
        assert n.status.allocatable["nvidia.com/gpu"] == "8"
        assert LABEL_GPU_CLIQUE in n.metadata.labels


def test_scheduler_binds_and_kwok_runs(core, namespace, kwok_nodes):
    core.create_namespaced_pod(namespace, pod("plain"))
    p = wait_for(lambda: running(core, namespace, "plain"), what="pod Running")
    assert p.spec.node_name in kwok_nodes  # bound by the real kube-scheduler
    assert p.status.pod_ip
    assert p.status.container_statuses[0].ready


def test_gpu_request_scheduled_to_gpu_node(core, namespace, kwok_nodes):
    body = pod("gpu")
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    core.create_namespaced_pod(namespace, body)
    p = wait_for(lambda: running(core, namespace, "gpu"), what="gpu pod Running")
    assert core.read_node(p.spec.node_name).status.allocatable["nvidia.com/gpu"] == "8"


def test_garbage_collector_deletes_dependents(core, namespace):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [ref]}}
    )
    core.delete_namespaced_config_map("owner", namespace)

    def gone():
        try:
            core.read_namespaced_config_map("dependent", namespace)
            return False
        except ApiException as e:
            return e.status == 404

    wait_for(gone, timeout=90, what="garbage collector to delete the dependent")


def test_foreground_deletion_of_pod_dependent(core, namespace, kwok_nodes):
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "fg-owner"}})
    body = pod("fg-child")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "fg-owner", "uid": owner.metadata.uid,
         "blockOwnerDeletion": True}
    ]
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: running(core, namespace, "fg-child"), what="child Running")
    core.delete_namespaced_config_map(
        "fg-owner", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground")
    )

    def both_gone():
        names = {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
        cms = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
        return "fg-child" not in names and "fg-owner" not in cms

    wait_for(both_gone, timeout=90, what="foreground deletion (kwok deletes the pod)")


@pytest.mark.parametrize("via", ["annotation", "status"])
@pytest.mark.parametrize("code,phase", [(0, "Succeeded"), (3, "Failed")])
def test_pod_completion_simulated(core, namespace, kwok_nodes, via, code, phase):
    name = f"exit-{via}-{code}"
    core.create_namespaced_pod(namespace, pod(name))
    wait_for(lambda: running(core, namespace, name), what="pod Running")
    finish_pod(core.api_client, namespace, name, code, via=via)

    def done():
        p = core.read_namespaced_pod(name, namespace)
        return p if p.status.phase == phase else None

    p = wait_for(done, what=f"pod {phase}")
    term = p.status.container_statuses[0].state.terminated
    assert term is not None and term.exit_code == code
    # A finished pod stays finished (kwok must not flip it back to Running).
    time.sleep(1.5)
    assert core.read_namespaced_pod(name, namespace).status.phase == phase


def test_service_gets_cluster_ip_and_endpoints(core, namespace, kwok_nodes):
    body = pod("web")
    body["metadata"]["labels"] = {"app": "web"}
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    core.create_namespaced_pod(namespace, body)
    svc = core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}},
    )
    assert svc.spec.cluster_ip.startswith("10.96.")
    wait_for(lambda: running(core, namespace, "web"), what="web Running")
    with client.ApiClient(core.api_client.configuration) as api:
        disc = client.DiscoveryV1Api(api)

        def ready_endpoint():
            for s in disc.list_namespaced_endpoint_slice(
                namespace, label_selector="kubernetes.io/service-name=web"
            ).items:
                for ep in s.endpoints or []:
                    if ep.conditions and ep.conditions.ready:
                        return ep
            return None

        wait_for(ready_endpoint, timeout=60, what="EndpointSlice with a ready endpoint")


def test_stop_returns_once_every_component_has_exited(tmp_path):
    """`LocalCluster.stop()` is synchronous: kwokctl delete only signals the components, and a
    component still exiting would hold its port (and, under pytest, count as a leaked process)."""
    from localcluster.binaries import default_bin_dir
    from localcluster.cluster import LocalCluster
    from phalanx_common.proc import alive, start_time

    require_binaries(default_bin_dir(), "no local cluster")
    local = LocalCluster(work_dir=tmp_path, bin_dir=default_bin_dir()).start()
    components = local._component_processes()
    assert len(components) == 5  # etcd, apiserver, controller-manager, scheduler, kwok
    local.stop()
    assert [pid for pid, st in components if alive(pid) and start_time(pid) == st] == []
    assert not local.running()
