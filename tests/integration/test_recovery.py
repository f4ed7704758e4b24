"""Recovery on the real control plane: node loss → re-placement, hang → restart."""

from __future__ import annotations

from kubernetes import client

from tests.integration.harness import Jobs, pooled, wait_for


def running(jobs, name, attempt, n):
    pods = jobs.pods(name, attempt)
    return len(pods) == n and all(p.status.phase == "Running" for p in pods) and pods


def test_node_loss_restarts_gang_on_other_nodes(api, namespace, operator, pool):
    jobs = Jobs(api, namespace)
    jobs.create(pooled(pool, "survivor", 2))
    pods = wait_for(lambda: running(jobs, "survivor", 0, 2), 60, "gang Running")
    lost = pods[0].spec.node_name
    client.CoreV1Api(api).delete_node(lost)  # the machine is gone
    wait_for(lambda: jobs.status("survivor").get("restarts") == 1, 60, "restart after node loss")
    cond = jobs.condition("survivor", "Restarting")
    # Either the operator sees the node gone first, or the pod garbage collector removes its pod first.
    assert cond["reason"] in ("NodeLost", "PodLost"), cond
    if cond["reason"] == "NodeLost":
        assert f"node {lost} is gone or NotReady" in cond["message"]
    # The new gang waits for the lost node's pod to be gone (its hostname is reused): the pod GC
    # deletes it after its 40 s quarantine — ~53 s to new pods on a quiet machine, more under load.
    new = wait_for(lambda: running(jobs, "survivor", 1, 2), 180, "re-placed gang Running")
    assert lost not in {p.spec.node_name for p in new}
    assert lost not in jobs.status("survivor")["placement"]["nodes"]
    jobs.wait_phase("survivor", "Running")


def test_hang_without_progress_restarts(api, namespace, operator, pool):
    jobs = Jobs(api, namespace)
    # kwok pods never report step progress: with a 3 s hang timeout that is a hang.
    jobs.create(pooled(pool, "stuck", 1, failurePolicy={"hangTimeoutSeconds": 3, "backoffSeconds": 0, "maxRestarts": 1}))
    wait_for(lambda: running(jobs, "stuck", 0, 1), 60, "Running")
    wait_for(lambda: jobs.status("stuck").get("restarts") == 1, 60, "hang restart")
    # The Event records the restart's cause for good; the Restarting condition is reset to
    # "Running" as soon as the new gang runs (backoff 0: possibly before this line reads it).
    restarts = wait_for(lambda: [e for e in jobs.events("stuck") if e.reason == "Restarting"], 30, "Restarting event")
    assert "Hang" in restarts[0].message and "no step progress for" in restarts[0].message, restarts[0].message
    cond = jobs.condition("stuck", "Restarting")
    assert cond["reason"] == "Hang" and "no step progress for" in cond["message"] or cond["reason"] == "Running"
    wait_for(lambda: running(jobs, "stuck", 1, 1), 60, "new gang Running")
    status = jobs.wait_phase("stuck", "Failed", 60)
    assert jobs.condition("stuck", "Failed")["reason"] == "MaxRestartsExceeded"
    assert status["restarts"] == 1


def test_elastic_gang_shrinks_then_grows_back(cluster, api, namespace, operator, pool):
    import json

    from localcluster import finish_pod

    jobs = Jobs(api, namespace)
    jobs.create(pooled(pool, "filler", 13))
    filler = wait_for(lambda: running(jobs, "filler", 0, 13), 90, "filler Running")
    # 3 nodes free; the job wants 4 but may run on 2..4 (96 sequences fit 16, 24 or 32 ranks).
    jobs.create(pooled(pool, "stretchy", 4, training={"globalBatchSize": 96},
                       elastic={"minNodes": 2, "maxNodes": 4, "replaceTimeoutSeconds": 2}))
    try:
        small = wait_for(lambda: running(jobs, "stretchy", 1, 3), 90, "shrunk gang of 3 Running")
    except AssertionError:
        raise AssertionError(f"status: {jobs.status('stretchy')}") from None
    status = jobs.wait_phase("stretchy", "Running")
    assert status["activeNodes"] == 3 and status["nodes"] == "3/3" and status["restarts"] == 0
    cm = jobs.core.read_namespaced_config_map("stretchy-config", namespace)
    assert json.loads(cm.data["config.json"])["spec"]["nodes"] == 3
    assert {e.name: e.value for e in small[0].spec.containers[0].env}["NNODES"] == "3"
    for p in filler:
        finish_pod(cluster.kubeconfig, namespace, p.metadata.name, 0)
    wait_for(lambda: running(jobs, "stretchy", 2, 4), 90, "grown gang of 4 Running")
    status = jobs.wait_phase("stretchy", "Running")
    assert status["activeNodes"] == 4 and status["restarts"] == 0
    cm = jobs.core.read_namespaced_config_map("stretchy-config", namespace)
    assert json.loads(cm.data["config.json"])["spec"]["nodes"] == 4
