"""Heterogeneous gangs on a real control plane: every role's pods are created, planned and
released together by the operator and bound by the real kube-scheduler where the plan says;
a role that cannot fit holds the whole gang back; the success policy ends the job."""

from __future__ import annotations

import pytest

from localcluster import finish_pod
from tests.integration.harness import Jobs, pooled, wait_for
from tests.integration.test_gang import schedulable

ROLES = [{"name": "ps", "replicas": 2, "resources": {"cpu": "2", "memory": "1Gi"}},
         {"name": "chief", "command": ["python", "chief.py"], "resources": {"cpu": "1"}}]


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def roles_job(pool, name, roles=ROLES, **spec):
    job = pooled(pool, name, 2, command=["python", "train.py"], procsPerNode=1, roles=roles, **spec)
    del job["spec"]["model"]  # a command job
    return job


def running(jobs, name, n):
    pods = jobs.pods(name, 0)
    return len(pods) == n and all(p.status.phase == "Running" for p in pods) and pods


def test_every_role_is_placed_released_and_reported_with_the_workers(jobs, pool):
    jobs.create(roles_job(pool, "hetero"))
    pods = wait_for(lambda: running(jobs, "hetero", 5), 90, "all 5 pods of the gang Running")
    names = sorted(p.metadata.name for p in pods)
    assert names == ["hetero-chief-0-0", "hetero-node-0-0", "hetero-node-1-0", "hetero-ps-0-0", "hetero-ps-1-0"]
    status = wait_for(lambda: (s := jobs.status("hetero")).get("rolesReady") == "worker:2/2 ps:2/2 chief:1/1" and s,
                      30, "per-role readiness in the status")
    placement = status["placement"]
    by_name = {p.metadata.name: p for p in pods}
    for role, nodes in {"ps": placement["roles"]["ps"], "chief": placement["roles"]["chief"]}.items():
        for i, node in enumerate(nodes):
            pod = by_name[f"hetero-{role}-{i}-0"]
            assert pod.spec.node_name == node and pod.metadata.labels["phalanx.dev/role"] == role
    chief = by_name["hetero-chief-0-0"].spec.containers[0]
    assert chief.command == ["python", "chief.py"] and chief.resources.limits == {"cpu": "1"}
    assert by_name["hetero-ps-1-0"].spec.hostname == "hetero-ps-1"
    assert schedulable(jobs, "hetero")["message"].endswith(", 2 ps, 1 chief")


def test_a_role_that_cannot_fit_holds_the_whole_gang_back(jobs, pool):
    too_many = [{"name": "eval", "replicas": 15, "resources": {"gpus": 8}}]  # 2 + 15 GPU pods, 16 nodes
    jobs.create(roles_job(pool, "heldback", roles=too_many))
    # the plan is redone as the nodes' watch catches up: the message settles on the pool's 14 free nodes
    expected = "role eval: needs 15 nodes with 8 free nvidia.com/gpu; 14 fit"
    seen: list[dict] = []

    def settled() -> bool:
        seen.append(schedulable(jobs, "heldback"))
        return seen[-1].get("status") == "False" and (seen[-1].get("message") or "").startswith(expected)

    try:
        wait_for(settled, 60, "Schedulable=False")
    except AssertionError:
        raise AssertionError(f"Schedulable: {seen[-1]}") from None
    pods = jobs.pods("heldback", 0)
    assert len(pods) == 17 and all(p.spec.scheduling_gates and not p.spec.node_name for p in pods)


def test_the_success_policy_ends_the_job_and_stops_the_servers(cluster, jobs, pool):
    jobs.create(roles_job(pool, "chiefdone", successPolicy={"roles": ["chief"]}))
    wait_for(lambda: running(jobs, "chiefdone", 5), 90, "gang Running")
    finish_pod(cluster.kubeconfig, jobs.ns, "chiefdone-chief-0-0", 0)
    jobs.wait_phase("chiefdone", "Succeeded", 60)
    wait_for(lambda: all(p.status.phase == "Succeeded" or p.metadata.deletion_timestamp
                         for p in jobs.pods("chiefdone", 0)) or not jobs.pods("chiefdone", 0),
             60, "the workers and servers stopped")
    assert "every pod of chief completed" in jobs.status("chiefdone")["message"]


def test_a_failed_role_pod_restarts_the_whole_gang(cluster, jobs, pool):
    jobs.create(roles_job(pool, "psfails", failurePolicy={"backoffSeconds": 1, "maxRestarts": 2}))
    wait_for(lambda: running(jobs, "psfails", 5), 90, "gang Running")
    finish_pod(cluster.kubeconfig, jobs.ns, "psfails-ps-1-0", 137)
    wait_for(lambda: len(jobs.pods("psfails", 1)) == 5 and all(p.status.phase == "Running" for p in jobs.pods("psfails", 1)),
             120, "attempt 1: all 5 pods Running again")
    status = jobs.status("psfails")
    assert status["restarts"] == 1 and status["restartAttempt"] == 1
    assert any(e.reason == "Restarting" and "pod psfails-ps-1-0 exited with code 137" in e.message
               for e in jobs.events("psfails")), [(e.reason, e.message) for e in jobs.events("psfails")]
