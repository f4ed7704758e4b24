"""No job stuck, on the real API server: a permanent refusal at pod creation (an
admission policy) ends the job Failed with the API's words and leaves no pod behind; a Pod
Security level the namespace does not allow is refused even earlier, naming the label; a
retryable refusal (quota) backs off and creates with a slow start instead of re-POSTing
every missing pod."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx import constants
from tests.integration.harness import Jobs, job_manifest, wait_for


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def test_pod_security_level_refused_before_any_pod_naming_the_label(jobs):
    jobs.core.patch_namespace(jobs.ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    time.sleep(1)  # the operator learns labels from its namespace watch (an admin labels long before)
    # nfs is not a volume type the restricted level allows: Pod Security admission would refuse the
    # pods; the operator knows the namespace's label and refuses the job before creating anything.
    job = job_manifest("psa", nodes=2, gpus=0, volumes=[{"name": "data", "nfs": {"server": "nfs.example", "path": "/d"}}],
                       volumeMounts=[{"name": "data", "mountPath": "/data"}])
    started = time.monotonic()
    jobs.create(job)
    status = jobs.wait_phase("psa", "Failed", 30)
    assert time.monotonic() - started < 30
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "False" and "spec.volumes[0]: needs Pod Security level baseline" in valid["message"]
    assert "pod-security.kubernetes.io/enforce=restricted" in valid["message"]
    time.sleep(2)
    assert jobs.pods("psa") == []


@pytest.fixture
def deny_pods(cluster, namespace):
    """An admission policy that refuses every pod in the test namespace: a refusal at pod
    creation that no check of the operator can foresee (an admin's webhook or policy)."""
    name = f"deny-{namespace}"
    docs = [
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
         "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [
             {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}]},
             "validations": [{"expression": "false", "message": "training is frozen in this namespace"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}},
    ]
    subprocess.run([cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}", "apply", "-f", "-"],
                   input="\n---\n".join(json.dumps(d) for d in docs), text=True, check=True, capture_output=True)
    yield name
    for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
        cluster.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def test_admission_refusal_at_pod_creation_fails_the_job_within_30s_with_no_pods(jobs, deny_pods):
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
             "spec": {"containers": [{"name": "c", "image": "x"}]}}

    def denied():
        try:
            jobs.core.create_namespaced_pod(jobs.ns, probe, dry_run="All")
        except ApiException as exc:
            return "frozen" in exc.body
        return False

    wait_for(denied, 20, "the deny policy in force")
    started = time.monotonic()
    jobs.create(job_manifest("frozen", nodes=2, gpus=0))
    status = jobs.wait_phase("frozen", "Failed", 30)
    assert time.monotonic() - started < 30
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == constants.Reason.CREATE_REJECTED and "training is frozen in this namespace" in failed["message"]
    wait_for(lambda: any(e.reason == constants.Reason.CREATE_REJECTED for e in jobs.events("frozen")), 15, "Warning event")
    time.sleep(2)
    assert jobs.pods("frozen") == []  # the gang was dry-run first: not one pod was created


def _pod_creates(operator) -> float:
    return operator.metric("phalanx_api_requests_total", 'verb="create"')


def test_quota_refusal_backs_off_in_slow_start_batches(jobs, operator):
    client.CoreV1Api(jobs.core.api_client).create_namespaced_resource_quota(
        jobs.ns, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "2"}}})
    wait_for(lambda: jobs.core.read_namespaced_resource_quota("pods", jobs.ns).status.hard, 10, "quota status")
    jobs.create(job_manifest("quota", nodes=16, procs=1, gpus=0))
    cond = wait_for(lambda: (c := jobs.condition("quota", "Created")) and c["reason"] == constants.Reason.CREATE_REFUSED and c,
                    30, "CreateRefused")
    assert "exceeded quota" in cond["message"]
    assert jobs.status("quota").get("phase") != "Failed"  # quota is retryable
    before = _pod_creates(operator)
    time.sleep(12)
    creates = _pod_creates(operator) - before
    # 14 pods are missing; re-POSTing them all each pass would be >= 14 creates. Slow start sends
    # one per retry, and retries back off (2, 4, 8 s ...).
    assert creates <= 6, creates
    assert len(jobs.pods("quota")) == 2
