"""A TrainingJob (or a TrainingSweep's template) whose volume source holds an object
nested thousands of levels deep. The CRDs give every core/v1 type inside the Kubernetes API's own
schema, so the real API server refuses it under strict field validation and prunes it otherwise:
nothing deep is ever stored. The volumes people use are still accepted exactly as written."""

from __future__ import annotations

import copy
import json

import pytest
from kubernetes import client

from phalanx.validate import validate_job
from tests.corpus import BASE
from tests.integration.harness import GROUP, PLURAL, VERSION
from tests.unit.phalanx.api.test_kubeschemas import COMMON

SWEEPS = "trainingsweeps"


def deep_json(levels: int) -> str:
    """{"a":{"a":...{}}} as text: the client's json.dumps would hit Python's recursion limit."""
    return '{"a":' * levels + "{}" + "}" * levels


def job_text(name: str, levels: int) -> str:
    obj = copy.deepcopy(BASE)
    obj["metadata"]["name"] = name
    obj["spec"]["volumes"] = [{"name": "d", "emptyDir": "DEEP"}]
    return json.dumps(obj).replace('"DEEP"', deep_json(levels))


def sweep_text(name: str, levels: int) -> str:
    template = copy.deepcopy(BASE["spec"])
    template["volumes"] = [{"name": "d", "emptyDir": "DEEP"}]
    obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingSweep", "metadata": {"name": name},
           "spec": {"template": {"spec": template}, "parameters": [{"path": "training.lr", "values": [0.1]}]}}
    return json.dumps(obj).replace('"DEEP"', deep_json(levels))


def kubectl_create(cluster, tmp_path, namespace, text: str, *flags: str):
    path = tmp_path / "obj.json"
    path.write_text(text)
    return cluster.kubectl("create", "-n", namespace, "-f", str(path), *flags, check=False, timeout=120)


@pytest.mark.parametrize("levels", [1000, 9000])
@pytest.mark.parametrize("kind", ["job", "sweep"])
def test_deep_volume_source_is_refused_under_strict_validation(cluster, crd, tmp_path, namespace, kind, levels):
    text = (job_text if kind == "job" else sweep_text)("deep", levels)
    out = kubectl_create(cluster, tmp_path, namespace, text, "--validate=strict")
    assert out.returncode != 0, out.stdout
    where = "spec.volumes[0].emptyDir.a" if kind == "job" else "spec.template.spec.volumes[0].emptyDir.a"
    assert where in out.stderr and "unknown field" in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize("levels", [1000, 9000])
@pytest.mark.parametrize("kind", ["job", "sweep"])
def test_deep_volume_source_is_pruned_otherwise(cluster, crd, api, tmp_path, namespace, kind, levels):
    name = f"pruned-{kind}-{levels}"
    text = (job_text if kind == "job" else sweep_text)(name, levels)
    out = kubectl_create(cluster, tmp_path, namespace, text, "--validate=false")
    assert out.returncode == 0, out.stderr[-2000:]
    stored = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL if kind == "job" else SWEEPS, name)
    spec = stored["spec"] if kind == "job" else stored["spec"]["template"]["spec"]
    assert spec["volumes"] == [{"name": "d", "emptyDir": {}}]


@pytest.mark.parametrize("member", sorted(COMMON))
def test_common_volumes_are_accepted_and_stored_as_written(cluster, crd, api, namespace, member):
    obj = copy.deepcopy(BASE)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["volumes"] = [{"name": "d", member: COMMON[member]}]
    obj["spec"]["volumeMounts"] = [{"name": "d", "mountPath": "/d"}]
    obj["spec"]["env"] = [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                          {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]
    created = client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, copy.deepcopy(obj), dry_run="All", field_validation="Strict")
    assert created["spec"]["volumes"] == obj["spec"]["volumes"]
    assert created["spec"]["env"] == obj["spec"]["env"]
    assert not [p for p in validate_job(obj)[1] if p.source == "api"]


def sweep_with(name: str, values: list | None = None, trial_value=None) -> dict:
    """A sweep that varies training.lr over ``values``, or lists one trial with ``trial_value``."""
    spec: dict = {"template": {"spec": copy.deepcopy(BASE["spec"])}}
    if values is not None:
        spec["parameters"] = [{"path": "training.lr", "values": values}]
    else:
        spec |= {"algorithm": "list", "trials": [{"training.lr": trial_value}]}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingSweep", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize("value", [{"a": {"a": {}}}, {}, [], [1], "x" * 513])
def test_sweep_values_hold_no_object_or_list(cluster, crd, api, namespace, value):
    """A sweep's values take any scalar: CEL cannot see such a node, its value validations bound it."""
    custom = client.CustomObjectsApi(api)
    for obj in (sweep_with("values", [0.1, value]), sweep_with("trials", trial_value=value)):
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SWEEPS, obj, dry_run="All")
        assert err.value.status == 422, err.value.body


def test_sweep_values_take_every_scalar(cluster, crd, api, namespace):
    custom = client.CustomObjectsApi(api)
    for obj, field in ((sweep_with("values", [0.1, 1, True, "fast"]), "parameters"), (sweep_with("trials", trial_value=0.5), "trials")):
        created = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, SWEEPS, copy.deepcopy(obj), dry_run="All")
        assert created["spec"][field] == obj["spec"][field]
