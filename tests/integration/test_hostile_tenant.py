"""A hostile tenant against the real API server and a running operator: no object stops the
operator serving the others (a body too deep for Python's JSON decoder, a sweep as costly to
check as the limits allow, an object planted under a child's name), SIGTERM always ends it, and
the leader keeps its Lease while it works. Each test runs its own operator process; the
session's cluster-wide operator is paused meanwhile."""

from __future__ import annotations

import copy
import json
import signal
import time
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx import safejson
from phalanx.api.crd import build_crd
from tests.integration.harness import Jobs, OperatorProcess, install_crd, job_manifest, wait_for
from tests.integration.test_operator_ha import _service_account, alone, drain  # noqa: F401 - fixtures

GROUP, VERSION = "phalanx.dev", "v1alpha1"


def _nested(depth: int) -> str:
    return '{"a":' * depth + "{}" + "}" * depth


def _poison_json(name: str, namespace: str, depth: int) -> str:
    """A TrainingJob whose emptyDir holds an object nested ``depth`` levels: built as text (the
    Python client would need json.dumps, which recurses once per level)."""
    head = json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": {**job_manifest(name, nodes=1, procs=1, gpus=1)["spec"],
                                "volumes": [{"name": "poison", "emptyDir": "HOLE"}]}})
    return head.replace('"HOLE"', _nested(depth))


@pytest.fixture
def permissive_crd(cluster):
    """The TrainingJob CRD as an older one could have stored objects: a free-form spec. Whatever
    the schema refuses today can be in etcd from before; the operator must survive reading it."""
    crd = build_crd()
    loose = copy.deepcopy(crd)
    loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"].pop("x-kubernetes-validations", None)
    path = cluster.kubeconfig.parent / f"loose-crd-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(loose))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    try:
        yield
    finally:
        install_crd(cluster)


def _second_namespace(api):
    core = client.CoreV1Api(api)
    name = f"it-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"phalanx.dev/test": "true"}}})
    wait_for(lambda: _service_account(core, name), 60, "default service account")
    return name


def _running(jobs: Jobs, name: str) -> bool:
    pods = jobs.pods(name)
    return bool(pods) and all(p.status.phase == "Running" for p in pods) and jobs.status(name).get("phase") == "Running"


def test_objects_too_deep_to_decode_are_isolated(cluster, crd, api, namespace, tmp_path, alone, permissive_crd):  # noqa: F811
    """The API server stores JSON nested up to 10,000 levels; Python's decoder stops near 1,000.
    Such a job is refused by name, the operator stays healthy, and a job in another namespace
    runs — also after a restart, whose first list holds the poison."""
    op = OperatorProcess(cluster.kubeconfig, tmp_path, name="poisoned").start()
    bystanders = Jobs(api, _second_namespace(api))
    try:
        for depth in (1000, 9900):
            path = tmp_path / f"poison-{depth}.json"
            path.write_text(_poison_json(f"poison-{depth}", namespace, depth))
            cluster.kubectl("create", "-f", str(path))
        poisoned = Jobs(api, namespace)
        for depth in (1000, 9900):
            status = wait_for(lambda d=depth: (s := _status_of(api, namespace, f"poison-{d}")).get("phase") == "Failed" and s,
                              30, f"poison-{depth} refused")
            assert "nested deeper than" in status.get("message", "") and "spec.volumes[0].emptyDir" in status["message"]
        bystanders.create(job_manifest("bystander", nodes=1, procs=1, gpus=1))
        wait_for(lambda: _running(bystanders, "bystander"), 30, "bystander Running")
        assert op.healthy()
        assert op.metric("phalanx_undecodable_objects_total", 'kind="TrainingJob",problem="too_deep"') >= 2
        assert not poisoned.pods("poison-1000") and not poisoned.pods("poison-9900")

        op.stop()  # the next start lists the poison before anything else
        op.start()
        bystanders.create(job_manifest("bystander-2", nodes=1, procs=1, gpus=1))
        wait_for(lambda: _running(bystanders, "bystander-2"), 30, "bystander-2 Running after a restart")
        assert op.healthy()
    finally:
        _delete_poison(cluster, namespace)  # kubectl: the Python client cannot decode them
        drain(api, bystanders.ns)
        op.stop()
        client.CoreV1Api(api).delete_namespace(bystanders.ns)


def _delete_poison(cluster, namespace: str) -> None:
    """Delete while the operator runs (it removes kopf's finalizer); what is left loses it."""
    names = [f"trainingjob/poison-{d}" for d in (1000, 9900)]
    done = cluster.kubectl("delete", *names, "-n", namespace, "--ignore-not-found", "--timeout=30s", check=False)
    if done.returncode != 0:
        for name in names:
            cluster.kubectl("patch", name, "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)


def _status_of(api, namespace: str, name: str) -> dict:
    """The status alone (the object itself is too deep for the Python client to decode)."""
    raw = client.CustomObjectsApi(api).get_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "trainingjobs", name, _preload_content=False).data
    return safejson.loads(raw).get("status") or {}


def _max_sweep(name: str) -> dict:
    """A valid sweep as costly to check as the default limits allow: 64 trials of a template of
    ~31 KiB of configMap volumes (the costliest shape measured per byte)."""
    spec = job_manifest(name, nodes=1, procs=1, gpus=1)["spec"]
    spec["volumes"] = [{"name": f"v{i}", "configMap": {"name": f"cm{i}", "items": [
        {"key": f"k{j}", "path": f"p{j}"} for j in range(16)]}} for i in range(56)]
    spec["volumeMounts"] = [{"name": f"v{i}", "mountPath": f"/data/{i}"} for i in range(56)]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingSweep", "metadata": {"name": name},
            "spec": {"template": {"spec": spec},
                     "parameters": [{"path": "training.lr", "values": [1e-5 * (i + 1) for i in range(64)]}],
                     "objective": {"metric": "finalLoss", "goal": "minimize"}, "maxParallel": 1}}


def _lease(api, namespace: str, name: str):
    return client.CoordinationV1Api(api).read_namespaced_lease(name, namespace).spec


def test_the_leader_keeps_its_lease_while_a_maximal_sweep_is_checked(cluster, crd, api, namespace, tmp_path, alone):  # noqa: F811
    lease = f"hostile-{uuid.uuid4().hex[:6]}"
    # the chart's timings (lease 15 s, renew deadline 10 s, a round every 2 s)
    op = OperatorProcess(cluster.kubeconfig, tmp_path, namespaces=[namespace], name="leader", extra_args=[
        "--leader-elect", f"--leader-elect-lease-name={lease}", f"--leader-elect-namespace={namespace}"])
    custom = client.CustomObjectsApi(api)
    try:
        op.start()
        wait_for(lambda: "acquired leadership" in op.log.read_text(), 30, "leadership")
        holder = _lease(api, namespace, lease).holder_identity
        for i in range(3):  # several at once: their checks queue off the loop
            sweep = _max_sweep(f"max-{i}")
            sweep["metadata"]["namespace"] = namespace
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingsweeps", sweep)
        renewals, deadline = set(), time.monotonic() + 24
        while time.monotonic() < deadline:
            spec = _lease(api, namespace, lease)
            assert spec.holder_identity == holder, "the leader lost its lease"
            renewals.add(spec.renew_time)
            assert op.proc.poll() is None, f"the operator exited:\n{op.tail()}"
            time.sleep(0.5)
        assert len(renewals) >= 8  # renewed about every retry period (2 s) throughout
        for i in range(3):
            wait_for(lambda n=f"max-{i}": (custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "trainingsweeps", n).get("status") or {}).get("phase"), 60, f"max-{i} status")
        assert "could not renew" not in op.log.read_text()
    finally:
        for i in range(3):
            try:
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "trainingsweeps", f"max-{i}")
            except ApiException:
                pass
        drain(api, namespace)
        op.stop()


def test_a_sweep_over_the_limits_is_refused_at_once_and_a_bystander_runs(cluster, crd, api, namespace, tmp_path, alone):  # noqa: F811
    op = OperatorProcess(cluster.kubeconfig, tmp_path, name="limits").start()
    custom = client.CustomObjectsApi(api)
    bystanders = Jobs(api, _second_namespace(api))
    try:
        big = _max_sweep("too-big")
        big["spec"]["parameters"][0]["values"] = [1e-5 * (i + 1) for i in range(256)]  # 256 trials × 31 KiB
        big["metadata"]["namespace"] = namespace
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingsweeps", big)
        bystanders.create(job_manifest("bystander", nodes=1, procs=1, gpus=1))
        status = wait_for(lambda: (s := custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "trainingsweeps", "too-big").get("status") or {}).get("phase") == "Failed" and s,
            20, "the sweep refused")
        assert "maxSweepCheckBytes" in json.dumps(status)
        wait_for(lambda: _running(bystanders, "bystander"), 30, "bystander Running")
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "trainingsweeps", "too-big")
        drain(api, bystanders.ns)
        op.stop()
        client.CoreV1Api(api).delete_namespace(bystanders.ns)


def test_sigterm_ends_a_busy_operator_within_its_grace_period(cluster, crd, api, namespace, tmp_path, alone):  # noqa: F811
    op = OperatorProcess(cluster.kubeconfig, tmp_path, name="sigterm", extra_args=["--shutdown-grace=5"]).start()
    custom = client.CustomObjectsApi(api)
    try:
        for i in range(3):
            sweep = _max_sweep(f"busy-{i}")
            sweep["metadata"]["namespace"] = namespace
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingsweeps", sweep)
        time.sleep(1)  # the checks are under way
        sent = time.monotonic()
        op.proc.send_signal(signal.SIGTERM)
        code = op.proc.wait(15)
        assert time.monotonic() - sent <= 5 + 2, "not ended within the grace period"
        assert code in (0, 143), op.tail()
    finally:
        OperatorProcess.running.discard(op)
        for i in range(3):
            try:
                custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "trainingsweeps", f"busy-{i}")
            except ApiException:
                pass


def test_an_object_planted_under_a_childs_name_is_refused_not_adopted(cluster, crd, api, namespace, tmp_path, alone):  # noqa: F811
    """A ConfigMap named like the job's config, even with the job's label, is someone else's: the
    job waits with a refusal naming it, creates no pod, and proceeds once it is gone."""
    op = OperatorProcess(cluster.kubeconfig, tmp_path, name="adopt").start()
    core = client.CoreV1Api(api)
    jobs = Jobs(api, namespace)
    try:
        core.create_namespaced_config_map(namespace, {"metadata": {
            "name": "planted-config", "labels": {"phalanx.dev/job-name": "planted"}}, "data": {"config.json": "{}"}})
        jobs.create(job_manifest("planted", nodes=1, procs=1, gpus=1))
        created = wait_for(lambda: (c := jobs.condition("planted", "Created")) and c["status"] == "False" and c, 30,
                           "Created=False")
        assert "ConfigMap" in created["message"] and "planted-config" in created["message"]
        assert "not created by this job" in created["message"]
        assert not jobs.pods("planted")
        assert core.read_namespaced_config_map("planted-config", namespace).metadata.owner_references is None
        core.delete_namespaced_config_map("planted-config", namespace)
        wait_for(lambda: _running(jobs, "planted"), 60, "the job proceeds once the planted object is gone")
    finally:
        drain(api, namespace)
        op.stop()
