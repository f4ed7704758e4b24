"""Replacing only the failed node, on the real control plane: a lost or quarantined node of a
running gang has its pod recreated (same name and rank) on a free node of the gang's block while
the other pods stay (their UIDs unchanged) and are asked to restart in place; without a free node
in the block the whole gang is recreated and the status says why.

kwok's kubelets declare no in-place restart feature, so the operator runs with discovery answering
yes (a sitecustomize shim): these tests check the control plane's part, not the kubelet's."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from phalanx.constants import FEATURE_RESTART_ALL_CONTAINERS
from tests.integration.harness import (
    GROUP,
    POOL_LABEL,
    VERSION,
    Jobs,
    OperatorProcess,
    create_pool_nodes,
    delete_nodes,
    job_manifest,
    wait_for,
)

BLOCK = "phalanx.dev/topology-block"
RESTART_REQUEST = "phalanx.dev/restart-request"
SHIM = '''
import phalanx.startup


async def _in_place_on(kube, namespaces):
    return True


phalanx.startup._discover_in_place = _in_place_on
'''


@pytest.fixture
def replace_operator(cluster, crd, operator, namespace, tmp_path, monkeypatch):
    """The operator (in place of the session's), its discovery saying gangs restart in place."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)
    monkeypatch.setenv("PYTHONPATH", f"{shim}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))  # the shim imports the client before main sets it
    operator.stop()
    op = OperatorProcess(cluster.kubeconfig, tmp_path, name="replace")  # cluster-wide: it watches NodeQuarantines
    try:
        yield op.start()
    finally:
        op.stop()
        monkeypatch.undo()
        operator.start()


@pytest.fixture
def make_pool(cluster, api):
    """``make_pool(layout)``: kwok GPU nodes tainted for this test, with private topology domains."""
    core, made = client.CoreV1Api(api), []

    def make(layout):
        pid = uuid.uuid4().hex[:6]
        # the scheduler places a pod with restart rules only on a node whose kubelet declares them
        names = create_pool_nodes(api, cluster.kubeconfig, pid, "r", layout,
                                  {"declaredFeatures": [FEATURE_RESTART_ALL_CONTAINERS]}, timeout=120)
        made.extend(names)
        read = {n: core.read_node(n) for n in names}
        assert all(FEATURE_RESTART_ALL_CONTAINERS in (node.status.declared_features or []) for node in read.values())
        return {"id": pid, "nodes": names, "block": {n: node.metadata.labels[BLOCK] for n, node in read.items()}}

    yield make
    delete_nodes(api, made)


def pool_job(pool, name, nodes, **spec):
    pid = pool["id"]
    return job_manifest(name, nodes=nodes, procs=8, gpus=8,
                        tolerations=[{"key": POOL_LABEL, "operator": "Equal", "value": pid, "effect": "NoSchedule"}],
                        nodeSelector={POOL_LABEL: pid}, scheduling={"topology": {"required": "block"}},
                        failurePolicy={"backoffSeconds": 0, "maxRestarts": 3}, **spec)


def running(jobs, name, n, attempt=0):
    pods = jobs.pods(name, attempt)
    return len(pods) == n and all(p.status.phase == "Running" and p.metadata.deletion_timestamp is None
                                  for p in pods) and pods


def gang_running(jobs, name, n, timeout, attempt=0):
    """The gang's pods once all are Running; on a timeout the error shows the job's status."""
    try:
        return wait_for(lambda: running(jobs, name, n, attempt), timeout, f"{name}: {n} pods Running")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; status: {jobs.status(name)}") from None


def by_rank(pods):
    return {int(p.metadata.labels["phalanx.dev/node-rank"]): p for p in pods}


def replaced(jobs, name, rank, old_uid, n):
    """The gang Running again with the node-rank's pod a new one (the same name)."""
    pods = running(jobs, name, n)
    return pods and by_rank(pods)[rank].metadata.uid != old_uid and by_rank(pods)


def assert_replaced_alone(jobs, name, before, rank, lost, pool, cause):
    """The pod of ``rank`` moved from ``lost`` to a free node of the same block; the others kept
    their pods and were asked to restart in place; the status and an Event say so."""
    n = len(before)
    try:
        after = wait_for(lambda: replaced(jobs, name, rank, before[rank].metadata.uid, n), 90, "the rank's pod replaced")
    except AssertionError as exc:
        pods = {p.metadata.name: (p.spec.node_name, p.status.phase) for p in jobs.pods(name)}
        raise AssertionError(f"{exc}; pods: {pods}; status: {jobs.status(name)}") from None
    new_node = after[rank].spec.node_name
    assert new_node != lost and new_node not in {p.spec.node_name for r, p in before.items() if r != rank}
    assert pool["block"][new_node] == pool["block"][lost]  # the same block
    assert after[rank].metadata.name == before[rank].metadata.name
    for r, pod in after.items():
        if r != rank:
            assert pod.metadata.uid == before[r].metadata.uid, f"node-rank {r} kept its pod"
            assert (pod.metadata.annotations or {}).get(RESTART_REQUEST) == "1", f"node-rank {r} asked to restart"
    status = jobs.status(name)
    assert status["lastRestartMode"] == "ReplaceNode" and status["restartAttempt"] == 0 and status["restarts"] == 1
    assert status["placement"]["nodes"][rank] == new_node
    record = status["nodeReplacement"]
    assert (record["nodeRank"], record["oldNode"], record["newNode"], record["cause"]) == (rank, lost, new_node, cause)
    assert record["domain"].startswith(f"block={pool['block'][lost]}")
    events = [e for e in jobs.events(name) if e.reason == "NodeReplaced"]
    assert events and f"node-rank {rank}: node {lost}" in events[0].message and f"replaced by {new_node}" in events[0].message
    assert f"{n - 1} pods restart in place" in events[0].message
    return after


def test_a_lost_node_of_a_64_node_gang_is_replaced_in_its_block(api, namespace, replace_operator, make_pool):
    pool = make_pool({"block": 1, "subblock": 2, "rack": 3, "node": 11})  # 66 nodes: 2 spare
    jobs = Jobs(api, namespace)
    jobs.create(pool_job(pool, "big", 64))
    before = by_rank(gang_running(jobs, "big", 64, 120))
    rank = 17
    lost = before[rank].spec.node_name
    client.CoreV1Api(api).delete_node(lost)  # the machine is gone
    assert_replaced_alone(jobs, "big", before, rank, lost, pool, "NodeLost")
    jobs.wait_phase("big", "Running", 30)


def test_without_a_free_node_in_the_block_the_gang_is_recreated(api, namespace, replace_operator, make_pool):
    pool = make_pool({"block": 2, "subblock": 1, "rack": 1, "node": 2})  # a 2-node gang fills a block
    jobs = Jobs(api, namespace)
    jobs.create(pool_job(pool, "full", 2))
    before = by_rank(gang_running(jobs, "full", 2, 60))
    lost = before[1].spec.node_name
    client.CoreV1Api(api).delete_node(lost)
    again = gang_running(jobs, "full", 2, 120, attempt=1)
    assert {pool["block"][p.spec.node_name] for p in again} != {pool["block"][lost]}
    status = jobs.status("full")
    assert status["lastRestartMode"] == "Recreate" and status["restartAttempt"] == 1, status
    assert "nodeReplacement" in status, (status, [(e.reason, e.message) for e in jobs.events("full")])
    record = status["nodeReplacement"]
    assert record["oldNode"] == lost and record.get("newNode") is None
    assert f"no free node in block={pool['block'][lost]}" in record["message"], record["message"]
    events = [e for e in jobs.events("full") if e.reason == "NodeNotReplaced"]
    assert events and "not replaced alone: no free node" in events[0].message


def test_a_quarantined_node_of_a_running_gang_is_replaced(api, namespace, replace_operator, make_pool):
    pool = make_pool({"block": 1, "subblock": 1, "rack": 1, "node": 3})
    jobs = Jobs(api, namespace)
    jobs.create(pool_job(pool, "sick", 2))
    before = by_rank(gang_running(jobs, "sick", 2, 60))
    node = before[1].spec.node_name
    custom = client.CustomObjectsApi(api)
    expires = (datetime.now(UTC) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    custom.create_cluster_custom_object(GROUP, VERSION, "nodequarantines", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeQuarantine", "metadata": {"name": node},
        "spec": {"node": node, "reason": "Manual", "message": "GPU errors", "expiresAt": expires}})
    try:
        assert_replaced_alone(jobs, "sick", before, 1, node, pool, "NodeQuarantined")
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodequarantines", node)
