"""The core/v1 types inside a TrainingJob (VolumeSource and EnvVarSource members) carry the
Kubernetes API's own schemas: nothing free-form is left in either CRD, the data file
is what hack/kube_schemas.py makes of the pinned Kubernetes, and `phalanx validate` refuses what
the API server refuses there (unknown fields, nesting, types, required fields, quantities)."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from phalanx.api.crd import build_crd
from phalanx.api.kubeschemas import member_schema, schemas
from phalanx.api.kubetypes import VOLUME_SOURCES
from phalanx.api.sweep import build_sweep_crd
from phalanx.cli import main
from phalanx.sweep.check import check_sweep
from phalanx.validate import MAX_DEPTH, InvalidJob, parse_job, validate_job
from tests.conftest import MINIMAL

ROOT = Path(__file__).resolve().parents[4]
ENV_SOURCES = ("configMapKeyRef", "fieldRef", "fileKeyRef", "resourceFieldRef", "secretKeyRef")
# Every common volume kind, as users write them: accepted unchanged.
COMMON = {
    "persistentVolumeClaim": {"claimName": "data", "readOnly": True},
    "configMap": {"name": "cfg", "items": [{"key": "a", "path": "a.txt", "mode": 0o444}], "defaultMode": 0o644},
    "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"},
    "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"app": "train"}, "annotations": {"note": "scratch"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "resources": {"requests": {"storage": "10Gi"}, "limits": {"storage": 20 * 2**30}}}}},
    "projected": {"sources": [{"configMap": {"name": "cfg"}},
                              {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]},
    "csi": {"driver": "csi.example.com", "volumeAttributes": {"bucket": "ckpt", "region": "eu"}},
    "nfs": {"server": "nfs.example.com", "path": "/export", "readOnly": False},
}


def deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


def job_with(**spec) -> dict:
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(spec)
    return obj


def api_problems(obj) -> list[str]:
    return [str(p) for p in validate_job(obj)[1] if p.source == "api"]


def _walk(node, path=""):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, f"{path}/{i}")


# --- (a) nothing free-form in the CRDs --------------------------------------------------------


@pytest.mark.parametrize("crd", [build_crd, build_sweep_crd], ids=["trainingjob", "trainingsweep"])
def test_no_free_form_node_but_the_bounded_scalars(crd):
    free = [(p, n) for p, n in _walk(crd()) if n.get("x-kubernetes-preserve-unknown-fields")]
    for path, node in free:  # a sweep's "any scalar" values: no object or list can be stored
        assert path.endswith(("/values/items", "/trials/items/additionalProperties", "/parameters/additionalProperties")), path
        assert node["maxProperties"] == 0 and node["maxItems"] == 0 and node["not"] == {"enum": [{}, []]}, path
    assert len(free) == (4 if crd is build_sweep_crd else 0)


@pytest.mark.parametrize("crd", [build_crd, build_sweep_crd], ids=["trainingjob", "trainingsweep"])
def test_every_volume_and_env_source_has_its_kubernetes_schema(crd):
    volumes = [n for p, n in _walk(crd()) if p.endswith("/volumes/items") or p.endswith("/checkpoint/properties/volume")]
    envs = [n for p, n in _walk(crd()) if p.endswith("/valueFrom")]
    assert volumes and envs
    for node in volumes:
        for member in VOLUME_SOURCES:
            assert node["properties"][member]["properties"] == member_schema("volumeSources", member)["properties"]
    for node in envs:
        assert sorted(node["properties"]) == list(ENV_SOURCES)


def test_the_schemas_are_structural_and_small():
    assert sorted(schemas()["volumeSources"]) == sorted(VOLUME_SOURCES)
    assert sorted(schemas()["envVarSources"]) == list(ENV_SOURCES)
    for path, node in _walk(schemas()["volumeSources"] | schemas()["envVarSources"]):
        if path.count("/") < 1 or path.endswith("/properties"):
            continue  # the members' map, a properties map
        assert not {"$ref", "allOf", "anyOf", "oneOf", "description", "default"} & set(node), path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), path
        if node.get("type") == "object":
            assert "properties" in node or "additionalProperties" in node, f"{path}: free-form"
    meta = member_schema("volumeSources", "ephemeral")["properties"]["volumeClaimTemplate"]["properties"]["metadata"]
    assert sorted(meta["properties"]) == ["annotations", "labels"]


def test_crd_sizes_fit_a_client_side_apply():
    for crd in (build_crd(), build_sweep_crd()):  # kubectl's last-applied annotation: 256 KiB in all
        assert len(json.dumps(crd, separators=(",", ":"))) < 160 * 1024


# --- (b) the data file is the generator's output ----------------------------------------------


def _generator():
    spec = importlib.util.spec_from_file_location("kube_schemas_gen", ROOT / "hack" / "kube_schemas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.built_last
@pytest.mark.usefixtures("cluster_build")
def test_data_file_is_what_the_generator_makes_of_the_pinned_kubernetes():
    gen = _generator()
    version = gen.module_version()
    source = gen.spec_path(version)
    if not source.is_file():
        pytest.skip(f"{source} is not in the Go module cache (cd hack/cluster && go mod download k8s.io/kubernetes)")
    assert schemas()["kubernetes"] == version
    assert gen.OUTPUT.read_text() == gen.expected_text(version), "stale: run python3 hack/kube_schemas.py"


def test_generator_refuses_a_free_form_object():
    gen = _generator()
    openapi = {"components": {"schemas": {"io.k8s.api.core.v1.Volume": {"properties": {
        "name": {"type": "string"}, "emptyDir": {"type": "object"}}}, "io.k8s.api.core.v1.EnvVarSource": {"properties": {}}}}}
    with pytest.raises(ValueError, match="emptyDir: a free-form object"):
        gen.generate(openapi, "v0")


# --- (c) phalanx validate refuses what the API server refuses -----------------------------------


@pytest.mark.parametrize("levels", [3, 1000, 10_000])
def test_deep_object_under_empty_dir_is_refused_naming_the_field(levels):
    found = validate_job(job_with(volumes=[{"name": "d", "emptyDir": deep(levels)}]))[1]
    assert found and all(p.field.startswith("spec.volumes[0].emptyDir.a") for p in found), found


@pytest.mark.parametrize("levels", [3, 10_000])
def test_the_schema_names_the_unknown_field_at_any_depth(levels):
    with pytest.raises(InvalidJob) as err:
        parse_job(job_with(volumes=[{"name": "d", "emptyDir": deep(levels)}]))
    assert [str(p) for p in err.value.problems] == [
        "spec.volumes[0].emptyDir.a: unknown field (the API server would refuse or drop it); known fields: medium, sizeLimit"]


def test_deep_object_in_a_sweep_template_is_refused_naming_the_field():
    sweep = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep", "metadata": {"name": "s"},
             "spec": {"template": {"spec": {**MINIMAL["spec"], "volumes": [{"name": "d", "emptyDir": deep(5000)}]}},
                      "parameters": [{"path": "training.lr", "values": [0.1]}]}}
    problems = check_sweep(sweep).problems
    assert any(p.field.startswith("spec.template.spec.volumes[0].emptyDir") for p in problems), problems


def test_a_value_nested_past_the_limit_is_cut_and_refused_where_no_field_is_known():
    with pytest.raises(InvalidJob) as err:
        parse_job(job_with(volumes=[{"name": "d", "emptyDir": {}, "x": deep(MAX_DEPTH)}]))
    assert any(p.field == "spec.volumes[0].x" and "unknown field" in p.message for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("member", VOLUME_SOURCES)
def test_unknown_field_under_any_volume_member_is_refused(member):
    found = api_problems(job_with(volumes=[{"name": "d", member: {"bogus": {"a": 1}}}]))
    assert any(p.startswith(f"spec.volumes[0].{member}.bogus: unknown field") for p in found), found


@pytest.mark.parametrize("member", ENV_SOURCES)
def test_unknown_field_under_any_env_source_is_refused(member):
    found = api_problems(job_with(env=[{"name": "A", "valueFrom": {member: {"bogus": 1}}}]))
    assert any(p.startswith(f"spec.env[0].valueFrom.{member}.bogus: unknown field") for p in found), found


@pytest.mark.parametrize("member", sorted(COMMON))
def test_common_volumes_are_valid_and_kept_as_written(member):
    obj = job_with(volumes=[{"name": "d", member: COMMON[member]}])
    job, problems = validate_job(copy.deepcopy(obj))
    assert not [p for p in problems if p.source == "api"], problems
    assert job.spec.volumes[0].to_kube() == {"name": "d", member: COMMON[member]}


@pytest.mark.parametrize(("source", "field", "words"), [
    ({"emptyDir": {"sizeLimit": "1GB"}}, "emptyDir.sizeLimit", "must be a quantity"),
    ({"emptyDir": {"sizeLimit": 1.5}}, "emptyDir.sizeLimit", "must be an integer or a string"),
    ({"persistentVolumeClaim": {}}, "persistentVolumeClaim.claimName", "is required"),
    ({"persistentVolumeClaim": {"claimName": 5}}, "persistentVolumeClaim.claimName", "must be a string"),
    ({"configMap": {"name": "c", "defaultMode": 2**31}}, "configMap.defaultMode", "does not fit int32"),
    ({"configMap": {"name": "c", "items": {"key": "a"}}}, "configMap.items", "must be a list"),
    ({"configMap": {"name": "c", "items": [{"key": "a"}]}}, "configMap.items[0].path", "is required"),
    ({"csi": {"driver": "d", "volumeAttributes": {"a": 1}}}, "csi.volumeAttributes[a]", "must be a string"),
    ({"ephemeral": {"volumeClaimTemplate": {"metadata": {"name": "x"}, "spec": {}}}},
     "ephemeral.volumeClaimTemplate.metadata.name", "unknown field"),
    ({"ephemeral": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "lots"}}}}}},
     "ephemeral.volumeClaimTemplate.spec.resources.requests[storage]", "must be a quantity"),
    ({"emptyDir": []}, "emptyDir", "must be an object"),
])
def test_the_schema_twin_names_field_and_rule(source, field, words):
    found = api_problems(job_with(volumes=[{"name": "d", **source}]))
    assert any(p.startswith(f"spec.volumes[0].{field}:") and words in p for p in found), found


def test_an_integer_written_as_a_float_is_the_operators_refusal():
    """The API server stores 420.0 for an integer; the pod's typed decoding would refuse it."""
    _, problems = validate_job(job_with(volumes=[{"name": "d", "configMap": {"name": "c", "defaultMode": 420.0}}]))
    assert [(p.field, p.source) for p in problems] == [("spec.volumes[0].configMap.defaultMode", "operator")]


def test_checkpoint_volume_and_role_env_are_typed_too():
    found = api_problems(job_with(checkpoint={"volume": {"nfs": {"server": "s", "path": "/p", "mountOptions": ["x"]}}}))
    assert any(p.startswith("spec.checkpoint.volume.nfs.mountOptions: unknown field") for p in found), found


def test_cli_validate_names_the_field(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(job_with(volumes=[{"name": "d", "emptyDir": deep(20)}])))
    assert main(["validate", str(path)]) == 1
    assert "spec.volumes[0].emptyDir.a: unknown field" in capsys.readouterr().err


@pytest.mark.parametrize("value", [{"a": 1}, {}, [], [1]])
def test_sweep_values_are_scalars(value):
    sweep = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep", "metadata": {"name": "s"},
             "spec": {"template": {"spec": MINIMAL["spec"]}, "parameters": [{"path": "training.lr", "values": [0.1, value]}]}}
    assert any(p.field.startswith("spec.parameters[0].values[1]") for p in check_sweep(sweep).problems)
