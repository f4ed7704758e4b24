"""The Python client (phalanx.client) against a real API server, the operator and kwok nodes.

kwok plays the pods (Running, then the exit code a test sets with ``finish_pod``) but runs no
container: progress is simulated by patching the job's status subresource, as the operator
would write it; kwok keeps no container logs (it answers "no logs found"), so ``logs`` is
checked here up to the pod and container it asks for and the API server's answer, and its
reading of a log in the unit tests (tests/unit/phalanx/test_client.py).
"""

from __future__ import annotations

import pytest

from localcluster import finish_pod
from phalanx import constants
from phalanx.client import ApiError, Client, InvalidJob, JobFailed, NotFound, training_job
from tests.integration.harness import Jobs, wait_for


@pytest.fixture
def tj(cluster, namespace, operator):
    with Client(namespace=namespace, kubeconfig=cluster.kubeconfig) as client:
        yield client


@pytest.fixture
def jobs(api, namespace):
    return Jobs(api, namespace)


def command_job(name: str, nodes: int = 2, max_restarts: int = 3, **spec):
    return training_job(name, image="phalanx/runtime:test", command=["python3", "train.py"], nodes=nodes,
                        resources={"cpu": "1", "memory": "1Gi"},
                        failure_policy={"backoffSeconds": 1, "maxRestarts": max_restarts}, **spec)


def running_pods(jobs, name, attempt=0):
    pods = jobs.pods(name, attempt)
    return pods if pods and all(p.status.phase == "Running" for p in pods) else None


def test_submit_get_list_and_the_api_servers_defaults(tj, jobs):
    created = tj.submit(command_job("first", labels={"team": "a"}))
    assert created.metadata.uid and created.metadata.namespace == tj.namespace
    raw = jobs.get("first")["spec"]
    assert (raw["procsPerNode"], raw["imagePullPolicy"]) == (1, "IfNotPresent")  # defaulted by the API server
    tj.submit(command_job("second", nodes=1))
    assert [j.metadata.name for j in tj.list()] == ["first", "second"]
    assert [j.metadata.name for j in tj.list(label_selector="team=a")] == ["first"]
    job = wait_for(lambda: (j := tj.get("first")).status and j.status.phase == "Running" and j, 90, "first Running")
    assert job.status.nodes == "2/2" and job.spec.command == ["python3", "train.py"]


def test_watch_sees_the_operators_phases_and_the_progress_written_to_status(cluster, tj, jobs):
    tj.submit(command_job("watched"))
    seen = []
    for progress in tj.watch("watched", timeout=120, every=0.2):
        seen.append(progress)
        if progress.phase == "Running" and progress.step is None:
            jobs.custom.patch_namespaced_custom_object_status(
                constants.GROUP, constants.VERSION, jobs.ns, constants.PLURAL, "watched",
                {"status": {"step": 40, "totalSteps": 100, "loss": 1.5}})
        if progress.step == 40:
            for pod in jobs.pods("watched"):
                finish_pod(cluster.kubeconfig, jobs.ns, pod.metadata.name, 0)
    assert "Running" in [p.phase for p in seen]
    stepped = next(p for p in seen if p.step == 40)
    assert (stepped.total_steps, stepped.loss) == (100, 1.5) and "step 40/100" in str(stepped)
    assert seen[-1].phase == "Succeeded" and seen[-1].finished


def test_wait_returns_the_succeeded_job(cluster, tj, jobs):
    tj.submit(command_job("done", nodes=1))
    pods = wait_for(lambda: running_pods(jobs, "done"), 90, "pods Running")
    finish_pod(cluster.kubeconfig, jobs.ns, pods[0].metadata.name, 0)
    job = tj.wait("done", timeout=90, every=0.2)
    assert job.status.phase == "Succeeded" and job.status.completion_time


def test_wait_raises_on_failure_with_the_status_message(cluster, tj, jobs):
    tj.submit(command_job("broken", nodes=1, max_restarts=0))
    pods = wait_for(lambda: running_pods(jobs, "broken"), 90, "pods Running")
    finish_pod(cluster.kubeconfig, jobs.ns, pods[0].metadata.name, 2)
    with pytest.raises(JobFailed, match="exited with code 2") as err:
        tj.wait("broken", timeout=90, every=0.2)
    assert err.value.job.status.phase == "Failed"
    assert tj.wait("broken", timeout=5, raise_on_failure=False).status.phase == "Failed"


def test_wait_times_out_on_a_running_job(tj):
    tj.submit(command_job("slow", nodes=1))
    with pytest.raises(TimeoutError, match="not finished after"):
        tj.wait("slow", timeout=1, every=0.2)


def test_logs_read_rank_0s_pod_of_the_current_attempt(cluster, tj, jobs):
    tj.submit(command_job("logged"))
    wait_for(lambda: running_pods(jobs, "logged"), 90, "pods Running")
    pod = tj.pod("logged")
    assert pod["metadata"]["name"] == "logged-node-0-0"
    assert pod["metadata"]["labels"][constants.LABEL_NODE_RANK] == "0"
    assert tj.pod("logged", rank=1)["metadata"]["name"] == "logged-node-1-0"
    with pytest.raises(NotFound, match="no pod of node-rank 2"):
        tj.pod("logged", rank=2)
    # kwok answers the log request for the pod's trainer container, and has no log for it: the
    # request reached that pod through the API server, whose answer comes back as an ApiError
    for follow in (False, True):
        with pytest.raises(ApiError) as err:
            tj.logs("logged", follow=follow)
        assert err.value.status == 400
        assert f'no logs found for container "trainer" in pod "{jobs.ns}/logged-node-0-0"' in err.value.message
    finish_pod(cluster.kubeconfig, jobs.ns, "logged-node-1-0", 137)  # a retryable failure: the gang restarts
    wait_for(lambda: running_pods(jobs, "logged", attempt=1), 90, "attempt-1 pods Running")
    wait_for(lambda: tj.get("logged").status.restart_attempt == 1, 30, "status.restartAttempt 1")
    assert tj.pod("logged")["metadata"]["name"] == "logged-node-0-1"


def test_delete_and_wait_removes_the_job_and_its_pods(tj, jobs):
    tj.submit(command_job("gone"))
    wait_for(lambda: running_pods(jobs, "gone"), 90, "pods Running")
    tj.delete("gone", wait=True, timeout=90)
    assert not jobs.pods("gone")
    with pytest.raises(NotFound):
        tj.get("gone")
    with pytest.raises(NotFound):
        tj.delete("gone")


def test_a_refused_job_names_the_field_and_creates_nothing(tj, jobs):
    bad = training_job("bad", image="phalanx/runtime:test", model={"preset": "debug"}, nodes=2, procs_per_node=4,
                       parallelism={"data": 3}, training={"globalBatchSize": 8})
    with pytest.raises(InvalidJob) as err:
        tj.submit(bad)
    assert any(p.field.startswith("spec") for p in err.value.problems)
    assert "parallelism.data" in str(err.value)
    with pytest.raises(ApiError) as refused:  # the API server's own refusal: its CEL rule's words
        tj.submit(bad, check=False)
    assert refused.value.status == 422
    assert "nodes × procsPerNode must equal parallelism.data × tensor × pipeline" in refused.value.message
    assert not tj.list() and not jobs.pods("bad")
