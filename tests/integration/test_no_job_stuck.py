"""No job stuck (issue #11), on the real API server: a permanent refusal (Pod Security
admission) ends the job Failed with the API's words and leaves no pod behind; a retryable one
(quota) backs off and creates in slow-start batches instead of re-POSTing every missing pod."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from phalanx import constants as C
from tests.integration.harness import Jobs, job_manifest, wait_for


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def test_pod_security_refusal_fails_the_job_within_30s_with_no_pods(jobs):
    jobs.core.patch_namespace(jobs.ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    # nfs is not a volume type the restricted level allows: admission refuses the pod.
    job = job_manifest("psa", nodes=2, gpus=0, volumes=[{"name": "data", "nfs": {"server": "nfs.example", "path": "/d"}}],
                       volumeMounts=[{"name": "data", "mountPath": "/data"}])
    started = time.monotonic()
    jobs.create(job)
    status = jobs.wait_phase("psa", "Failed", 30)
    assert time.monotonic() - started < 30
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == C.REASON_CREATE_REJECTED
    assert "violates PodSecurity" in failed["message"] and "restricted" in failed["message"]
    wait_for(lambda: any(e.reason == C.REASON_CREATE_REJECTED for e in jobs.events("psa")), 15, "Warning event")
    time.sleep(2)
    assert jobs.pods("psa") == []  # the gang was dry-run first: not one pod was created


def _pod_creates(operator) -> float:
    return operator.metric("phalanx_api_requests_total", 'verb="create"')


def test_quota_refusal_backs_off_in_slow_start_batches(jobs, operator):
    client.CoreV1Api(jobs.core.api_client).create_namespaced_resource_quota(
        jobs.ns, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "2"}}})
    wait_for(lambda: jobs.core.read_namespaced_resource_quota("pods", jobs.ns).status.hard, 10, "quota status")
    jobs.create(job_manifest("quota", nodes=16, procs=1, gpus=0))
    cond = wait_for(lambda: (c := jobs.condition("quota", "Created")) and c["reason"] == C.REASON_CREATE_REFUSED and c,
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
