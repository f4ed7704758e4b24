"""One worker Pod per node-rank: rendezvous env, resources, shm, checkpoint volume, gang gate."""

from __future__ import annotations

import copy
from typing import Any

from phalanx import constants as C
from phalanx.api.types import TrainingJob
from phalanx.render.deepspeed import uses_deepspeed
from phalanx.render.names import (
    config_map_name,
    hostname,
    master_addr,
    metadata,
    pod_name,
    service_name,
)
from phalanx.render.network import NetworkWiring, apply_network
from phalanx.render.tensorflow import tf_env

RUNTIME_COMMAND = ["phalanx-runtime"]
TERMINATION_GRACE_SECONDS = 120  # the runtime checkpoints on SIGTERM before it exits


def _env(name: str, value: Any) -> dict[str, str]:
    return {"name": name, "value": str(value)}


def rendezvous_env(job: TrainingJob, rank: int, attempt: int, master_port: int) -> list[dict[str, Any]]:
    spec, name = job.spec, job.metadata.name
    addr = master_addr(name)
    return [
        _env(C.ENV_MASTER_ADDR, addr),
        _env(C.ENV_MASTER_PORT, master_port),
        _env(C.ENV_WORLD_SIZE, spec.world_size),
        _env(C.ENV_NNODES, spec.nodes),
        _env(C.ENV_NODE_RANK, rank),
        _env(C.ENV_NPROC_PER_NODE, spec.procs_per_node),
        _env(C.ENV_PET_MASTER_ADDR, addr),
        _env(C.ENV_PET_MASTER_PORT, master_port),
        _env(C.ENV_PET_NNODES, spec.nodes),
        _env(C.ENV_PET_NODE_RANK, rank),
        _env(C.ENV_PET_NPROC_PER_NODE, spec.procs_per_node),
        _env(C.ENV_PET_RDZV_ENDPOINT, f"{addr}:{master_port}"),
        _env(C.ENV_PET_RDZV_ID, f"{job.metadata.namespace}-{name}-{attempt}"),
        _env(C.ENV_PET_MAX_RESTARTS, 0),  # the operator restarts the whole gang
        _env(C.ENV_PYTHONUNBUFFERED, 1),
        _env(C.ENV_CONFIG_PATH, f"{C.RUNTIME_CONFIG_DIR}/{C.RUNTIME_CONFIG_FILE}"),
        _env(C.ENV_JOB_NAME, name),
        _env(C.ENV_NAMESPACE, job.metadata.namespace),
        _env(C.ENV_RESTART_ATTEMPT, attempt),
        _env(C.ENV_JOB_UID, job.metadata.uid or ""),  # recorded in checkpoints (provenance)
        _env(C.ENV_CHECKPOINT_DIR, f"{spec.checkpoint.mount_path.rstrip('/')}/{job.metadata.namespace}/{name}"),
        _env(C.ENV_PROGRESS_PORT, C.PROGRESS_PORT),
        _env(C.ENV_METRICS_PORT, C.METRICS_PORT),
        {"name": C.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": C.ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ] + ([_env(C.ENV_DEEPSPEED_CONFIG, f"{C.RUNTIME_CONFIG_DIR}/{C.DEEPSPEED_CONFIG_FILE}")] if uses_deepspeed(spec) else []) \
        + tf_env(job, rank, master_port)  # framework tensorflow: this pod's TF_CONFIG (on the rendezvous port)


def build_resources(job: TrainingJob) -> dict[str, Any]:
    res = job.spec.resources
    amounts: dict[str, Any] = {}
    if res.cpu is not None:
        amounts["cpu"] = str(res.cpu)
    if res.memory is not None:
        amounts["memory"] = str(res.memory)
    if res.gpus:
        amounts[C.RESOURCE_GPU] = str(res.gpus)
    amounts.update({k: str(v) for k, v in res.extra.items()})
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


# Pod Security "restricted": non-root with a fixed uid (the runtime image's user), no privilege
# escalation, no capabilities (a network profile may add IPC_LOCK), the runtime's seccomp profile.
POD_SECURITY_CONTEXT = {
    "runAsNonRoot": True, "runAsUser": C.RUNTIME_UID, "runAsGroup": C.RUNTIME_GID,
    "fsGroup": C.RUNTIME_GID, "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def scratch_env() -> list[dict[str, str]]:
    """HOME, caches and TMPDIR on the writable scratch emptyDir (the image may be read-only to
    this uid); the job's own env, which comes after, may point them elsewhere."""
    home = C.SCRATCH_MOUNT_PATH
    return [_env("HOME", home), _env("TMPDIR", home), _env("XDG_CACHE_HOME", f"{home}/.cache"),
            _env("TRITON_CACHE_DIR", f"{home}/.cache/triton"),
            _env("TORCHINDUCTOR_CACHE_DIR", f"{home}/.cache/torchinductor")]


def _volumes(job: TrainingJob, shm_size: str) -> tuple[list[dict], list[dict]]:
    spec = job.spec
    volumes = [
        {"name": C.VOLUME_CONFIG, "configMap": {"name": config_map_name(job.metadata.name)}},
        {"name": C.SHM_VOLUME_NAME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
        {"name": C.VOLUME_SCRATCH, "emptyDir": {}},
    ]
    mounts = [
        {"name": C.VOLUME_CONFIG, "mountPath": C.RUNTIME_CONFIG_DIR, "readOnly": True},
        {"name": C.SHM_VOLUME_NAME, "mountPath": C.SHM_MOUNT_PATH},
        {"name": C.VOLUME_SCRATCH, "mountPath": C.SCRATCH_MOUNT_PATH},
    ]
    if spec.checkpoint.volume is not None:
        volumes.append({"name": C.VOLUME_CHECKPOINT, **spec.checkpoint.volume.to_kube()})
        mounts.append({"name": C.VOLUME_CHECKPOINT, "mountPath": spec.checkpoint.mount_path})
    volumes += [v.to_kube() for v in spec.volumes]
    mounts += [m.model_dump(by_alias=True, mode="json", exclude_none=True) for m in spec.volume_mounts]
    return volumes, mounts


def build_pod(
    job: TrainingJob,
    rank: int,
    attempt: int,
    wiring: NetworkWiring,
    default_shm_size: str = C.DEFAULT_SHM_SIZE,
    gated: bool = True,
) -> dict[str, Any]:
    """``wiring`` is the job's network wiring (render.job.job_wiring), computed once per job."""
    spec, name = job.spec, job.metadata.name
    master_port = wiring.master_port
    shm_size = str(spec.shm_size or wiring.shm_size or default_shm_size)
    volumes, mounts = _volumes(job, shm_size)
    container: dict[str, Any] = {
        "name": C.CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": list(spec.command) if spec.command else list(RUNTIME_COMMAND),
        "env": rendezvous_env(job, rank, attempt, master_port) + scratch_env() + [e.to_kube() for e in spec.env],
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        "ports": [
            {"name": C.PORT_NAME_RENDEZVOUS, "containerPort": master_port, "protocol": "TCP"},
            {"name": C.PORT_NAME_PROGRESS, "containerPort": C.PROGRESS_PORT, "protocol": "TCP"},
            {"name": C.PORT_NAME_METRICS, "containerPort": C.METRICS_PORT, "protocol": "TCP"},
        ],
        "volumeMounts": mounts,
    }
    if spec.args:
        container["args"] = list(spec.args)
    resources = build_resources(job)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "hostname": hostname(name, rank),
        "subdomain": service_name(name),
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "containers": [container],
        "volumes": volumes,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        # no API token in the pod unless the job names a service account (and policy allows it)
        "automountServiceAccountToken": bool(spec.service_account_name),
    }
    if gated:
        pod_spec["schedulingGates"] = [{"name": C.GANG_SCHEDULING_GATE}]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [t.to_kube() for t in spec.tolerations]
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    if spec.scheduling.priority_class_name:
        pod_spec["priorityClassName"] = spec.scheduling.priority_class_name
    if spec.scheduling.scheduler_name:
        pod_spec["schedulerName"] = spec.scheduling.scheduler_name
    meta = metadata(
        job,
        pod_name(name, rank, attempt),
        C.COMPONENT_WORKER,
        **{C.LABEL_NODE_RANK: str(rank), C.LABEL_RESTART_ATTEMPT: str(attempt)},
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    return apply_network(pod, wiring)

