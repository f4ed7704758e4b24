"""Bad input, class by class: each is refused naming the field and the rule, nothing
crashes, and a command job (the user's own script) is held only to the rules its pods need."""

from __future__ import annotations

import copy

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.cli import main
from phalanx.validate import validate_job
from tests.conftest import MINIMAL

COMMAND_JOB = {
    "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "torchrun", "namespace": "team"},
    "spec": {"image": "ghcr.io/acme/train:1.0", "nodes": 2, "procsPerNode": 8,
             "command": ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"],
             "resources": {"gpus": 8}},
}


def problems(obj):
    return [str(p) for p in validate_job(obj)[1]]


def spec_with(base=MINIMAL, **spec):
    obj = copy.deepcopy(base)
    obj["spec"].update(spec)
    return obj


def refused(obj, field, words):
    found = problems(obj)
    assert any(p.startswith(field + ":") and words in p for p in found), found


# --- Command jobs are the user's --------------------------------------------------------------


def test_plain_torchrun_job_is_valid():
    assert problems(copy.deepcopy(COMMAND_JOB)) == []


@pytest.mark.parametrize("parallelism", [{"tensor": 8}, {"tensor": 3}, {"zero": 0, "tensor": 8, "pipeline": 2},
                                          {"replicate": 4}, {"pipeline": 4, "microbatches": 1}])
def test_runtime_layout_rules_do_not_apply_to_command_jobs(parallelism):
    obj = spec_with(COMMAND_JOB, parallelism=parallelism, training={"globalBatchSize": 3})
    assert problems(obj) == []


def test_runtime_rules_still_apply_when_the_command_wraps_the_runtime():
    obj = spec_with(COMMAND_JOB, model={"preset": "debug"}, training={"globalBatchSize": 3})
    refused(obj, "spec.training.globalBatchSize", "not divisible by the data-parallel degree 16")


# --- Model overrides: typed and bounded, never a crash ------------------------------------------


@pytest.mark.parametrize(("overrides", "field"), [
    ({"nHeads": 0}, "spec.model.overrides.nHeads"), ({"nKvHeads": 0}, "spec.model.overrides.nKvHeads"),
    ({"dim": -64}, "spec.model.overrides.dim"), ({"dim": "64"}, "spec.model.overrides.dim"),
    ({"normEps": 0}, "spec.model.overrides.normEps"), ({"tieEmbeddings": "yes"}, "spec.model.overrides.tieEmbeddings"),
])
def test_bad_overrides_refused(overrides, field):
    refused(spec_with(model={"preset": "debug", "overrides": overrides}), field, "")


def test_odd_head_dim_refused():
    refused(spec_with(model={"preset": "debug", "overrides": {"dim": 12, "nHeads": 4, "nKvHeads": 2}}),
            "spec.model", "head dimension 3")


# --- Everything a pod needs, refused up front ---------------------------------------------------


@pytest.mark.parametrize(("resources", "field", "words"), [
    ({"memory": "lots"}, "spec.resources.memory", "must be a non-negative quantity"),
    ({"cpu": "-1"}, "spec.resources.cpu", "non-negative quantity"),
    ({"cpu": -1}, "spec.resources.cpu", "non-negative quantity"),
    ({"memory": "64GB"}, "spec.resources.memory", "64GB is not one"),
    ({"extra": {"bad name": 1}}, "spec.resources.extra", "extended resources"),
    ({"extra": {"nvidia.com/gpu": 1}}, "spec.resources.extra", "resources.gpus"),
    ({"extra": {"rdma/hca": "0.5"}}, "spec.resources.extra[rdma/hca]", "whole numbers"),
])
def test_bad_resources(resources, field, words):
    refused(spec_with(resources=resources), field, words)


def test_bad_shm_size():
    refused(spec_with(shmSize="a lot"), "spec.shmSize", "quantity")


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"env": [{"value": "x"}]}, "spec.env[0].name", "Field required"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "spec.env", "duplicate env name 'A'"),
    ({"env": [{"name": "PHALANX_CONFIG", "value": "/x"}]}, "spec.env[0].name", "cannot be overridden"),
    ({"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}, "spec.env[0].valueFrom", "not both"),
    ({"env": [{"name": "1 A", "value": "1"}]}, "spec.env[0].name", "environment variable name"),
    ({"volumes": [{"name": "dshm", "emptyDir": {}}]}, "spec.volumes[0].name", "operator's own"),
    ({"volumes": [{"name": "checkpoint", "emptyDir": {}}]}, "spec.volumes[0].name", "operator's own"),
    ({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]}, "spec.volumes", "duplicate volume name 'a'"),
    ({"volumes": [{"name": "a"}]}, "spec.volumes[0]", "exactly one volume source"),
    ({"volumes": [{"name": "a", "emptyDir": {}, "hostPath": {"path": "/x"}}]}, "spec.volumes[0]", "exactly one volume source"),
    ({"volumes": [{"name": "a", "bogusSource": {}}]}, "spec.volumes[0].bogusSource", "unknown field"),
    ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "/dev/shm"}]},
     "spec.volumeMounts[0].mountPath", "mounted by the operator"),
    ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "/etc/phalanx/x"}]},
     "spec.volumeMounts[0].mountPath", "mounted by the operator"),
    ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "relative"}]},
     "spec.volumeMounts[0].mountPath", "absolute path"),
    ({"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "a", "mountPath": "/data/../etc"}]},
     "spec.volumeMounts[0].mountPath", "absolute path"),
    ({"volumeMounts": [{"name": "missing", "mountPath": "/data"}]}, "spec.volumeMounts", "must name a volume of spec.volumes"),
    ({"volumes": [{"name": "a", "emptyDir": {}}],
      "volumeMounts": [{"name": "a", "mountPath": "/d"}, {"name": "a", "mountPath": "/d"}]}, "spec.volumeMounts", "duplicate mountPath '/d'"),
    ({"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}}, "volumes": [{"name": "a", "emptyDir": {}}],
      "volumeMounts": [{"name": "a", "mountPath": "/checkpoints"}]}, "spec.volumeMounts", "checkpoint.mountPath"),
    ({"checkpoint": {"mountPath": "/dev/shm/ckpt"}}, "spec.checkpoint.mountPath", "mounted by the operator"),
    ({"serviceAccountName": "Not_Valid"}, "spec.serviceAccountName", "DNS-1123 subdomain"),
    ({"image": "my image:latest"}, "spec.image", "no spaces"),
    ({"image": " phalanx/runtime"}, "spec.image", "image reference"),
    ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "spec.tolerations[0].operator", "without a key"),
    ({"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "spec.tolerations[0].value", "must be empty"),
    ({"tolerations": [{"key": "a", "operator": "Sometimes"}]}, "spec.tolerations[0].operator", "Input should be"),
    ({"nodeSelector": {"bad key!": "x"}}, "spec.nodeSelector", "label keys"),
    ({"nodeSelector": {"zone": "-bad-"}}, "spec.nodeSelector.zone", "must be a label value"),
    ({"scheduling": {"priorityClassName": "High Priority"}}, "spec.scheduling.priorityClassName", "DNS-1123"),
    ({"network": {"ncclEnv": {"PHALANX_X": "1"}}}, "spec.network.ncclEnv", "not PHALANX_"),
    ({"command": []}, "spec.command", "at least 1 item"),
    ({"failurePolicy": {"retryableExitCodes": [300]}}, "spec.failurePolicy.retryableExitCodes[0]", "less than or equal to 255"),
])
def test_pod_level_input_refused(spec, field, words):
    refused(spec_with(**spec), field, words)


def test_args_too_large_for_the_config_map():
    """1 MiB of args: over the operator's spec-size limit by default; with the limit raised,
    still refused for the ConfigMap it would need."""
    big = spec_with(args=["x" * 4096] * 256)
    refused(big, "spec", "limits.maxSpecBytes")
    config = OperatorConfig(limits={"maxSpecBytes": 3 << 20})
    assert any(str(p).startswith("spec:") and "a ConfigMap holds at most" in str(p) for p in validate_job(big, config)[1])


def test_a_spec_nested_past_any_field_is_refused_before_it_is_parsed():
    deep: dict = {}
    for _ in range(50):
        deep = {"a": deep}
    (problem,) = problems(spec_with(volumes=[{"name": "v", "emptyDir": deep}]))
    assert problem.startswith("spec.volumes[0].emptyDir.a.a") and "nested deeper than 32 levels" in problem


# --- The API server's verdict, offline ---------------------------------------------------------


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"nodes": "4"}, "spec.nodes", "valid integer"),
    ({"suspend": "false"}, "spec.suspend", "valid boolean"),
    ({"procs_per_node": 4}, "spec.procs_per_node", "did you mean procsPerNode"),
    ({"training": {"weightDecay": float("inf")}}, "spec.training.weightDecay", "NaN and infinities"),
    ({"training": {"lr": float("nan")}}, "spec.training.lr", "NaN and infinities"),
    ({"data": {"source": "tokens"}}, "spec.data.path", "required when source is tokens"),
])
def test_strict_like_the_api_server(change, field, words):
    refused(spec_with(**change), field, words)


def test_nulls_are_pruned_as_the_api_server_prunes_them():
    assert problems(spec_with(shmSize=None, elastic=None)) == []


def test_whole_floats_are_refused_for_integers():
    assert problems(spec_with(nodes=2.0)) == ["spec.nodes: must be an integer, not 2.0 (write 2)"]


@pytest.mark.parametrize(("top", "field", "words"), [
    ({"apiVersion": "phalanx.dev/v1"}, "apiVersion", "expected phalanx.dev/v1alpha1, got 'phalanx.dev/v1'"),
    ({"kind": "TraningJob"}, "kind", "expected TrainingJob, got 'TraningJob'"),
    ({"metadata": {"name": "job\n"}}, "metadata.name", "DNS-1035"),
    ({"metadata": {"name": "Job"}}, "metadata.name", "DNS-1035"),
    ({"metadata": ["job"]}, "metadata", "is required"),
    ({"spec": "nodes: 2"}, "spec", "is required"),
])
def test_identity(top, field, words):
    obj = copy.deepcopy(MINIMAL)
    obj.update(top)
    refused(obj, field, words)


def test_generate_name_is_accepted():
    obj = copy.deepcopy(MINIMAL)
    obj["metadata"] = {"generateName": "sweep-"}
    assert problems(obj) == []


# --- Multi-node checkpoints need shared storage ------------------------------------------------


EPHEMERAL = {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}


@pytest.mark.parametrize("source", [{"emptyDir": {}}, {"hostPath": {"path": "/ckpt"}}, {"ephemeral": EPHEMERAL}])
def test_per_node_checkpoint_volume_refused_for_multi_node(source):
    refused(spec_with(checkpoint={"volume": source}), "spec.checkpoint.volume", "lost on a gang restart")


def test_per_node_checkpoint_volume_fine_on_one_node_and_shared_volume_fine_on_many():
    assert problems(spec_with(nodes=1, procsPerNode=8, checkpoint={"volume": {"emptyDir": {}}})) == []
    assert problems(spec_with(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}, "intervalSteps": 5})) == []


def test_elastic_job_counts_as_multi_node():
    obj = spec_with(nodes=1, procsPerNode=8, elastic={"minNodes": 1, "maxNodes": 2}, checkpoint={"volume": {"emptyDir": {}}})
    refused(obj, "spec.checkpoint.volume", "lost on a gang restart")


# --- The CLI never shows a traceback ------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "kind: TrainingJob\napiVersion: phalanx.dev/v1alpha1\nmetadata: [x]\nspec: {}\n",
    "kind: TrainingJob\napiVersion: phalanx.dev/v1alpha1\nmetadata: {name: a}\nspec: {image: x, model: {preset: debug, overrides: {nHeads: 0}}}\n",
    "kind: TrainingJob\napiVersion: phalanx.dev/v1alpha1\nmetadata: {name: a}\nspec: {image: x, nodes: .inf, 3: x}\n",
    "kind: TrainingJob\napiVersion: phalanx.dev/v1alpha1\nmetadata: {name: a, name: b}\nspec: {image: x}\n",
    "- just\n- a list\n",
    "kind: TrainingJob\n\tbad: yaml\n",
])
def test_cli_validate_never_crashes(tmp_path, capsys, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert code in (1, 2), out
    assert "Traceback" not in out.err + out.out


def test_cli_names_the_kind_it_found(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: v1\nkind: TraningJob\nmetadata: {name: a}\n")
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert "found kind TraningJob" in err and "kind: TrainingJob" in err


def test_cli_local_gives_the_same_verdict_before_starting_anything(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text("apiVersion: phalanx.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: a}\n"
                    "spec: {image: x, nodes: '2', procs_per_node: 2, model: {preset: debug}}\n")
    assert main(["local", str(path)]) == 1
    err = capsys.readouterr().err
    assert "spec.nodes: Input should be a valid integer" in err and "did you mean procsPerNode" in err
