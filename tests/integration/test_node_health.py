"""Node health on the real control plane: a node with a GPU-error condition, or named by two jobs'
failures, is quarantined (a NodeQuarantine), new gangs avoid it, and it comes back when the
quarantine expires or an admin deletes it."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.harness import GROUP, VERSION, Jobs, OperatorProcess, job_manifest, wait_for

PLURAL = "nodequarantines"
CONDITION = "PhalanxTestGpuError"  # a type only this test's operator treats as unhealthy
POOL_LABEL = "phalanx.dev/test-pool"
NCCL_ERROR = ("Traceback (most recent call last):\n  File \"train.py\", line 9, in step\n"
              "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error")


@pytest.fixture
def health_operator(cluster, crd, operator, namespace, tmp_path):
    """An operator with short quarantines, alone: the session's (default config: an hour) would
    quarantine the same nodes and serve the same jobs."""
    config = {"health": {"unhealthyConditions": [CONDITION], "quarantineSeconds": 6, "resyncSeconds": 1,
                         "evidenceThreshold": 2, "evidenceNamespaces": 1}}  # both jobs live in one namespace
    operator.stop()
    op = OperatorProcess(cluster.kubeconfig, tmp_path, config=config, namespaces=[namespace], name="health")
    try:
        yield op.start()
    finally:
        op.stop()
        operator.start()


def quarantine(api, node):
    try:
        return client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def delete_quarantine(api, node):
    try:
        client.CustomObjectsApi(api).delete_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    except ApiException as exc:
        if exc.status != 404:
            raise


def pinned(pool, name, node, **spec):
    """A one-node job that can only go to ``node``."""
    hostname = pool["labels"][node]["kubernetes.io/hostname"]
    return job_manifest(name, nodes=1, procs=8, gpus=8,
                        tolerations=[{"key": POOL_LABEL, "operator": "Equal", "value": pool["id"], "effect": "NoSchedule"}],
                        nodeSelector={POOL_LABEL: pool["id"], "kubernetes.io/hostname": hostname}, **spec)


def set_condition(api, node, status):
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cond = {"type": CONDITION, "status": status, "reason": "XidError", "message": "Xid 79: GPU has fallen off the bus",
            "lastHeartbeatTime": now, "lastTransitionTime": now}
    client.CoreV1Api(api).patch_node_status(node, {"status": {"conditions": [cond]}})


def fail_pod(api, namespace, name, message):
    """The trainer container terminated with exit 1 and ``message`` (as the kubelet reports it)."""
    core = client.CoreV1Api(api)
    pod = core.read_namespaced_pod(name, namespace)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    statuses = [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0, "started": False,
                 "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message,
                                          "startedAt": now, "finishedAt": now}}} for c in pod.spec.containers]
    core.patch_namespaced_pod_status(name, namespace, {"status": {"phase": "Failed", "containerStatuses": statuses}})


def schedulable_message(jobs, name):
    cond = jobs.condition(name, "Schedulable") or {}
    return cond.get("status") == "False" and cond.get("message")


def running_on(jobs, name):
    pods = jobs.pods(name)
    return len(pods) == 1 and pods[0].status.phase == "Running" and pods[0].spec.node_name


def node_events(api, node, reason):
    events = client.CoreV1Api(api).list_event_for_all_namespaces(field_selector=f"involvedObject.name={node}").items
    return [e for e in events if e.reason == reason]


def test_node_health_condition_quarantines_until_it_expires(api, namespace, health_operator, pool):
    jobs, node = Jobs(api, namespace), pool["nodes"][0]
    set_condition(api, node, "True")
    nq = wait_for(lambda: quarantine(api, node), 30, "a NodeQuarantine for the node")
    assert nq["spec"]["reason"] == "Condition" and "Xid 79" in nq["spec"]["message"], nq
    assert wait_for(lambda: node_events(api, node, "NodeQuarantined"), 20, "the Node's Event")
    assert health_operator.metric("phalanx_node_quarantined", f'node="{node}",reason="Condition"') == 1
    jobs.create(pinned(pool, "after-xid", node))
    message = wait_for(lambda: schedulable_message(jobs, "after-xid"), 30, "Schedulable=False")
    assert "quarantined" in message, message
    set_condition(api, node, "False")  # the device recovered: the quarantine runs out (6 s) and is deleted
    wait_for(lambda: quarantine(api, node) is None, 30, "the quarantine to expire")
    assert wait_for(lambda: running_on(jobs, "after-xid"), 60, "the job on the released node") == node
    assert wait_for(lambda: node_events(api, node, "NodeQuarantineReleased"), 20, "the release Event")


def test_node_health_two_failures_quarantine_and_delete_clears(api, namespace, health_operator, pool):
    jobs, node = Jobs(api, namespace), pool["nodes"][1]
    try:
        for name in ("nccl-a", "nccl-b"):
            jobs.create(pinned(pool, name, node, failurePolicy={"maxRestarts": 0, "backoffSeconds": 0}))
            wait_for(lambda name=name: running_on(jobs, name), 60, f"{name} Running")
            fail_pod(api, namespace, jobs.pods(name)[0].metadata.name, NCCL_ERROR)
            failure = wait_for(lambda name=name: jobs.status(name).get("lastFailure"), 30, f"{name} lastFailure")
            assert failure["category"] == "CommunicationError" and failure["nodeRank"] == 0, failure
        nq = wait_for(lambda: quarantine(api, node), 30, "a NodeQuarantine from job evidence")
        assert nq["spec"]["reason"] == "JobEvidence", nq
        assert {e["job"] for e in nq["spec"]["evidence"]} == {f"{namespace}/nccl-a", f"{namespace}/nccl-b"}
        assert wait_for(lambda: [e for e in jobs.events("nccl-b") if e.reason == "NodeQuarantined"], 20, "the job's Event")
        jobs.create(pinned(pool, "after-nccl", node))
        assert "quarantined" in wait_for(lambda: schedulable_message(jobs, "after-nccl"), 30, "Schedulable=False")
        delete_quarantine(api, node)  # an admin clears it: `kubectl delete nq NODE`
        assert wait_for(lambda: running_on(jobs, "after-nccl"), 60, "the job on the cleared node") == node
        assert quarantine(api, node) is None  # spent evidence does not quarantine it again
    finally:
        delete_quarantine(api, node)
