"""The operator against a real API server, scheduler, garbage collector and kwok nodes."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from kubernetes.client.rest import ApiException

from localcluster import finish_pod
from tests.conftest import example_jobs
from tests.integration.harness import Jobs, job_manifest, wait_for


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def running_pods(jobs, name, attempt=0):
    pods = jobs.pods(name, attempt)
    return pods if pods and all(p.status.phase == "Running" for p in pods) else None


# ------------------------------------------------------------------ the CRD in the API server


def test_crd_short_name_and_printer_columns(cluster, jobs):
    jobs.create(job_manifest("cols", nodes=1, procs=1, gpus=1, suspend=True))
    out = cluster.kubectl("get", "tj", "-n", jobs.ns).stdout
    header = out.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "NODES", "ROLES", "STEP", "RESTARTS", "AGE"]
    assert "cols" in out


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"nodes": 2, "procsPerNode": 4, "parallelism": {"data": 3}}, "nodes × procsPerNode must equal parallelism.data × tensor × pipeline"),
        ({"parallelism": {"zero": 4}}, "should be less than or equal to 3"),
        ({"parallelism": {"pipeline": 2, "microbatches": 1}}, "pipeline microbatches must be >="),
        ({"parallelism": {"pipelineSchedule": "Looping"}}, "Unsupported value: \"Looping\""),
        ({"model": {"preset": "debug", "entrypoint": "a:b"}}, "set exactly one of model.preset"),
        ({"nodes": 0}, "should be greater than or equal to 1"),
    ],
)
def test_api_server_rejects_invalid_manifests(jobs, patch, message):
    manifest = job_manifest("bad")
    manifest["spec"].update(patch)
    with pytest.raises(ApiException) as err:
        jobs.create(manifest)
    assert err.value.status == 422
    assert message in json.loads(err.value.body)["message"]
    assert not jobs.pods("bad")


def test_kubectl_strict_rejects_unknown_field(cluster, jobs, tmp_path):
    manifest = job_manifest("typo")
    manifest["spec"]["procPerNode"] = 4
    manifest["metadata"]["namespace"] = jobs.ns
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(manifest))
    res = cluster.kubectl("apply", "--validate=strict", "-f", str(path), check=False)
    assert res.returncode != 0 and 'unknown field "spec.procPerNode"' in res.stderr


def test_immutable_fields_refused_while_running_allowed_when_suspended(jobs):
    jobs.create(job_manifest("immut", nodes=1, procs=1, gpus=1))
    with pytest.raises(ApiException) as err:
        jobs.patch("immut", {"spec": {"nodes": 2, "training": {"globalBatchSize": 2}}})
    assert err.value.status == 422 and "suspend it first" in json.loads(err.value.body)["message"]
    jobs.patch("immut", {"spec": {"failurePolicy": {"maxRestarts": 7}}})  # mutable
    jobs.patch("immut", {"spec": {"suspend": True}})
    jobs.patch("immut", {"spec": {"image": "phalanx/runtime:v2"}})
    assert jobs.get("immut")["spec"]["image"] == "phalanx/runtime:v2"


# ------------------------------------------------------------------ jobs become pods


@pytest.mark.parametrize("path", example_jobs(), ids=lambda p: p.name)
def test_apply_each_example_creates_children(cluster, jobs, path):
    obj = yaml.safe_load(path.read_text())
    spec = obj["spec"]
    if spec.get("scheduling", {}).get("priorityClassName"):
        ensure_priority_class(jobs, spec["scheduling"]["priorityClassName"])
    cluster.kubectl("apply", "-n", jobs.ns, "-f", str(path))
    name = obj["metadata"]["name"]
    gang = spec["nodes"] + sum(r.get("replicas", 1) for r in spec.get("roles", []))  # workers and role pods
    pods = wait_for(lambda: len(p := jobs.pods(name)) == gang and p, 60, f"{gang} pods")
    svc = jobs.core.read_namespaced_service(name, jobs.ns)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    cm = jobs.core.read_namespaced_config_map(f"{name}-config", jobs.ns)
    assert yaml.safe_load(cm.data["config.json"])["spec"]["nodes"] == spec["nodes"]
    uid = jobs.get(name)["metadata"]["uid"]
    for pod in pods:
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.uid, owner.controller) == ("TrainingJob", uid, True)
        if pod.metadata.labels.get("phalanx.dev/role", "worker") != "worker":
            continue  # a role pod: not a rank of the workers' world
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["NNODES"] == str(spec["nodes"]) and env["MASTER_ADDR"] == f"{name}-node-0.{name}"
        assert env["NODE_RANK"] == pod.metadata.labels["phalanx.dev/node-rank"]
        gpus = spec.get("resources", {}).get("gpus", 0)
        if gpus:
            assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == str(gpus)


def ensure_priority_class(jobs, name):
    from kubernetes import client

    try:
        client.SchedulingV1Api(jobs.core.api_client).create_priority_class({"metadata": {"name": name}, "value": 1000})
    except ApiException as exc:
        if exc.status != 409:
            raise


def test_refused_creation_is_reported_then_recovers(jobs):
    prio = f"prio-{jobs.ns}"  # cluster-scoped: unique per run
    jobs.create(job_manifest("noprio", nodes=1, procs=1, gpus=1, scheduling={"priorityClassName": prio}))
    cond = wait_for(lambda: (c := jobs.condition("noprio", "Created")) and c["reason"] == "CreateRefused" and c, 30, "CreateRefused")
    assert f"no PriorityClass with name {prio} was found" in cond["message"]
    wait_for(lambda: any(e.reason == "CreateRefused" for e in jobs.events("noprio")), 30, "Warning event")
    ensure_priority_class(jobs, prio)
    try:
        wait_for(lambda: running_pods(jobs, "noprio"), 60, "pods Running once the PriorityClass exists")
        # created pinned, the pods may run before the pass that sees them all writes Created=True
        wait_for(lambda: jobs.condition("noprio", "Created")["status"] == "True", 30, "Created=True")
    finally:
        from kubernetes import client

        client.SchedulingV1Api(jobs.core.api_client).delete_priority_class(prio)


def test_scheduler_binds_kwok_runs_job_succeeds(cluster, jobs):
    jobs.create(job_manifest("ok", nodes=2))
    pods = wait_for(lambda: running_pods(jobs, "ok"), 90, "pods Running")
    assert all(p.spec.node_name for p in pods)
    assert not any(p.spec.scheduling_gates for p in pods)
    status = jobs.wait_phase("ok", "Running")
    assert status["nodes"] == "2/2" and status["startTime"]
    for pod in pods:
        finish_pod(cluster.kubeconfig, jobs.ns, pod.metadata.name, 0)
    status = jobs.wait_phase("ok", "Succeeded", 60)
    assert status["completionTime"]
    wait_for(lambda: {"Created", "Running", "Succeeded"} <= {e.reason for e in jobs.events("ok")}, 30, "events")


def test_pod_failure_restarts_gang_then_permanent_failure(cluster, jobs):
    jobs.create(job_manifest("flaky", nodes=2, failurePolicy={"backoffSeconds": 1, "maxRestarts": 2}))
    pods = wait_for(lambda: running_pods(jobs, "flaky"), 90, "pods Running")
    finish_pod(cluster.kubeconfig, jobs.ns, pods[1].metadata.name, 137)
    wait_for(lambda: jobs.status("flaky").get("restarts") == 1, 60, "restart counted")
    cond = jobs.condition("flaky", "Restarting")
    assert "exited with code 137 (retryable)" in cond["message"]
    new = wait_for(lambda: running_pods(jobs, "flaky", attempt=1), 90, "attempt-1 pods Running")
    assert {p.metadata.labels["phalanx.dev/restart-attempt"] for p in new} == {"1"}
    wait_for(lambda: not jobs.pods("flaky", attempt=0), 60, "old gang gone")
    jobs.wait_phase("flaky", "Running")
    finish_pod(cluster.kubeconfig, jobs.ns, new[0].metadata.name, 2)
    status = jobs.wait_phase("flaky", "Failed", 60)
    failed = jobs.condition("flaky", "Failed")
    assert failed["reason"] == "PermanentFailure" and "exited with code 2 (permanent)" in failed["message"]
    assert status["restarts"] == 1
    wait_for(lambda: all(p.status.phase != "Running" or p.metadata.deletion_timestamp for p in jobs.pods("flaky")), 60, "survivors stopped")


def test_max_restarts_exceeded(cluster, jobs):
    jobs.create(job_manifest("doomed", nodes=1, failurePolicy={"backoffSeconds": 0, "maxRestarts": 1}))
    for attempt in (0, 1):
        pods = wait_for(lambda a=attempt: running_pods(jobs, "doomed", a), 90, f"attempt {attempt} Running")
        finish_pod(cluster.kubeconfig, jobs.ns, pods[0].metadata.name, 143)
    jobs.wait_phase("doomed", "Failed", 60)
    failed = jobs.condition("doomed", "Failed")
    assert failed["reason"] == "MaxRestartsExceeded"
    assert failed["message"].startswith("restarted 1 times (maxRestarts 1); last failure:")


def test_invalid_semantics_fail_with_condition_and_event_nothing_created(jobs):
    # Schema-valid, but the debug model has 4 heads: tensor 8 cannot divide them.
    jobs.create(job_manifest("heads", nodes=1, procs=8, parallelism={"tensor": 8}, training={"globalBatchSize": 1}))
    status = jobs.wait_phase("heads", "Failed", 30)
    valid = jobs.condition("heads", "Valid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.parallelism.tensor: tensor 8 does not divide the model's nHeads 4" in valid["message"]
    assert status["observedGeneration"] == 1
    wait_for(lambda: any(e.reason == "InvalidSpec" and e.type == "Warning" for e in jobs.events("heads")), 30, "event")
    time.sleep(1)
    assert not jobs.pods("heads")
    with pytest.raises(ApiException):
        jobs.core.read_namespaced_service("heads", jobs.ns)


def test_suspend_and_resume(jobs):
    jobs.create(job_manifest("pause", nodes=2))
    wait_for(lambda: running_pods(jobs, "pause"), 90, "Running")
    jobs.patch("pause", {"spec": {"suspend": True}})
    jobs.wait_phase("pause", "Suspended", 30)
    wait_for(lambda: not jobs.pods("pause"), 60, "pods deleted")
    jobs.patch("pause", {"spec": {"suspend": False}})
    pods = wait_for(lambda: running_pods(jobs, "pause", attempt=1), 90, "new gang Running")
    assert len(pods) == 2
    status = jobs.wait_phase("pause", "Running")
    assert status["restarts"] == 0 and status["restartAttempt"] == 1


def test_delete_job_garbage_collects_children(jobs):
    jobs.create(job_manifest("gone", nodes=2))
    wait_for(lambda: len(jobs.pods("gone")) == 2, 60, "pods")
    jobs.delete("gone")
    wait_for(lambda: not jobs.pods("gone"), 90, "pods collected")

    def no_children():
        try:
            jobs.core.read_namespaced_service("gone", jobs.ns)
            return False
        except ApiException as exc:
            return exc.status == 404

    wait_for(no_children, 60, "service collected")


def test_kill_operator_mid_creation_no_duplicates_no_orphans(cluster, api, namespace, operator):
    jobs = Jobs(api, namespace)
    nodes = 40
    # One GPU each on 4 nodes of 8 GPUs: most pods stay Pending, which is fine here.
    jobs.create(job_manifest("crash", nodes=nodes, procs=1, gpus=1, training={"globalBatchSize": nodes}))
    wait_for(lambda: len(jobs.pods("crash")) >= 1, 30, "first pods", interval=0.01)
    operator.kill()
    seen = len(jobs.pods("crash"))
    operator.start()
    pods = wait_for(lambda: len(p := jobs.pods("crash")) == nodes and p, 60, f"{nodes} pods")
    time.sleep(2)
    pods = jobs.pods("crash")
    names = [p.metadata.name for p in pods]
    assert len(names) == len(set(names)) == nodes
    assert sorted(int(p.metadata.labels["phalanx.dev/node-rank"]) for p in pods) == list(range(nodes))
    uid = jobs.get("crash")["metadata"]["uid"]
    assert all(p.metadata.owner_references[0].uid == uid for p in pods)
    assert jobs.get("crash")["status"]["restartAttempt"] == 0
    print(f"killed the operator with {seen}/{nodes} pods created; converged to {nodes}, no duplicates")


def test_metrics_endpoint(operator):
    text = operator.metrics()
    for name in ("phalanx_reconciles_total", "phalanx_reconcile_duration_seconds", "phalanx_jobs", "phalanx_pods_created_total", "phalanx_api_requests_total"):
        assert name in text
