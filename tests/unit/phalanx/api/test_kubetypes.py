"""The core/v1 pieces a job passes to its pods: volumes with exactly one source, mounts off the
operator's own paths, env that grants no device and overrides no rendezvous variable, and
tolerations as Kubernetes takes them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from phalanx import constants
from phalanx.api.kubetypes import (
    RESERVED_VOLUMES,
    EnvVar,
    EnvVarSource,
    Toleration,
    Volume,
    VolumeMount,
    VolumeSource,
    device_grant_env,
    reserved_env,
)
from phalanx.api.rules import broken


def broken_fields(obj) -> list[str]:
    return [field for field, _, _ in broken(type(obj).checks, obj, "x")]


@pytest.mark.parametrize(("sources", "source", "broken"), [
    ({"emptyDir": {}}, "emptyDir", []),
    ({"persistentVolumeClaim": {"claimName": "c"}}, "persistentVolumeClaim", []),
    ({}, None, ["x"]),
    ({"emptyDir": {}, "nfs": {"server": "s", "path": "/p"}}, None, ["x"]),
])
def test_a_volume_has_exactly_one_source(sources, source, broken):
    volume = VolumeSource.model_validate(sources)
    assert volume.source() == source
    assert broken_fields(volume) == broken


def test_a_volume_source_goes_to_the_pod_as_written():
    volume = Volume.model_validate({"name": "data", "persistentVolumeClaim": {"claimName": "c", "readOnly": True}})
    assert volume.to_kube() == {"name": "data", "persistentVolumeClaim": {"claimName": "c", "readOnly": True}}


def test_a_volume_source_refuses_fields_kubernetes_does_not_know():
    with pytest.raises(ValidationError):
        VolumeSource.model_validate({"emptyDir": {"sizeLimt": "1Gi"}})


@pytest.mark.parametrize("name", RESERVED_VOLUMES)
def test_the_operators_volume_names_are_reserved(name):
    assert broken_fields(Volume.model_validate({"name": name, "emptyDir": {}})) == ["x.name"]


@pytest.mark.parametrize(("path", "reserved"), [
    ("/data", False),
    ("/dev/shmem", False),  # only the path and what is below it
    ("/phalanxdata", False),
    ("/dev/shm", True),
    ("/dev/shm/", True),
    ("/phalanx", True),
    ("/phalanx/scratch", True),
    (constants.RUNTIME_CONFIG_DIR + "/x.json", True),
])
def test_mounts_stay_off_the_operators_paths(path, reserved):
    mount = VolumeMount.model_validate({"name": "v", "mountPath": path})
    assert broken_fields(mount) == (["x.mountPath"] if reserved else [])


def test_a_mount_takes_sub_path_or_sub_path_expr():
    both = VolumeMount.model_validate({"name": "v", "mountPath": "/d", "subPath": "a", "subPathExpr": "$(X)"})
    assert broken_fields(both) == ["x.subPath"]


@pytest.mark.parametrize(("name", "device", "reserved"), [
    ("NVIDIA_VISIBLE_DEVICES", True, True),
    ("NVIDIA_DRIVER_CAPABILITIES", True, True),
    ("AMD_VISIBLE_DEVICES", True, True),
    ("CUDA_VISIBLE_DEVICES", False, False),  # a process-level filter: the job's own
    (constants.ENV_MASTER_ADDR, False, True),
    (constants.ENV_WORLD_SIZE, False, True),
    ("NCCL_DEBUG", False, False),
])
def test_device_grant_and_reserved_env(name, device, reserved):
    assert device_grant_env(name) is device
    assert reserved_env(name) is reserved


@pytest.mark.parametrize(("env", "broken"), [
    ({"name": "A", "value": "1"}, []),
    ({"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, []),
    ({"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, ["x.valueFrom"]),
    ({"name": "PHALANX_STEPS", "value": "1"}, ["x.name"]),
    ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, ["x.name"]),
    ({"name": constants.ENV_NODE_RANK, "value": "0"}, ["x.name"]),
])
def test_env_rules(env, broken):
    assert broken_fields(EnvVar.model_validate(env)) == broken


@pytest.mark.parametrize(("sources", "ok"), [
    ({"secretKeyRef": {"name": "s", "key": "k"}}, True),
    ({}, False),
    ({"secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}}, False),
])
def test_an_env_source_has_exactly_one_member(sources, ok):
    assert (broken_fields(EnvVarSource.model_validate(sources)) == []) is ok


def test_env_goes_to_the_pod_in_camel_case_without_nulls():
    env = EnvVar.model_validate({"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    assert env.to_kube() == {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}


@pytest.mark.parametrize(("toleration", "broken"), [
    ({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, []),
    ({"key": "gpu", "operator": "Equal", "value": "yes"}, []),
    ({"operator": "Exists"}, []),  # tolerates every taint: the policy decides
    ({"key": "gpu", "operator": "Exists", "value": "yes"}, ["x.value"]),
    ({"value": "yes"}, ["x.operator"]),
    ({"key": "gpu", "tolerationSeconds": 30}, ["x.tolerationSeconds"]),
    ({"key": "gpu", "effect": "NoExecute", "tolerationSeconds": 30}, []),
])
def test_toleration_rules(toleration, broken):
    parsed = Toleration.model_validate(toleration)
    assert broken_fields(parsed) == broken
    if not broken:
        assert parsed.to_kube() == toleration
