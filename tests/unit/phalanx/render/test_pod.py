"""render.pod: one Pod per slot of the gang — rendezvous env, resources, shm, checkpoint volume,
the user's fields, the gang gate."""

from __future__ import annotations

import copy
import json

import pytest

from phalanx import constants
from phalanx.api.slots import Slot, worker
from phalanx.render.network import NetworkWiring
from phalanx.render.pod import (
    CONTAINER_SECURITY_CONTEXT,
    POD_SECURITY_CONTEXT,
    build_pod,
    build_resources,
    gpu_visibility_env,
    rendezvous_env,
)
from phalanx.validate import parse_job
from tests.conftest import MINIMAL
from tests.unit.phalanx.render.test_job import _env, _render


def test_pod_rendezvous_env_and_identity(job_obj):
    pods = [c for c in _render(job_obj, attempt=3) if c["kind"] == "Pod"]
    for rank, pod in enumerate(pods):
        env = _env(pod)
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "job-node-0.job"
        assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == "29500"
        assert env["WORLD_SIZE"] == "8"
        assert env["NNODES"] == env["PET_NNODES"] == "2"
        assert env["NODE_RANK"] == env["PET_NODE_RANK"] == str(rank)
        assert env["NPROC_PER_NODE"] == env["PET_NPROC_PER_NODE"] == "4"
        assert env["PET_RDZV_ENDPOINT"] == "job-node-0.job:29500"
        assert env["PET_RDZV_ID"] == "team-job-3"
        assert env["PHALANX_CONFIG"] == "/etc/phalanx/config.json"
        assert "PHALANX_CHECKPOINT_DIR" not in env  # no checkpoint volume: nowhere to save checkpoints
        assert env["PYTHONUNBUFFERED"] == "1"
        assert pod["metadata"]["name"] == f"job-node-{rank}-3"
        assert pod["spec"]["hostname"] == f"job-node-{rank}"
        assert pod["spec"]["subdomain"] == "job"
        assert pod["metadata"]["labels"][constants.LABEL_NODE_RANK] == str(rank)
        assert pod["metadata"]["labels"][constants.LABEL_RESTART_ATTEMPT] == "3"
        assert pod["spec"]["restartPolicy"] == "Never"
        assert pod["spec"]["schedulingGates"] == [{"name": constants.GANG_SCHEDULING_GATE}]
        assert pod["spec"]["containers"][0]["command"] == ["phalanx-runtime"]


def test_pod_resources_shm_and_checkpoint_volume(job_obj):
    job_obj["spec"]["resources"] = {"gpus": 8, "cpu": "16", "memory": "64Gi", "extra": {"rdma/ib": 1}}
    job_obj["spec"]["checkpoint"] = {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}, "mountPath": "/ckpt"}
    pod = _render(job_obj)[2]
    res = pod["spec"]["containers"][0]["resources"]
    assert res["requests"] == res["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8", "rdma/ib": "1"}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["dshm"] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}}
    assert vols["checkpoint"] == {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "ckpt"}}
    mounts = {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"/etc/phalanx": "phalanx-config", "/dev/shm": "dshm", "/ckpt": "checkpoint",
                      "/phalanx/scratch": "phalanx-scratch"}
    assert _env(pod)["PHALANX_CHECKPOINT_DIR"] == "/ckpt/team/job"


def test_user_fields_are_carried(job_obj):
    spec = job_obj["spec"]
    spec.update(command=["python", "-m", "mytrain"], args=["--fast"], nodeSelector={"pool": "a100"},
                tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                serviceAccountName="trainer", env=[{"name": "FOO", "value": "bar"}], shmSize="16Gi",
                scheduling={"priorityClassName": "high", "schedulerName": "custom"})
    pod = _render(job_obj)[2]
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["python", "-m", "mytrain"] and c["args"] == ["--fast"]
    assert _env(pod)["FOO"] == "bar"
    assert pod["spec"]["nodeSelector"] == {"pool": "a100"}
    assert pod["spec"]["tolerations"][0]["key"] == "gpu"
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["priorityClassName"] == "high"
    assert pod["spec"]["schedulerName"] == "custom"
    assert {v["name"]: v for v in pod["spec"]["volumes"]}["dshm"]["emptyDir"]["sizeLimit"] == "16Gi"


def parsed(**spec):
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(spec)
    return parse_job(obj)


def env_of(entries):
    return {e["name"]: e.get("value") for e in entries}


@pytest.mark.parametrize("resources,amounts", [
    ({}, {}),  # nothing requested: no resources block at all
    ({"cpu": "500m"}, {"cpu": "500m"}),
    ({"gpus": 2, "memory": "8Gi"}, {"memory": "8Gi", constants.RESOURCE_GPU: "2"}),
    ({"gpus": 0, "extra": {"example.com/fpga": 1}}, {"example.com/fpga": "1"}),
])
def test_requests_equal_limits(resources, amounts):
    built = build_resources(parsed(resources=resources))
    assert built == ({"requests": amounts, "limits": amounts} if amounts else {})
    if amounts:
        assert built["requests"] is not built["limits"]


PS = [{"name": "ps", "replicas": 2, "resources": {"cpu": "4"}}]


@pytest.mark.parametrize("resources,slot,hidden", [
    ({"gpus": 8}, worker(0), False),
    ({"gpus": 8}, Slot("ps", 0), True),  # a CPU role next to GPU workers sees no GPU
    ({"cpu": "4"}, worker(0), True),
    ({"extra": {"nvidia.com/mig-1g.10gb": 1}}, worker(0), False),  # any NVIDIA resource is a GPU
])
def test_pods_without_gpus_see_none(resources, slot, hidden):
    env = env_of(gpu_visibility_env(parsed(resources=resources, roles=PS, command=["train"]), slot))
    assert env == ({constants.ENV_NVIDIA_VISIBLE_DEVICES: constants.NVIDIA_NO_DEVICES} if hidden else {})


def test_a_role_pod_gets_its_role_and_no_torch_rank():
    job = parsed(roles=PS, command=["train"])
    env = env_of(rendezvous_env(job, Slot("ps", 1), 2, 29500))
    assert env[constants.ENV_ROLE] == "ps" and env[constants.ENV_ROLE_INDEX] == "1" and env[constants.ENV_ROLE_REPLICAS] == "2"
    assert env[constants.ENV_ROLES] == "worker=2,ps=2"
    assert env[constants.ENV_SUBDOMAIN] == "job.team.svc"
    assert env["MASTER_ADDR"] == "job-node-0.job" and "NODE_RANK" not in env and "WORLD_SIZE" not in env
    assert constants.ENV_ROLE not in env_of(rendezvous_env(parsed(), 0, 0, 29500))  # no roles: no role env


@pytest.mark.parametrize("mount_path,directory", [("/ckpt", "/ckpt/team/job"), ("/ckpt/", "/ckpt/team/job")])
def test_checkpoint_dir_is_per_job_on_the_volume(mount_path, directory):
    job = parsed(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "c"}}, "mountPath": mount_path})
    assert env_of(rendezvous_env(job, 0, 0, 29500))[constants.ENV_CHECKPOINT_DIR] == directory


@pytest.mark.parametrize("spec_shm,profile_shm,size", [
    (None, None, "3Gi"),  # the operator's default
    (None, "8Gi", "8Gi"),  # the network profile's
    ("16Gi", "8Gi", "16Gi"),  # the job's own wins
])
def test_shm_size(spec_shm, profile_shm, size):
    job = parsed(shmSize=spec_shm) if spec_shm else parsed()
    pod = build_pod(job, 0, 0, NetworkWiring(shm_size=profile_shm), default_shm_size="3Gi")
    assert {v["name"]: v for v in pod["spec"]["volumes"]}[constants.SHM_VOLUME_NAME]["emptyDir"]["sizeLimit"] == size


def test_an_ungated_pod_and_the_operators_defaults():
    pod = build_pod(parsed(), 1, 0, NetworkWiring(), gated=False)
    assert "schedulingGates" not in pod["spec"]
    assert pod["spec"]["automountServiceAccountToken"] is False and "serviceAccountName" not in pod["spec"]
    assert pod["spec"]["enableServiceLinks"] is False
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["phalanx-runtime"] and "args" not in container
    assert "resources" not in container  # MINIMAL requests nothing


def test_the_jobs_env_comes_after_the_operators():
    """Kubernetes keeps the last of a repeated name: the job may point HOME or the caches elsewhere."""
    pod = build_pod(parsed(env=[{"name": "HOME", "value": "/home/me"}]), 0, 0, NetworkWiring())
    homes = [e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "HOME"]
    assert homes == [constants.SCRATCH_MOUNT_PATH, "/home/me"]


def test_pods_share_no_security_context():
    first, second = (build_pod(parsed(), rank, 0, NetworkWiring()) for rank in (0, 1))
    first["spec"]["securityContext"]["runAsUser"] = 0
    first["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"].clear()
    assert second["spec"]["securityContext"]["runAsUser"] == POD_SECURITY_CONTEXT["runAsUser"] == constants.RUNTIME_UID
    assert second["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert CONTAINER_SECURITY_CONTEXT["capabilities"]["drop"] == ["ALL"]


# --- spec.progress: the collector's env on the workers, the log collector around their command ----
COLLECT = ["python3", "-m", constants.COLLECT_MODULE, "--"]
CMD = {"model": None, "command": ["torchrun", "train.py"], "args": ["--lr", "1e-4"]}


def command_job(progress, **spec):
    return parsed(**CMD, progress=progress, **spec)


@pytest.mark.parametrize(("progress", "env"), [
    (None, {}),
    ({"collector": "client"}, {constants.ENV_PROGRESS_COLLECTOR: "client"}),
    ({"collector": "huggingface"}, {constants.ENV_PROGRESS_COLLECTOR: "huggingface"}),
    ({"collector": "regex", "patterns": ["step (?P<step>\\d+)", "loss=(?P<loss>\\S+)"]},
     {constants.ENV_PROGRESS_COLLECTOR: "regex", constants.ENV_PROGRESS_PATTERNS: '["step (?P<step>\\\\d+)", "loss=(?P<loss>\\\\S+)"]'}),
    ({"collector": "jsonl", "file": "/out/metrics.jsonl"},
     {constants.ENV_PROGRESS_COLLECTOR: "jsonl", constants.ENV_PROGRESS_FILE: "/out/metrics.jsonl"}),
])
def test_progress_env_on_every_worker(progress, env):
    job = command_job(progress)
    names = (constants.ENV_PROGRESS_COLLECTOR, constants.ENV_PROGRESS_PATTERNS, constants.ENV_PROGRESS_FILE)
    for rank in (0, 1):
        rendered = env_of(build_pod(job, rank, 0, NetworkWiring())["spec"]["containers"][0]["env"])
        assert {k: v for k, v in rendered.items() if k in names} == env


def test_progress_patterns_env_is_the_json_list_of_the_patterns():
    patterns = ['it (?P<step>\\d+)/(?P<total_steps>\\d+) "q" \u00e9 (?P<eval_acc>[0-9.]+)']
    env = env_of(rendezvous_env(command_job({"collector": "regex", "patterns": patterns}), 0, 0, 29500))
    assert json.loads(env[constants.ENV_PROGRESS_PATTERNS]) == patterns


@pytest.mark.parametrize(("progress", "slot", "command"), [
    (None, worker(0), ["torchrun", "train.py"]),
    ({"collector": "client"}, worker(0), ["torchrun", "train.py"]),  # the script reports itself
    ({"collector": "huggingface"}, worker(0), [*COLLECT, "torchrun", "train.py"]),
    ({"collector": "lightning"}, worker(1), [*COLLECT, "torchrun", "train.py"]),  # every worker: node 0 reads
    ({"collector": "jsonl", "file": "/m.jsonl"}, worker(0), [*COLLECT, "torchrun", "train.py"]),
    ({"collector": "regex", "patterns": ["(?P<step>\\d+)"]}, Slot("ps", 0), ["torchrun", "train.py"]),  # roles keep theirs
])
def test_log_collector_wraps_the_workers_command_args_unchanged(progress, slot, command):
    job = command_job(progress, roles=[{"name": "ps"}])
    container = build_pod(job, slot, 0, NetworkWiring())["spec"]["containers"][0]
    assert container["command"] == command and container["args"] == ["--lr", "1e-4"]


def test_progress_env_is_for_workers_only():
    job = command_job({"collector": "huggingface"}, roles=[{"name": "ps", "command": ["ps-server"]}])
    role = build_pod(job, Slot("ps", 0), 0, NetworkWiring())["spec"]["containers"][0]
    assert constants.ENV_PROGRESS_COLLECTOR not in env_of(role["env"]) and role["command"] == ["ps-server"]


def test_the_collector_stays_outermost_around_a_framework_launcher():
    launcher = ["python", "-m", "phalanx_runtime.horovod_launch", "--", "python", "train.py"]
    job = parsed(model=None, command=launcher, framework="horovod", progress={"collector": "client"})
    assert build_pod(job, 0, 0, NetworkWiring())["spec"]["containers"][0]["command"] == launcher
    job = parsed(model=None, command=launcher, framework="horovod", progress={"collector": "regex", "patterns": ["(?P<loss>\\S+)"]})
    assert build_pod(job, 0, 0, NetworkWiring())["spec"]["containers"][0]["command"] == [*COLLECT, *launcher]


@pytest.mark.parametrize(("policy", "codes"), [
    pytest.param({}, [constants.EXIT_RESTART_IN_PLACE], id="the-runtimes-code"),
    pytest.param({"retryableExitCodes": [3, 1]}, [1, 3, constants.EXIT_RESTART_IN_PLACE], id="and-the-retryable-ones"),
    # an OOM kill or a deletion's SIGTERM is not cured on the same node: the pod fails, the gang is recreated
    pytest.param({"retryableExitCodes": [3, 137, 143]}, [3, constants.EXIT_RESTART_IN_PLACE], id="never-signals"),
])
def test_in_place_pods_carry_the_restart_rule_and_the_request_file(policy, codes):
    pod = build_pod(parsed(failurePolicy=policy), 0, 0, NetworkWiring(), in_place=True)
    container = pod["spec"]["containers"][0]
    assert pod["spec"]["restartPolicy"] == "Never" and container["restartPolicy"] == "Never"
    assert container["restartPolicyRules"] == [{"action": "RestartAllContainers",
                                                "exitCodes": {"operator": "In", "values": codes}}]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == constants.VOLUME_PODINFO)
    assert volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"] == \
        f"metadata.annotations['{constants.ANNOTATION_RESTART_REQUEST}']"
    path = env_of(container["env"])[constants.ENV_RESTART_REQUEST_FILE]
    mount = next(m for m in container["volumeMounts"] if m["name"] == constants.VOLUME_PODINFO)
    assert path == f"{mount['mountPath']}/{constants.RESTART_REQUEST_FILE}" and mount["readOnly"] is True
    # the kubelet restarts at once: the launcher waits the job's backoff itself
    env = env_of(container["env"])
    assert (env[constants.ENV_RESTART_BACKOFF_SECONDS], env[constants.ENV_RESTART_MAX_BACKOFF_SECONDS]) == ("10", "300")


@pytest.mark.parametrize(("policy", "in_place"), [
    pytest.param({}, False, id="not-in-place"),
    pytest.param({"permanentExitCodes": [constants.EXIT_RESTART_IN_PLACE]}, True, id="every-in-place-code-permanent"),
])
def test_pods_restart_by_recreation_unless_in_place(policy, in_place):
    container = build_pod(parsed(failurePolicy=policy), 0, 0, NetworkWiring(), in_place=in_place)["spec"]["containers"][0]
    assert "restartPolicyRules" not in container and "restartPolicy" not in container
    assert constants.ENV_RESTART_REQUEST_FILE not in env_of(container["env"])
