"""No job stuck: API refusals classified, permanent ones end the job Failed with the
API's words, retryable ones back off; decide() errors become status; pods stuck terminating on
lost nodes are force-deleted; a new gang is dry-run before anything is created."""

from __future__ import annotations

from datetime import timedelta

import pytest

from phalanx.constants import Reason
from phalanx.lifecycle.refusals import (
    MAX_DECIDE_ERRORS,
    Refusal,
    error_status,
    is_permanent,
    refused_status,
    retry_delay,
)
from tests.unit.phalanx.lifecycle.test_reconcile import T0, Sim, cond

PSA = ('pods "job-node-0-0" is forbidden: violates PodSecurity "restricted:latest": '
       'allowPrivilegeEscalation != false (container "trainer" must set securityContext.allowPrivilegeEscalation=false)')


@pytest.mark.parametrize(("code", "message", "permanent"), [
    (422, 'Pod "x" is invalid: spec.containers[0].env[0].name: Required value', True),
    (400, "bad request", True),
    (403, PSA, True),
    (403, 'pods "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=8', False),
    (403, 'pods "x" is forbidden: no PriorityClass with name high was found', False),
    (403, 'pods "x" is forbidden: error looking up service account team/trainer: serviceaccount "trainer" not found', False),
    (409, "conflict", False), (429, "too many requests", False), (500, "etcd timeout", False), (None, "", False),
])
def test_classification(code, message, permanent):
    assert is_permanent(code, message) is permanent


def test_retry_delay_is_exponential_and_capped():
    assert [retry_delay(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 16]
    assert retry_delay(30) == 300


def test_permanent_refusal_fails_the_job_with_the_api_message(job_obj):
    status, permanent = refused_status(job_obj, [Refusal("Pod", "job-node-0-0", 403, PSA)], T0)
    assert permanent and status["phase"] == "Failed"
    failed = cond(status, "Failed")
    assert failed["reason"] == Reason.CREATE_REJECTED and "violates PodSecurity" in failed["message"]
    assert cond(status, "Created")["status"] == "False"


def test_retryable_refusal_waits(job_obj):
    status, permanent = refused_status(job_obj, [Refusal("Pod", "p", 403, "exceeded quota: gpu")], T0)
    assert not permanent and status.get("phase", "Pending") == "Pending"
    assert cond(status, "Created")["reason"] == Reason.CREATE_REFUSED


def test_after_a_permanent_refusal_the_next_pass_deletes_every_pod(job_obj):
    sim = Sim(job_obj)
    sim.step()
    status, _ = refused_status(sim.obj, [Refusal("Pod", "job-node-1-0", 422, "invalid")], T0)
    sim.obj["status"] = status
    plan = sim.step()
    assert sorted(plan.delete_pods) == sorted(sim.pods) or not sim.pods
    assert not plan.create and sim.status["phase"] == "Failed"


def test_decide_errors_become_a_condition_then_failed(job_obj):
    job_obj["status"] = {"phase": "Running"}
    status = error_status(job_obj, "ZeroDivisionError: boom", T0, final=False)
    assert status["phase"] == "Running" and cond(status, "Reconciled")["reason"] == Reason.RECONCILE_ERROR
    status = error_status(job_obj, "ZeroDivisionError: boom", T0, final=True)
    assert status["phase"] == "Failed" and "boom" in cond(status, "Failed")["message"]
    assert MAX_DECIDE_ERRORS >= 2


def test_error_status_survives_a_broken_stored_status(job_obj):
    job_obj["status"] = {"phase": "NoSuchPhase", "restarts": "many"}
    status = error_status(job_obj, "ValueError: x", T0, final=True)
    assert status["phase"] == "Failed"


def test_a_recovered_job_says_reconciled_again(job_obj):
    job_obj["status"] = error_status(job_obj, "boom", T0, final=False)
    sim = Sim(job_obj)
    sim.step()
    assert cond(sim.status, "Reconciled")["status"] == "True"


def test_new_gang_is_dry_run_first_and_only_then(job_obj):
    sim = Sim(job_obj)
    plan = sim.step()
    assert plan.dry_run and any(c["kind"] == "Pod" for c in plan.create)
    sim.pods.popitem()  # one pod of the gang went missing before the gang was complete
    sim.obj["status"]["attemptCreated"] = False
    assert not sim.step().dry_run  # pods of this attempt exist: create the rest for real


def _terminating(sim, node, seconds_ago):
    for pod in sim.pods.values():
        pod["metadata"]["deletionTimestamp"] = (sim.now - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        pod["spec"]["nodeName"] = node


def test_pod_stuck_terminating_on_a_lost_node_is_force_deleted(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    _terminating(sim, "n1", seconds_ago=61)
    plan = sim.step(lost_nodes=frozenset({"n1"}))
    assert sorted(plan.force_delete_pods) == sorted(sim.pods)
    assert any(reason == Reason.FORCE_DELETED for _, reason, _ in plan.events)


@pytest.mark.parametrize(("lost", "seconds_ago"), [(frozenset(), 600), (frozenset({"n1"}), 30)])
def test_terminating_pods_are_left_to_the_kubelet_otherwise(job_obj, lost, seconds_ago):
    sim = Sim(job_obj)
    sim.run_until_running()
    _terminating(sim, "n1", seconds_ago=seconds_ago)
    assert sim.step(lost_nodes=lost).force_delete_pods == []
