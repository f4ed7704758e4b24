"""render.pod: one Pod per slot of the gang — rendezvous env, resources, shm, checkpoint volume,
the user's fields, the gang gate."""

from __future__ import annotations

from phalanx import constants
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
