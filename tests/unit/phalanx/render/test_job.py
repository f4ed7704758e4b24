"""Render: job → Service, ConfigMap, Pods, field by field."""

from __future__ import annotations

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


@pytest.mark.parametrize(("config", "rules"), [
    pytest.param(OperatorConfig(), False, id="not-discovered"),
    pytest.param(OperatorConfig().with_restart_all_containers(True), True, id="discovered"),
    pytest.param(OperatorConfig(restart_in_place=False).with_restart_all_containers(True), False, id="turned-off"),
    pytest.param(OperatorConfig().with_restart_all_containers(False), False, id="not-supported"),
])
def test_pods_restart_in_place_when_the_cluster_can_and_the_operator_may(job_obj, config, rules):
    pods = [c for c in _render(job_obj, config=config) if c["kind"] == "Pod"]
    assert pods and all(("restartPolicyRules" in p["spec"]["containers"][0]) is rules for p in pods)
