"""The TrainingJob model: what a spec derives (world, data-parallel degree, gang, success roles),
the spec's cross-field rules not tested through validate, and the owner reference of children."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from phalanx import constants
from phalanx.api.rules import broken, broken_rules
from phalanx.api.types import (
    PARAMETER_SERVER_RULES,
    SPEC_RULES,
    TERMINAL_PHASES,
    ModelOverrides,
    Phase,
    TrainingJob,
    TrainingJobSpec,
)

RUNTIME = {"image": "img:1", "model": {"preset": "debug"}}
COMMAND = {"image": "img:1", "command": ["python", "train.py"]}


def spec(base=RUNTIME, **fields) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({**base, **fields})


@pytest.mark.parametrize(("fields", "world", "data"), [
    ({}, 1, 1),
    ({"nodes": 4, "procsPerNode": 8}, 32, 32),
    ({"nodes": 4, "procsPerNode": 8, "parallelism": {"tensor": 4, "pipeline": 2}}, 32, 4),
    ({"nodes": 4, "procsPerNode": 8, "parallelism": {"data": 2, "tensor": 4, "pipeline": 4}}, 32, 2),  # as given
    ({"nodes": 2, "procsPerNode": 4, "parallelism": {"parameterServer": {"servers": 3}}}, 8, 5),  # the workers
])
def test_world_size_and_data_degree(fields, world, data):
    job_spec = spec(**fields)
    assert (job_spec.world_size, job_spec.data_degree) == (world, data)


@pytest.mark.parametrize(("fields", "gang", "success"), [
    ({"nodes": 3}, 3, ("worker",)),
    ({"nodes": 2, "roles": [{"name": "ps", "replicas": 2}, {"name": "chief"}]}, 5, ("worker", "ps", "chief")),
    ({"roles": [{"name": "ps"}], "successPolicy": {"roles": ["ps"]}}, 2, ("ps",)),  # successPolicy's, as given
    ({"framework": "tensorflow", "roles": [{"name": "chief"}, {"name": "ps"}]}, 3, ("chief",)),
    ({"framework": "tensorflow", "roles": [{"name": "chief"}], "successPolicy": {"roles": ["worker", "chief"]}},
     2, ("worker", "chief")),
])
def test_gang_size_and_success_roles(fields, gang, success):
    job_spec = spec(COMMAND, **fields)
    assert (job_spec.gang_size, job_spec.success_roles) == (gang, success)


def test_uses_runtime_means_spec_model():
    assert spec().uses_runtime and not spec(COMMAND).uses_runtime


@pytest.mark.parametrize(("field", "items", "words"), [
    ("env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "duplicate env name 'A'"),
    ("roles", [{"name": "ps"}, {"name": "ps"}], "duplicate role name 'ps'"),
    ("volumes", [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}], "duplicate volume name 'v'"),
    ("volumeMounts", [{"name": "a", "mountPath": "/d"}, {"name": "b", "mountPath": "/d"}], "duplicate mountPath '/d'"),
])
def test_list_map_keys_are_unique(field, items, words):
    with pytest.raises(ValidationError, match=words):
        spec(COMMAND, **{field: items})


PVC = {"persistentVolumeClaim": {"claimName": "c"}}


@pytest.mark.parametrize(("fields", "broken_fields"), [
    ({}, []),
    ({"checkpoint": {"volume": {"emptyDir": {}}}}, []),  # one node: its own disk will do
    ({"nodes": 2, "checkpoint": {"volume": PVC}}, []),
    ({"nodes": 2, "checkpoint": {"volume": {"emptyDir": {}}}}, [".checkpoint.volume"]),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}, "checkpoint": {"volume": {"hostPath": {"path": "/c"}}}},
     [".checkpoint.volume"]),  # may grow to two nodes
    ({"volumes": [{"name": "v", "emptyDir": {}}], "volumeMounts": [{"name": "v", "mountPath": "/d"}]}, []),
    ({"volumeMounts": [{"name": "v", "mountPath": "/d"}]}, [".volumeMounts"]),
    ({"checkpoint": {"volume": PVC}, "volumes": [{"name": "v", "emptyDir": {}}],
      "volumeMounts": [{"name": "v", "mountPath": "/checkpoints"}]}, [".volumeMounts"]),
    ({"nodeSelector": {"example.com/pool": "gpu"}}, []),
    ({"nodeSelector": {"Bad Key": "x"}}, [".nodeSelector"]),
    ({"failurePolicy": {"hangTimeoutSeconds": 60}}, []),
])
def test_spec_rules(fields, broken_fields):
    assert [field for field, _, _ in broken(SPEC_RULES, spec(**fields), "")] == broken_fields


@pytest.mark.parametrize(("fields", "broken_fields"), [
    ({"nodes": 2, "parallelism": {"parameterServer": {"servers": 1}}}, []),
    ({"parallelism": {"parameterServer": {"servers": 1}}}, [".parallelism.parameterServer.servers"]),  # no worker left
    ({"nodes": 2, "parallelism": {"parameterServer": {}, "zero": 1}}, [".parallelism.zero"]),
    ({"nodes": 2, "parallelism": {"parameterServer": {}, "data": 1}}, [".parallelism.data"]),
    ({"nodes": 2, "parallelism": {"parameterServer": {}}, "training": {"gradCompression": "bf16"}},
     [".training.gradCompression"]),
    ({"nodes": 2, "parallelism": {"zero": 1}}, []),  # no parameter servers: not these rules' business
])
def test_parameter_server_rules(fields, broken_fields):
    assert [field for field, _, _ in broken(PARAMETER_SERVER_RULES, spec(**fields), "")] == broken_fields


def test_staleness_applies_to_async_only():
    sync = spec(nodes=2, parallelism={"parameterServer": {"staleness": 2}})
    assert [field for field, _, _ in broken_rules(sync, "spec")] == ["spec.parallelism.parameterServer.staleness"]
    assert list(broken_rules(spec(nodes=2, parallelism={"parameterServer": {"mode": "async", "staleness": 2}}), "spec")) == []


def test_model_overrides_as_camel_case_keys_of_the_set_ones():
    assert ModelOverrides(n_heads=4, max_seq_len=64).as_dict() == {"nHeads": 4, "maxSeqLen": 64}
    assert ModelOverrides().as_dict() == {}


def test_terminal_phases():
    assert TERMINAL_PHASES == {Phase.SUCCEEDED, Phase.FAILED}


def job(**metadata) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "train", **metadata}, "spec": RUNTIME})


def test_children_are_owned_by_the_job_only_once_it_has_a_uid():
    assert job().owner_references() == []
    assert job(uid="").owner_references() == []
    assert job(uid="u-1").owner_references() == [{
        "apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "train", "uid": "u-1",
        "controller": True, "blockOwnerDeletion": True}]


def test_a_job_reads_its_wire_form():
    read = job()
    assert (read.api_version, read.kind, read.metadata.namespace, read.status) == (constants.API_VERSION, "TrainingJob", "default", None)
    assert TrainingJob.model_validate({"metadata": {"name": "x"}, "spec": RUNTIME, "extra": 1}).metadata.name == "x"
