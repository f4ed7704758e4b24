"""Render: job → Service, ConfigMap, Pods, field by field."""

from __future__ import annotations

import json

import pytest

from phalanx import constants
from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.render import render_children
from phalanx.validate import parse_job
from tests.conftest import example_jobs


def _render(obj, attempt=0, config=None):
    return render_children(parse_job(obj), config, attempt)


def _env(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_children_kinds_names_and_owners(job_obj):
    children = _render(job_obj)
    assert [c["kind"] for c in children] == ["Service", "ConfigMap", "Pod", "Pod", "NetworkPolicy"]
    assert [c["metadata"]["name"] for c in children] == ["job", "job-config", "job-node-0-0", "job-node-1-0", "job-gang"]
    for child in children:
        owner = child["metadata"]["ownerReferences"]
        assert owner == [{"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "name": "job", "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]
        assert child["metadata"]["namespace"] == "team"
        assert child["metadata"]["labels"][constants.LABEL_JOB_NAME] == "job"
        assert len(child["metadata"]["annotations"][constants.ANNOTATION_SPEC_HASH]) == 16


def test_headless_service(job_obj):
    svc = _render(job_obj)[0]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {constants.LABEL_JOB_NAME: "job", constants.LABEL_COMPONENT: "worker"}
    assert svc["spec"]["ports"][0]["port"] == 29500


def test_config_map_holds_resolved_spec(job_obj):
    cm = _render(job_obj)[1]
    cfg = json.loads(cm["data"]["config.json"])
    assert cfg["metadata"] == {"name": "job", "namespace": "team"}
    assert cfg["spec"]["parallelism"]["zero"] == 0  # defaults filled in
    assert cfg["spec"]["training"]["globalBatchSize"] == 8


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


def test_network_profile_is_applied(job_obj):
    config = OperatorConfig(network_profiles={"default": NetworkProfile(fabric="infiniband", hcas=["mlx5_0:1", "mlx5_1:1"], rdma_resource="rdma/rdma_shared_device_a", ipc_lock=True)})
    pod = _render(job_obj, config=config)[2]
    assert _env(pod)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["rdma/rdma_shared_device_a"] in (1, "1")
    assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]


def test_render_is_deterministic(job_obj):
    assert _render(job_obj) == _render(job_obj)


@pytest.mark.parametrize("path", example_jobs(), ids=lambda p: p.name)
def test_cli_renders_each_example(path, capsys):
    from phalanx.cli import main

    assert main(["render", str(path)]) == 0
    out = capsys.readouterr().out
    assert "kind: Service" in out and "kind: Pod" in out


def test_cli_refuses_invalid_job(tmp_path, capsys):
    from phalanx.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: phalanx.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: bad}\nspec: {image: x, nodes: 2, procsPerNode: 3, parallelism: {tensor: 2}, model: {preset: debug}}\n")
    assert main(["render", str(bad)]) == 1
    err = capsys.readouterr()
    assert err.out == ""
    assert "spec.parallelism.tensor: tensor 2 must divide procsPerNode 3 (a tensor-parallel group may not straddle nodes)" in err.err


def test_network_policy_admits_the_gang_the_operator_and_the_scraper(job_obj):
    from phalanx.api.config import NetworkPolicyConfig

    config = OperatorConfig(network_policy=NetworkPolicyConfig(
        operator_namespace_labels={"kubernetes.io/metadata.name": "phalanx-system"},
        scraper_namespace_labels={"kubernetes.io/metadata.name": "monitoring"}, scraper_pod_labels={"app": "prometheus"}))
    policy = next(c for c in _render(job_obj, config=config) if c["kind"] == "NetworkPolicy")
    gang = {"matchLabels": {constants.LABEL_JOB_NAME: "job"}}
    assert policy["spec"]["podSelector"] == gang and policy["spec"]["policyTypes"] == ["Ingress"]
    own, operator, scraper = policy["spec"]["ingress"]
    assert own == {"from": [{"podSelector": gang}]}  # every port: rendezvous and the collectives' own
    assert operator["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "phalanx-system"}},
                                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "phalanx-operator"}}}]
    assert [p["port"] for p in operator["ports"]] == ["progress", "metrics"]
    assert [p["port"] for p in scraper["ports"]] == ["metrics"]
    pod = next(c for c in _render(job_obj, config=config) if c["kind"] == "Pod")
    assert {"progress", "metrics"} <= {p["name"] for p in pod["spec"]["containers"][0]["ports"]}


def test_network_policy_can_be_turned_off(job_obj):
    from phalanx.api.config import NetworkPolicyConfig

    config = OperatorConfig(network_policy=NetworkPolicyConfig(enabled=False))
    assert "NetworkPolicy" not in [c["kind"] for c in _render(job_obj, config=config)]


def _containers_of(value, seen):
    """ids of every dict and list inside ``value``."""
    if isinstance(value, (dict, list)):
        seen.add(id(value))
        for v in value.values() if isinstance(value, dict) else value:
            _containers_of(v, seen)
    return seen


@pytest.mark.parametrize("path", example_jobs(), ids=lambda p: p.name)
def test_rendered_pods_share_no_mutable_part(path):
    """Pods are built and merged in place (no copy per pod): no dict or list may be shared between
    two pods, or with the job's spec, or the next render (a pin on one pod would show on others)."""
    import yaml

    obj = next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "TrainingJob")
    obj.setdefault("metadata", {}).setdefault("namespace", "team")
    profile = NetworkProfile(fabric="roce", socket_ifname="eth0", rdma_resource="rdma/roce", multus_networks="d/b",
                             ipc_lock=True, allow_host_network=True, shm_size="32Gi",
                             topo_file={"path": "/t/topo.xml", "hostPath": "/h/topo.xml"})
    config = OperatorConfig(network_profiles={"default": profile})
    job = parse_job(obj)
    first, second = render_children(job, config), render_children(job, config)
    pods = [c for c in first + second if c["kind"] == "Pod"]
    owners: dict[int, str] = {}
    for i, pod in enumerate(pods):
        for part in _containers_of(pod, set()):
            assert owners.setdefault(part, f"pod {i}") == f"pod {i}", f"pod {i} shares a part with {owners[part]}"
