"""The workload backend with kube-scheduler's own gang and topology-aware workload scheduling.

Mirrors tests/integration/test_gang.py, on a control plane started with the alpha feature gates
GenericWorkload, GangScheduling and TopologyAwareWorkloadScheduling and
``--runtime-config=scheduling.k8s.io/v1alpha2=true`` (``LocalCluster(features=["workload"])``;
the default test cluster stays without them). The operator renders a Workload and a PodGroup of
the served version and ungated pods with ``spec.schedulingGroup``; kube-scheduler places the whole
group or nothing, and the job's ``Schedulable`` condition is the PodGroup's ``PodGroupScheduled``.

Which cluster, first match wins: ``KUBECONFIG_PHALANX`` (disposable, as in conftest.py) when that
cluster serves scheduling.k8s.io/v1alpha2 podgroups; a ``make cluster-up FEATURES=workload`` cluster; else a
fresh feature-gated ``LocalCluster`` in a temp dir (skipped without the binaries, failed with
``PHALANX_REQUIRE_CLUSTER``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from localcluster import LocalCluster, default_bin_dir, finish_pod
from localcluster.nodes import api_client
from tests.integration.conftest import (
    ClusterHandle,
    _kubectl_for,
    foreign_cluster_refusal,
    require_binaries,
    started_cluster,
)
from tests.integration.harness import Jobs, OperatorProcess, install_crd, pooled, wait_for

PG_API = ("scheduling.k8s.io", "v1alpha2")
BLOCK, SUBBLOCK, RACK = ("phalanx.dev/topology-block", "phalanx.dev/topology-subblock", "phalanx.dev/topology-rack")


def serves_workload_api(kubeconfig: Path) -> bool:
    try:
        with api_client(kubeconfig) as api:
            client.CustomObjectsApi(api).list_cluster_custom_object(*PG_API, "podgroups", limit=1)
        return True
    except ApiException:
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A cluster that serves the Workload API (overrides the session cluster for this module)."""
    bin_dir = default_bin_dir()
    kc = os.environ.get("KUBECONFIG_PHALANX")
    if kc:
        refusal = foreign_cluster_refusal(kc, os.environ.get("PHALANX_CLUSTER_DISPOSABLE"))
        if refusal:
            pytest.fail(refusal, pytrace=False)
        if serves_workload_api(Path(kc)):
            yield ClusterHandle(Path(kc), _kubectl_for(bin_dir), "env:KUBECONFIG_PHALANX")
            return
    attached = LocalCluster.attach()
    if attached is not None and attached.running() and "workload" in attached.features:
        yield ClusterHandle(attached.kubeconfig, _kubectl_for(attached.bin_dir), "cluster-up")
        return
    require_binaries(bin_dir, "no cluster serving scheduling.k8s.io/v1alpha2")
    with started_cluster(tmp_path_factory.mktemp("workload-cluster"), "local-workload", features=("workload",),
                         topology="small-4") as handle:
        assert serves_workload_api(handle.kubeconfig), "feature-gated cluster does not serve scheduling.k8s.io/v1alpha2"
        yield handle


@pytest.fixture(scope="module")
def operator(cluster, tmp_path_factory):
    install_crd(cluster)
    levels = [{"name": "block", "label": BLOCK}, {"name": "subblock", "label": SUBBLOCK},
              {"name": "rack", "label": RACK}, {"name": "hostname", "label": "kubernetes.io/hostname"}]
    op = OperatorProcess(cluster.kubeconfig, tmp_path_factory.mktemp("workload-operator"),
                         config={"topology": {"levels": levels}}).start()
    yield op
    op.stop()


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def wl(pool, name, nodes, **scheduling):
    return pooled(pool, name, nodes, scheduling={"backend": "workload", **scheduling})


def bound(jobs, name):
    return [p for p in jobs.pods(name, 0) if p.spec.node_name]


def all_running(jobs, name, n):
    pods = jobs.pods(name, 0)
    return len(pods) == n and all(p.status.phase == "Running" for p in pods) and pods


def schedulable(jobs, name):
    return jobs.condition(name, "Schedulable") or {}


def pod_group(jobs, name):
    return client.CustomObjectsApi(jobs.core.api_client).get_namespaced_custom_object(*PG_API, jobs.ns, "podgroups", f"{name}-workers")


def never_bound(jobs, name, seconds):
    """No pod of ``name`` gets a node during ``seconds`` (all-or-nothing: no partial hold)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not bound(jobs, name), f"{name}: pods bound although the gang cannot fit"
        time.sleep(0.5)


def occupy(jobs, pool, nodes):
    """Fill ``nodes`` (8 GPUs each) with pods bound directly, outside any gang."""
    for n in nodes:
        jobs.core.create_namespaced_pod(jobs.ns, {
            "metadata": {"name": f"fill-{n}", "labels": {"app": "filler"}},
            "spec": {"nodeName": n, "containers": [{"name": "c", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                     "tolerations": [{"operator": "Exists"}]}})
    wait_for(lambda: all(p.status.phase == "Running" for p in jobs.core.list_namespaced_pod(jobs.ns, label_selector="app=filler").items),
             60, "fillers Running")


def test_gang_placed_by_kube_scheduler_with_podgroup_status(jobs, pool):
    jobs.create(wl(pool, "placed", 4))
    pods = wait_for(lambda: all_running(jobs, "placed", 4), 90, "gang Running")
    for p in pods:
        assert not p.spec.scheduling_gates and not p.spec.affinity  # no Phalanx gate, no pin: the scheduler placed it
        assert p.spec.scheduling_group.pod_group_name == "placed-workers"
    pg = pod_group(jobs, "placed")
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert pg["spec"]["podGroupTemplateRef"] == {"workload": {"workloadName": "placed", "podGroupTemplateName": "workers"}}
    assert any(c["type"] == "PodGroupScheduled" and c["status"] == "True" for c in pg["status"]["conditions"])
    cond = wait_for(lambda: (c := schedulable(jobs, "placed")).get("reason") == "Scheduled" and c, 30, "Schedulable=Scheduled")
    assert cond["status"] == "True" and "placed-workers" in cond["message"]


def test_two_competing_gangs_all_or_nothing(cluster, jobs, pool):
    jobs.create(wl(pool, "left", 10))
    jobs.create(wl(pool, "right", 10))

    def one_whole_gang():
        counts = {name: len(bound(jobs, name)) for name in ("left", "right")}
        return sorted(counts.values()) == [0, 10] and counts

    counts = wait_for(one_whole_gang, 120, "exactly one whole gang bound, the other none")
    winner = max(counts, key=counts.get)
    loser = "right" if winner == "left" else "left"
    pods = wait_for(lambda: all_running(jobs, winner, 10), 60, "winner Running")
    cond = wait_for(lambda: (c := schedulable(jobs, loser)).get("status") == "False" and c, 60, "loser Schedulable=False")
    assert cond["reason"] == "Unschedulable" and f"{loser}-workers" in cond["message"], cond
    never_bound(jobs, loser, 5)
    assert len(bound(jobs, winner)) == 10
    for p in pods:
        finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 0)
    jobs.wait_phase(winner, "Succeeded", 60)
    wait_for(lambda: all_running(jobs, loser, 10), 120, "the other gang runs next")
    wait_for(lambda: schedulable(jobs, loser).get("reason") == "Scheduled", 30, "loser Schedulable=Scheduled")


def test_gang_that_cannot_fit_binds_nothing(jobs, pool):
    # 6 nodes under one subblock: each subblock of the pool has 4 (16 free nodes in all)
    jobs.create(wl(pool, "toobig", 6, topology={"required": "subblock"}))
    cond = wait_for(lambda: (c := schedulable(jobs, "toobig")).get("status") == "False" and c, 60, "Schedulable=False")
    assert cond["reason"] == "Unschedulable" and "placements" in cond["message"], cond
    pods = jobs.pods("toobig", 0)
    assert len(pods) == 6 and all(not p.spec.scheduling_gates for p in pods)  # held by kube-scheduler, not by us
    never_bound(jobs, "toobig", 8)
    assert jobs.status("toobig")["phase"] == "Scheduling"
    pg = pod_group(jobs, "toobig")
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": SUBBLOCK}]}
    # more nodes than the pool has, no topology: the same
    jobs.create(wl(pool, "huge", 17))
    wait_for(lambda: schedulable(jobs, "huge").get("reason") == "Unschedulable", 60, "huge Unschedulable")
    never_bound(jobs, "huge", 5)


def test_required_topology_is_honoured(jobs, pool):
    """Busy nodes leave block 0 with 4 free nodes (one per rack) and block 1 with 6 (racks
    4, 5: one each; racks 6, 7: both): 10 free in all, so only the constraint keeps a gang together."""
    labels = pool["labels"]
    racks = sorted({labels[n][RACK] for n in pool["nodes"]})
    busy = [sorted(n for n in pool["nodes"] if labels[n][RACK] == r)[0] for r in racks[:6]]
    occupy(jobs, pool, busy)
    jobs.create(wl(pool, "inblock", 6, topology={"required": "block"}))
    pods = wait_for(lambda: all_running(jobs, "inblock", 6), 90, "block gang Running")
    blocks = {labels[p.spec.node_name][BLOCK] for p in pods}
    assert blocks == {labels[n][BLOCK] for n in pool["nodes"] if labels[n][RACK] == racks[7]}, blocks
    # the 4 nodes left free (block 0, one per rack): a rack gang of 2 cannot fit there
    jobs.create(wl(pool, "inrack", 2, topology={"required": "rack"}))
    wait_for(lambda: schedulable(jobs, "inrack").get("reason") == "Unschedulable", 60, "rack gang Unschedulable")
    never_bound(jobs, "inrack", 5)
    jobs.delete("inblock")  # frees racks 4-7's nodes: now the rack gang lands in one rack
    pods = wait_for(lambda: all_running(jobs, "inrack", 2), 120, "rack gang Running")
    assert len({labels[p.spec.node_name][RACK] for p in pods}) == 1
    assert pod_group(jobs, "inrack")["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
