"""The cluster policy on the real API server (issue #12): the chart's ValidatingAdmissionPolicy
refuses hostPath / Secret / foreign service account / tolerate-all jobs at apply with the
rule's words; where it does not apply, the operator refuses them before creating anything; the
examples are accepted, and their pods admitted, in a namespace that enforces `restricted`."""

from __future__ import annotations

import copy
import json
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx.api.config import OperatorConfig
from phalanx.render.job import render_children
from phalanx.validate import validate_job
from tests.corpus import BASE, examples
from tests.integration.harness import GROUP, PLURAL, VERSION, Jobs, wait_for
from tests.integration.test_chart import CHART, helm

HOSTILE = {
    "hostPath": ({"nodes": 1, "checkpoint": {"volume": {"hostPath": {"path": "/"}}}}, "spec.checkpoint.volume: a volume type"),
    "socket": ({"volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd/containerd.sock"}}]}, "spec.volumes: a volume type"),
    "secret": ({"volumes": [{"name": "s", "secret": {"secretName": "db"}}]}, "spec.volumes: a volume type"),
    "secretEnv": ({"env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}, "spec.env: Secret references"),
    "roleSecretEnv": ({"roles": [{"name": "ps", "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}]},
                      "spec.roles[].env: Secret references"),
    "rolePods": ({"roles": [{"name": "ps", "replicas": 6}, {"name": "chief"}]}, "spec.nodes: at most 8 pods per job"),
    "foreignSA": ({"serviceAccountName": "kube-admin"}, "spec.serviceAccountName: not allowed"),
    "tolerateAll": ({"tolerations": [{"operator": "Exists"}]}, "spec.tolerations: a toleration without a key"),
    "controlPlane": ({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}, "spec.nodeSelector: these node label keys"),
    "scheduler": ({"scheduling": {"schedulerName": "rogue"}}, "spec.scheduling.schedulerName: not allowed"),
}


def hostile(name: str) -> dict:
    obj = copy.deepcopy(BASE)
    obj["metadata"]["name"] = name.lower()
    obj["spec"].update(HOSTILE[name][0])
    if "roles" in obj["spec"]:  # roles are for command jobs
        obj["spec"].pop("model")
        obj["spec"]["command"] = ["python", "train.py"]
    return obj


@pytest.fixture(scope="module")
def policy(cluster):
    """The chart's policy, bound (through a policy entry) only to namespaces with this label."""
    # A letter first and --set-string: an all-digit hex value would reach helm as a number.
    key, value = "phalanx.dev/policy-test", "t" + uuid.uuid4().hex[:8]
    out = subprocess.run([helm(), "template", "pol", str(CHART), "-n", "phalanx-system",
                          "--set-string", "policy.namespaces[0].matchLabels.phalanx\\.dev/policy-test=" + value,
                          "--set", "policy.namespaces[0].rules.maxNodes=8"],
                         check=True, capture_output=True, text=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d and d["metadata"]["name"].endswith("-policy-0")]
    assert {d["kind"] for d in docs} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    text = "\n---\n".join(json.dumps(d) for d in docs)
    subprocess.run([cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}", "apply", "--server-side",
                    "--force-conflicts", "-f", "-"], input=text, text=True, check=True, capture_output=True)
    yield {key: value}
    for d in docs:
        cluster.kubectl("delete", d["kind"].lower(), d["metadata"]["name"], "--ignore-not-found", check=False)


def _create(custom, ns, obj, dry_run=False):
    body = {**obj, "metadata": {**obj["metadata"], "namespace": ns}}
    return custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body, **({"dry_run": "All"} if dry_run else {}))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_admission_policy_refuses_at_apply(cluster, crd, api, namespace, policy, name):
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": policy}})
    custom = client.CustomObjectsApi(api)

    def refused():
        try:
            _create(custom, namespace, hostile(name), dry_run=True)
        except ApiException as exc:
            message = json.loads(exc.body)["message"]
            return HOSTILE[name][1] in message and message  # else: the params may not have arrived yet
        return False  # the binding may take a moment to reach the admission plugin

    message = wait_for(refused, 20, f"{name} refused by the admission policy")
    assert "ValidatingAdmissionPolicy" in message and HOSTILE[name][1] in message, message


def test_good_job_passes_the_admission_policy(cluster, crd, api, namespace, policy):
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": policy}})
    wait_for(lambda: _refuses_hostpath(api, namespace), 20, "policy active")
    _create(client.CustomObjectsApi(api), namespace, copy.deepcopy(BASE), dry_run=True)


def _refuses_hostpath(api, namespace):
    try:
        _create(client.CustomObjectsApi(api), namespace, hostile("hostPath"), dry_run=True)
    except ApiException as exc:
        return HOSTILE["hostPath"][1] in json.loads(exc.body)["message"]
    return False


def test_without_the_policy_the_operator_refuses_before_creating_anything(api, namespace, operator):
    jobs = Jobs(api, namespace)
    jobs.create(hostile("socket"))
    status = jobs.wait_phase("socket", "Failed", 30)
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["reason"] == "InvalidSpec" and "spec.volumes[0]: hostPath volumes are not allowed here" in valid["message"]
    assert "(cluster policy)" in valid["message"] and jobs.pods("socket") == []


@pytest.mark.parametrize(("name", "obj"), examples(), ids=[n for n, _ in examples()])
def test_examples_accepted_and_pods_admitted_under_restricted(api, crd, namespace, name, obj):
    core = client.CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    _create(client.CustomObjectsApi(api), namespace, obj, dry_run=True)
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    job, problems = validate_job(obj, OperatorConfig(), labels)
    assert problems == []
    job.metadata.uid = "00000000-0000-0000-0000-000000000002"
    pod = next(c for c in render_children(job, OperatorConfig(), attempt=0) if c["kind"] == "Pod")
    prio = job.spec.scheduling.priority_class_name
    if prio:
        try:
            client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": prio}, "value": 1000})
        except ApiException as exc:
            if exc.status != 409:
                raise
    core.create_namespaced_pod(namespace, pod, dry_run="All")  # Pod Security admission says yes
