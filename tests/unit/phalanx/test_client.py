"""The Python client: building and serialising jobs, the client-side verdict, reading status,
choosing rank 0's pod, and the calls it makes (against fakes of the kubernetes client)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from phalanx import client as phalanx_client
from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.api.slots import Slot, worker
from phalanx.api.types import ObjectMeta, TrainingJob, TrainingJobSpec
from phalanx.client import (
    ApiError,
    Client,
    InvalidJob,
    JobFailed,
    NotFound,
    default_namespace,
    job_from_object,
    manifest,
    pick_pod,
    progress_of,
    training_job,
    validate,
)

ROOT = Path(__file__).resolve().parents[3]
UID = "11111111-2222-3333-4444-555555555555"


def command_job(name: str = "j", **spec) -> TrainingJob:
    return training_job(name, image="img:1", command=["python3", "train.py"], **spec)


# --- building and serialising -------------------------------------------------------------------


def test_manifest_carries_only_what_was_set_in_camel_case():
    job = command_job(nodes=2, procs_per_node=4, resources={"gpus": 4}, failurePolicy={"maxRestarts": 1})
    assert manifest(job, namespace="team") == {
        "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j", "namespace": "team"},
        "spec": {"image": "img:1", "command": ["python3", "train.py"], "nodes": 2, "procsPerNode": 4,
                 "resources": {"gpus": 4}, "failurePolicy": {"maxRestarts": 1}},
    }


def test_the_pydantic_models_serialise_the_same_as_the_convenience():
    spec = TrainingJobSpec(image="img:1", command=["python3", "train.py"], nodes=2)
    typed = TrainingJob(metadata=ObjectMeta(name="j"), spec=spec)
    assert manifest(typed) == manifest(command_job(nodes=2))
    assert "namespace" not in manifest(typed)["metadata"]  # the client's applies at submit


def test_the_jobs_own_namespace_wins_over_the_clients():
    job = command_job(namespace="mine", labels={"team": "a"})
    assert manifest(job, namespace="other")["metadata"] == {"name": "j", "namespace": "mine", "labels": {"team": "a"}}


def test_a_dict_manifest_is_copied_namespaced_and_loses_its_status():
    obj = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "j"},
           "spec": {"image": "img:1"}, "status": {"phase": "Running"}}
    out = manifest(obj, namespace="ns")
    assert out["metadata"] == {"name": "j", "namespace": "ns"} and "status" not in out
    assert obj["metadata"] == {"name": "j"} and "status" in obj


@pytest.mark.parametrize(("spec", "field"), [
    ({"nodes": 0}, "spec.nodes"),
    ({"procs_per_node": "many"}, "spec.procsPerNode"),
    ({"nodez": 3}, "spec.nodez"),
    ({"failure_policy": {"max_restarts": -1}}, "spec.failurePolicy.maxRestarts"),
])
def test_building_a_job_names_the_field_pydantic_refuses(spec, field):
    with pytest.raises(InvalidJob) as err:
        command_job(**spec)
    assert [p.field for p in err.value.problems] == [field]


def test_validate_gives_the_verdict_of_phalanx_validate_naming_the_field():
    bad = training_job("j", image="img:1", model={"preset": "debug"}, nodes=2, procs_per_node=4, parallelism={"data": 3})
    with pytest.raises(InvalidJob) as err:
        validate(bad)
    assert any(p.field.startswith("spec") and "parallelism.data" in p.message for p in err.value.problems), err.value
    assert validate(command_job(nodes=2)).spec.nodes == 2


def test_validate_reads_the_clusters_operator_config():
    job = command_job(network={"profile": "roce"})
    with pytest.raises(InvalidJob, match="spec.network.profile: unknown network profile 'roce'"):
        validate(job)
    config = OperatorConfig(network_profiles={"default": NetworkProfile(), "roce": NetworkProfile()})
    assert validate(job, config).spec.network.profile == "roce"


# --- reading status -----------------------------------------------------------------------------


def server_object(status=None, name="j"):
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "ns", "uid": UID, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"image": "img:1", "command": ["python3", "train.py"], "nodes": 1, "procsPerNode": 1},
            "status": status or {}}


def test_job_from_object_parses_status_and_leaves_out_fields_it_does_not_know():
    job = job_from_object(server_object({"phase": "Running", "step": 3, "loss": 2.5, "metrics": {"eval_loss": 1.0},
                                         "resumedStep": 2, "someFutureField": True}))
    assert (job.metadata.uid, job.status.phase, job.status.step, job.status.loss) == (UID, "Running", 3, 2.5)
    assert job_from_object(server_object({"phase": "NoSuchPhase"})).status is None


@pytest.mark.parametrize(("status", "want"), [
    ({}, {"phase": "Pending", "step": None, "metrics": {}}),
    ({"phase": "Running", "step": 7, "totalSteps": 10, "loss": 1.25, "tokensPerSecond": 900, "epoch": 0.5},
     {"step": 7, "total_steps": 10, "loss": 1.25, "tokens_per_second": 900.0, "epoch": 0.5}),
    ({"metrics": {"eval_loss": 0.5, "eval_accuracy": 1, "note": "text", "flag": True, "nan": math.nan}},
     {"metrics": {"eval_loss": 0.5, "eval_accuracy": 1.0}}),
    ({"step": True, "loss": "1.0", "metrics": [1], "resumedStep": 40, "restarts": 2},
     {"step": None, "loss": None, "metrics": {}, "resumed_step": 40, "restarts": 2}),
    ({"lastCheckpoint": {"step": 10, "path": "/ckpt/10"}, "message": "done", "phase": "Succeeded"},
     {"last_checkpoint": {"step": 10, "path": "/ckpt/10"}, "message": "done", "finished": True, "succeeded": True}),
    ({"phase": "Failed", "lastCheckpoint": "x", "message": 3}, {"last_checkpoint": None, "message": None,
                                                                  "finished": True, "succeeded": False}),
])
def test_progress_reads_the_status_defensively(status, want):
    progress = progress_of("j", status)
    assert {key: getattr(progress, key) for key in want} == want


def test_progress_prints_the_watch_line_and_the_metrics():
    text = str(progress_of("j", {"phase": "Running", "step": 5, "totalSteps": 10, "metrics": {"eval_loss": 0.25},
                                 "resumedStep": 3}))
    assert text.split() == ["j", "Running", "nodes", "0/0", "step", "5/10", "eval_loss", "0.25", "resumed", "from",
                            "step", "3"]
    assert progress_of(None, "not a dict").phase == "Pending"  # type: ignore[arg-type]


# --- choosing the pod ---------------------------------------------------------------------------


def pod(name, rank=None, attempt=0, role=None, role_index=None, owner=UID, deleting=False, created="2026-01-01T00:00:00Z"):
    labels = {"phalanx.dev/job-name": "j", "phalanx.dev/restart-attempt": str(attempt)}
    if rank is not None:
        labels["phalanx.dev/node-rank"] = str(rank)
    if role is not None:
        labels |= {"phalanx.dev/role": role, "phalanx.dev/role-index": str(role_index)}
    meta = {"name": name, "labels": labels, "creationTimestamp": created, "ownerReferences": [{"uid": owner}]}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:05:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize(("pods", "slot", "attempt", "want"), [
    ([pod("j-node-0-0", 0), pod("j-node-1-0", 1)], worker(0), 0, "j-node-0-0"),
    ([pod("j-node-0-0", 0), pod("j-node-1-0", 1)], worker(1), 0, "j-node-1-0"),
    ([pod("j-node-0-0", 0, 0, deleting=True), pod("j-node-0-1", 0, 1)], worker(0), 1, "j-node-0-1"),
    # the current attempt's pod is not created yet: the latest there is
    ([pod("j-node-0-0", 0, 0), pod("j-node-0-1", 0, 1, deleting=True)], worker(0), 2, "j-node-0-1"),
    # an elastic replacement of the same slot and attempt: the one not being deleted
    ([pod("a", 0, 1, deleting=True, created="2026-01-01T00:09:00Z"), pod("b", 0, 1)], worker(0), 1, "b"),
    ([pod("j-node-0-0", 0, owner="someone-else")], worker(0), 0, None),
    ([pod("j-node-0-0", 0, role="worker", role_index=0), pod("j-ps-0-0", role="ps", role_index=0)],
     Slot("ps", 0), 0, "j-ps-0-0"),
    ([pod("j-ps-0-0", role="ps", role_index=0)], worker(0), 0, None),
    ([{"metadata": {"name": "stray", "labels": {}}}], worker(0), 0, None),
])
def test_pick_pod(pods, slot, attempt, want):
    found = pick_pod(pods, slot, attempt, UID)
    assert (found["metadata"]["name"] if found else None) == want


# --- the client against fakes of the kubernetes client ------------------------------------------


class Response:
    def __init__(self, data: bytes):
        self.data = data
        self.released = False

    def __iter__(self):
        return iter(self.data.splitlines(keepends=True))

    def release_conn(self):
        self.released = True


class FakeCustom:
    """TrainingJobs of one namespace; ``statuses``: what successive reads of the status return."""

    def __init__(self, statuses=None):
        self.created: list[dict] = []
        self.deleted: list[tuple[str, dict]] = []
        self.statuses = list(statuses or [{}])
        self.gone_after_reads: int | None = None
        self.reads = 0

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kwargs):
        assert (group, version, plural) == ("phalanx.dev", "v1alpha1", "trainingjobs")
        if body["spec"].get("nodes") == 99:
            exc = ApiException(status=422, reason="Unprocessable Entity")
            exc.body = json.dumps({"message": 'TrainingJob.phalanx.dev "j" is invalid: spec: Invalid value: "object": too many',
                                   "details": {"causes": [{"field": "spec", "message": "too many"}]}})
            raise exc
        self.created.append({"namespace": namespace, "body": body, **kwargs})
        return {**body, "metadata": {**body["metadata"], "uid": UID}, "status": {}}

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.reads += 1
        if name == "missing" or (self.gone_after_reads is not None and self.reads > self.gone_after_reads):
            raise ApiException(status=404, reason="Not Found")
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return server_object(status, name)

    def list_namespaced_custom_object(self, group, version, namespace, plural, **kwargs):
        return {"items": [server_object({"phase": "Running"}, "b"), server_object({}, "a")]}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        self.deleted.append((name, body))


class FakeCore:
    def __init__(self, pods, log=b""):
        self.pods, self.log = pods, log
        self.log_calls: list[tuple[str, dict]] = []

    def list_namespaced_pod(self, namespace, label_selector, _preload_content):
        assert label_selector == "phalanx.dev/job-name=j" and _preload_content is False
        return Response(json.dumps({"items": self.pods}).encode())

    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        self.log_calls.append((name, kwargs))
        self.response = Response(self.log)
        return self.response


def fake_client(custom=None, core=None, **kwargs) -> Client:
    tj = Client(namespace="ns", api_client=ApiClient(), **kwargs)
    tj.custom = custom or FakeCustom()
    tj.core = core or FakeCore([])
    return tj


def test_submit_sends_the_manifest_in_the_clients_namespace_and_returns_the_created_job():
    tj = fake_client()
    created = tj.submit(command_job(nodes=2))
    assert created.metadata.uid == UID and created.spec.nodes == 2
    (call,) = tj.custom.created
    assert call["namespace"] == "ns" and call["body"]["metadata"] == {"name": "j", "namespace": "ns"}
    tj.submit(command_job(), dry_run=True)
    assert tj.custom.created[-1]["dry_run"] == "All"


def test_submit_refuses_an_invalid_job_before_sending_anything():
    tj = fake_client()
    with pytest.raises(InvalidJob, match="spec.network.profile"):
        tj.submit(command_job(network={"profile": "roce"}))
    assert not tj.custom.created
    config = OperatorConfig(network_profiles={"default": NetworkProfile(), "roce": NetworkProfile()})
    fake_client(operator_config=config).submit(command_job(network={"profile": "roce"}))


def test_submit_reads_the_operator_config_from_its_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"networkProfiles": {"default": {}, "roce": {}}}))
    assert fake_client(operator_config=path).config.network_profiles.keys() == {"default", "roce"}


def test_an_api_server_refusal_carries_its_message_and_causes():
    tj = fake_client()
    with pytest.raises(ApiError) as err:
        tj.submit(command_job(nodes=99), check=False)
    assert err.value.status == 422 and "spec: Invalid value" in err.value.message
    assert err.value.causes == [("spec", "too many")]
    assert "TrainingJob ns/j: 422" in str(err.value)


def test_get_list_and_not_found():
    tj = fake_client(FakeCustom([{"phase": "Running", "step": 4}]))
    assert tj.get("j").status.step == 4
    assert [j.metadata.name for j in tj.list()] == ["a", "b"]
    with pytest.raises(NotFound):
        tj.get("missing")
    with pytest.raises(LookupError):
        tj.progress("missing")


def test_watch_yields_each_change_and_ends_when_the_job_finishes():
    statuses = [{"phase": "Pending"}, {"phase": "Pending"}, {"phase": "Running", "step": 1},
                {"phase": "Running", "step": 1, "metrics": {"eval_loss": 2.0}},
                {"phase": "Running", "step": 1, "metrics": {"eval_loss": 2.0}},
                {"phase": "Succeeded", "step": 2}, {"phase": "Running"}]
    seen = list(fake_client(FakeCustom(statuses)).watch("j", every=0))
    assert [(p.phase, p.step, p.metrics) for p in seen] == [
        ("Pending", None, {}), ("Running", 1, {}), ("Running", 1, {"eval_loss": 2.0}), ("Succeeded", 2, {})]


def test_watch_times_out():
    with pytest.raises(TimeoutError, match="not finished after"):
        list(fake_client(FakeCustom([{"phase": "Running"}])).watch("j", timeout=0.05, every=0.01))


def test_wait_returns_the_succeeded_job_and_raises_on_failure():
    custom = FakeCustom([{"phase": "Running"}, {"phase": "Succeeded", "step": 9}])
    custom.gone_after_reads = 2  # ttlSecondsAfterFinished: deleted as soon as it finished
    done = fake_client(custom).wait("j", every=0)
    assert (done.status.phase, done.status.step) == ("Succeeded", 9)
    failed = FakeCustom([{"phase": "Failed", "message": "rank 1 exited with code 2"}])
    with pytest.raises(JobFailed, match="TrainingJob j failed: rank 1 exited with code 2") as err:
        fake_client(failed).wait("j", every=0)
    assert err.value.job.status.phase == "Failed"
    assert fake_client(failed).wait("j", every=0, raise_on_failure=False).status.phase == "Failed"


def test_delete_and_wait_until_gone():
    custom = FakeCustom()
    tj = fake_client(custom)
    tj.delete("j")
    assert custom.deleted == [("j", {"propagationPolicy": "Background"})] and custom.reads == 0
    custom.gone_after_reads = 2
    tj.delete("j", wait=True, every=0)
    assert custom.deleted[-1] == ("j", {"propagationPolicy": "Foreground"}) and custom.reads == 3
    custom.gone_after_reads = None
    with pytest.raises(TimeoutError, match="still there"):
        tj.delete("j", wait=True, timeout=0.02, every=0.01)


def test_logs_read_rank_0s_pod_of_the_current_attempt_raw():
    log = b'{"step": 1, "loss": 2.5}\nstep 2\n'
    pods = [pod("j-node-0-0", 0, 0, deleting=True), pod("j-node-0-1", 0, 1), pod("j-node-1-1", 1, 1)]
    core = FakeCore(pods, log)
    tj = fake_client(FakeCustom([{"phase": "Running", "restartAttempt": 1}]), core)
    assert tj.logs("j") == log.decode()  # a JSON line stays as it was written
    name, kwargs = core.log_calls[-1]
    assert name == "j-node-0-1" and kwargs["container"] == "trainer" and kwargs["follow"] is False
    assert core.response.released
    assert list(tj.logs("j", rank=1, follow=True, tail_lines=5)) == ['{"step": 1, "loss": 2.5}', "step 2"]
    assert core.log_calls[-1][0] == "j-node-1-1" and core.log_calls[-1][1]["tail_lines"] == 5
    assert core.response.released
    with pytest.raises(NotFound, match="no pod of node-rank 7"):
        tj.logs("j", rank=7)


def test_default_namespace_is_the_kubeconfig_contexts(tmp_path, monkeypatch):
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}
    user = {"name": "u", "user": {"token": "t"}}
    contexts = [{"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
                {"name": "b", "context": {"cluster": "c", "user": "u"}}]
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": [user],
                                    "contexts": contexts, "current-context": "a"}))
    pod_namespace = tmp_path / "namespace"
    pod_namespace.write_text("pods-own\n")
    monkeypatch.setattr(phalanx_client, "SERVICE_ACCOUNT_NAMESPACE", pod_namespace)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert default_namespace(path) == "team-a"
    assert default_namespace(path, context="b") == "default"
    assert default_namespace(tmp_path / "absent") == "default"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # in a pod: its own, unless one is named
    assert default_namespace() == "pods-own"
    assert default_namespace(path) == "team-a" and default_namespace(path, context="b") == "default"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert Client(kubeconfig=path).namespace == "team-a"
    assert Client(kubeconfig=path, namespace="x").api.configuration.host == "https://127.0.0.1:1"


# --- running locally ----------------------------------------------------------------------------


def test_run_local_runs_the_object_without_a_file(monkeypatch):
    from phalanx.local import run

    seen = {}

    def fake_run_local(job, **kwargs):
        seen["job"], seen["kwargs"] = job, kwargs
        return {"mode": "command"}

    monkeypatch.setattr(run, "run_local", fake_run_local)
    assert phalanx_client.run_local(command_job(nodes=2, namespace="ns"), timeout=5) == {"mode": "command"}
    assert (seen["job"].name, seen["job"].namespace, seen["job"].spec.nodes) == ("j", "ns", 2)
    assert seen["kwargs"]["timeout"] == 5
    seen.clear()
    with pytest.raises(InvalidJob):
        phalanx_client.run_local(command_job(network={"profile": "roce"}))
    assert not seen


def test_run_local_really_runs_a_command_job(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # the processes start the runtime's trampoline
    marker = tmp_path / "ran"
    job = training_job("hello", image="img:1", nodes=2,
                       command=["python3", "-c", f"import os; open('{marker}-' + os.environ['NODE_RANK'], 'w')"])
    summary = phalanx_client.run_local(job, timeout=60)
    assert summary["exit_codes"] == [0, 0] and summary["nodes"] == 2
    assert (tmp_path / "ran-0").exists() and (tmp_path / "ran-1").exists()


def test_the_notebook_examples_offline_cells_run(monkeypatch, capsys):
    """examples/notebook_client.py up to its first cluster cell: build, validate, run locally."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    source = (ROOT / "examples" / "notebook_client.py").read_text()
    offline, marker, _ = source.partition("# %% On the cluster")
    assert marker, "the example's cluster cells start at '# %% On the cluster'"
    exec(compile(offline, "examples/notebook_client.py", "exec"), {"__name__": "notebook"})  # noqa: S102
    out = capsys.readouterr().out
    assert "'procsPerNode'" not in out.splitlines()[0]  # the manifest: only the fields set
    assert "parallelism.data" in out  # the refused job's problem, naming the field
    assert "[0, 0]" in out  # both local processes exited 0
