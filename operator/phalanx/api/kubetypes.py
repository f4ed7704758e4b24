"""The core/v1 pieces a TrainingJob passes to its pods (volumes, mounts, env, tolerations), typed
down to the level where the API server, phalanx validate and the admission policy can all see
what is asked for (which volume source, which env source). Each source's insides carry the
Kubernetes API's own schema (api/kubeschemas.py): unknown fields and nesting are refused at
apply; the API server checks the values' meaning when the operator (dry-)creates the pod."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.base import Model, bounded_str
from phalanx.api.kubeschemas import kube_object
from phalanx.api.rules import Rule

# Every core/v1 VolumeSource member (Kubernetes 1.36).
VOLUME_SOURCES = (
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi",
    "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk",
    "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim",
    "photonPersistentDisk", "portworxVolume", "projected", "quobyte", "rbd", "scaleIO", "secret",
    "storageos", "vsphereVolume",
)
# Sources whose data lives on one node (or in one pod): never shared by a gang.
PER_NODE_SOURCES = ("emptyDir", "ephemeral", "hostPath", "configMap", "secret", "downwardAPI",
                    "projected", "gitRepo", "image")
RESERVED_VOLUMES = (constants.VOLUME_CHECKPOINT, constants.VOLUME_CONFIG, constants.SHM_VOLUME_NAME, constants.TOPO_FILE_VOLUME_NAME,
                    constants.VOLUME_SCRATCH, constants.VOLUME_STORAGE_CREDENTIALS)
RESERVED_MOUNT_PATHS = (constants.SHM_MOUNT_PATH, constants.RUNTIME_CONFIG_DIR, constants.PHALANX_MOUNT_ROOT)


def _cel_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _set_sources(obj: object) -> list[str]:
    return [s for s in VOLUME_SOURCES if getattr(obj, s) is not None]


def _one_source_rule() -> Rule:
    cel = "[" + ", ".join(f"has(self.{s})" for s in VOLUME_SOURCES) + "].filter(x, x).size() == 1"
    return Rule(cel, "set exactly one volume source (persistentVolumeClaim, nfs, csi, emptyDir, ...)",
                lambda v: len(_set_sources(v)) == 1)


_VolumeSourceBase = create_model(
    "_VolumeSourceBase", __base__=Model,
    **{s: (kube_object("volumeSources", s) | None, Field(None, alias=s)) for s in VOLUME_SOURCES},
)


class VolumeSource(_VolumeSourceBase):
    """A core/v1 VolumeSource: exactly one member, typed by Kubernetes' schema."""

    checks = (_one_source_rule(),)

    def source(self) -> str | None:
        found = _set_sources(self)
        return found[0] if len(found) == 1 else None

    def to_kube(self) -> dict:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


class Volume(VolumeSource):
    name: str = bounded_str(patterns.DNS_LABEL, patterns.MAX_DNS_LABEL, description="Volume name (DNS label).")

    checks = (
        _one_source_rule(),
        Rule(f"!(self.name in {_cel_list(RESERVED_VOLUMES)})",
             f"volume names {', '.join(RESERVED_VOLUMES)} are the operator's own",
             lambda v: v.name not in RESERVED_VOLUMES, ".name"),
    )


def _under_reserved(path: str) -> bool:
    return any(path.rstrip("/") == p or path.startswith(p + "/") for p in RESERVED_MOUNT_PATHS)


# A volumeMount's or the checkpoint's mountPath: not the operator's own mount paths or below them.
RESERVED_PATH_RULE = Rule(
    " && ".join(f"self.mountPath != '{p}' && !self.mountPath.startsWith('{p}/')" for p in RESERVED_MOUNT_PATHS),
    f"{', '.join(RESERVED_MOUNT_PATHS)} (and paths below them) are mounted by the operator",
    lambda m: not _under_reserved(m.mount_path), ".mountPath")


class VolumeMount(Model):
    name: str = bounded_str(patterns.DNS_LABEL, patterns.MAX_DNS_LABEL, description="A volume of spec.volumes.")
    mount_path: str = bounded_str(patterns.ABSOLUTE_PATH, 1024)
    read_only: bool | None = None
    sub_path: str | None = bounded_str(None, 1024, default=None)
    sub_path_expr: str | None = bounded_str(None, 1024, default=None)
    mount_propagation: Literal["None", "HostToContainer"] | None = None
    recursive_read_only: Literal["Disabled", "IfPossible", "Enabled"] | None = None

    checks = (
        RESERVED_PATH_RULE,
        Rule("!has(self.subPath) || !has(self.subPathExpr)", "set subPath or subPathExpr, not both",
             lambda m: m.sub_path is None or m.sub_path_expr is None, ".subPath"),
    )


class EnvVarSource(Model):
    field_ref: kube_object("envVarSources", "fieldRef") | None = None
    resource_field_ref: kube_object("envVarSources", "resourceFieldRef") | None = None
    config_map_key_ref: kube_object("envVarSources", "configMapKeyRef") | None = None
    secret_key_ref: kube_object("envVarSources", "secretKeyRef") | None = None
    file_key_ref: kube_object("envVarSources", "fileKeyRef") | None = None

    checks = (
        Rule("[has(self.fieldRef), has(self.resourceFieldRef), has(self.configMapKeyRef), "
             "has(self.secretKeyRef), has(self.fileKeyRef)].filter(x, x).size() == 1",
             "set exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef, fileKeyRef",
             lambda s: sum(v is not None for v in (s.field_ref, s.resource_field_ref, s.config_map_key_ref,
                                                    s.secret_key_ref, s.file_key_ref)) == 1),
    )


def device_grant_env(name: str) -> bool:
    """The container runtime reads ``name`` to pick the devices it injects (constants.py)."""
    return name.startswith(constants.ENV_DEVICE_GRANT_PREFIXES) or name in constants.ENV_DEVICE_GRANT_NAMES


DEVICE_ENV_MESSAGE = (
    f"{', '.join(p + '*' for p in constants.ENV_DEVICE_GRANT_PREFIXES)} and {', '.join(constants.ENV_DEVICE_GRANT_NAMES)} tell the "
    "node's container runtime which devices to give the container; only the device plugin sets them "
    "(request devices in resources)")
RENDEZVOUS_ENV_MESSAGE = (
    f"{', '.join(constants.RENDEZVOUS_ENV)} are the rendezvous variables the operator sets on every pod and cannot be overridden")


def reserved_env(name: str) -> bool:
    """A device-grant or rendezvous variable: EnvVar's rules, for env given as a map (ncclEnv)."""
    return device_grant_env(name) or name in constants.RENDEZVOUS_ENV


class EnvVar(Model):
    name: str = bounded_str(patterns.ENV_NAME, 256)
    value: str | None = bounded_str(None, 32768, default=None)
    value_from: EnvVarSource | None = None

    checks = (
        Rule("!has(self.value) || !has(self.valueFrom)", "set value or valueFrom, not both",
             lambda e: e.value is None or e.value_from is None, ".valueFrom"),
        Rule(f"!self.name.startsWith('{constants.ENV_RESERVED_PREFIX}')",
             f"{constants.ENV_RESERVED_PREFIX}* variables are set by the operator and cannot be overridden",
             lambda e: not e.name.startswith(constants.ENV_RESERVED_PREFIX), ".name"),
        Rule(" && ".join([f"!self.name.startsWith('{p}')" for p in constants.ENV_DEVICE_GRANT_PREFIXES]
                         + [f"!(self.name in {_cel_list(constants.ENV_DEVICE_GRANT_NAMES)})"]),
             DEVICE_ENV_MESSAGE, lambda e: not device_grant_env(e.name), ".name"),
        Rule(f"!(self.name in {_cel_list(constants.RENDEZVOUS_ENV)})", RENDEZVOUS_ENV_MESSAGE,
             lambda e: e.name not in constants.RENDEZVOUS_ENV, ".name"),
    )

    def to_kube(self) -> dict:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


class Toleration(Model):
    key: str | None = bounded_str(patterns.QUALIFIED_NAME, patterns.MAX_QUALIFIED_NAME, default=None)
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = bounded_str(patterns.LABEL_VALUE, patterns.MAX_LABEL_VALUE, default=None)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=-(1 << 31), le=(1 << 31) - 1)

    checks = (
        Rule("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
             "value must be empty when operator is Exists",
             lambda t: t.operator != "Exists" or not t.value, ".value"),
        Rule("(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
             "a toleration without a key must use operator Exists",
             lambda t: bool(t.key) or t.operator == "Exists", ".operator"),
        Rule("!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
             "tolerationSeconds needs effect NoExecute",
             lambda t: t.toleration_seconds is None or t.effect == "NoExecute", ".tolerationSeconds"),
    )

    def to_kube(self) -> dict:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)
