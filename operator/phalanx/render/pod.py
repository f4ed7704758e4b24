"""One Pod per slot of the gang (a worker's node-rank, or a role's pod): rendezvous env, resources,
shm, checkpoint volume, gang gate."""

from __future__ import annotations

import copy
import json
from typing import Any

from phalanx import constants
from phalanx.api.progress import collected, wraps_command
from phalanx.api.slots import (
    Slot,
    role_counts,
    role_of,
    slot_command,
    slot_hostname,
    slot_labels,
    slot_pod_name,
    slot_resources,
    worker,
)
from phalanx.api.types import TrainingJob
from phalanx.frameworks import plugin_for
from phalanx.render.names import config_map_name, master_addr, metadata, service_name
from phalanx.render.network import NetworkWiring, merge_network

RUNTIME_COMMAND = ["phalanx-runtime"]
TERMINATION_GRACE_SECONDS = 120  # the runtime checkpoints on SIGTERM before it exits


def _env(name: str, value: Any) -> dict[str, str]:
    return {"name": name, "value": str(value)}


def _rank_env(job: TrainingJob, rank: int, attempt: int, master_port: int) -> list[dict[str, Any]]:
    """A worker's place in the torch world (torchrun's and Kubeflow's PET_* variables)."""
    spec, name = job.spec, job.metadata.name
    addr = master_addr(name)
    return [
        _env(constants.ENV_WORLD_SIZE, spec.world_size),
        _env(constants.ENV_NNODES, spec.nodes),
        _env(constants.ENV_NODE_RANK, rank),
        _env(constants.ENV_NPROC_PER_NODE, spec.procs_per_node),
        _env(constants.ENV_PET_MASTER_ADDR, addr),
        _env(constants.ENV_PET_MASTER_PORT, master_port),
        _env(constants.ENV_PET_NNODES, spec.nodes),
        _env(constants.ENV_PET_NODE_RANK, rank),
        _env(constants.ENV_PET_NPROC_PER_NODE, spec.procs_per_node),
        _env(constants.ENV_PET_RDZV_ENDPOINT, f"{addr}:{master_port}"),
        _env(constants.ENV_PET_RDZV_ID, f"{job.metadata.namespace}-{name}-{attempt}"),
        _env(constants.ENV_PET_MAX_RESTARTS, 0),  # the operator restarts the whole gang
    ]


def _checkpoint_env(job: TrainingJob) -> list[dict[str, Any]]:
    """``$PHALANX_CHECKPOINT_DIR`` on the checkpoint volume (with checkpoint.storage: a pod-local
    emptyDir, and ``$PHALANX_CHECKPOINT_URI`` the job's prefix in the bucket); none without
    either, and then the job saves no checkpoints: the image is read-only to the pod's uid and the
    scratch emptyDir dies with the pod, so there is nowhere else to keep them."""
    ckpt, ns, name = job.spec.checkpoint, job.metadata.namespace, job.metadata.name
    if ckpt.volume is None and ckpt.storage is None:
        return []
    out = [_env(constants.ENV_CHECKPOINT_DIR, f"{ckpt.mount_path.rstrip('/')}/{ns}/{name}")]
    if ckpt.storage is not None:
        out += [_env(constants.ENV_CHECKPOINT_URI, f"{ckpt.storage.uri}/{ns}/{name}"), *storage_access_env(ckpt.storage)]
    return out


def storage_access_env(storage) -> list[dict[str, Any]]:
    """How the pod reaches checkpoint.storage, the way the SDKs read it: the endpoint and region,
    and the Secret's keys as secretKeyRefs (s3://) or its key file (gs://, mounted by _volumes);
    without a Secret, the service account's identity, which the SDKs find themselves."""
    out = []
    if storage.endpoint:
        out.append(_env(constants.ENV_AWS_ENDPOINT_URL_S3, storage.endpoint))
    if storage.region:
        out += [_env(constants.ENV_AWS_REGION, storage.region), _env(constants.ENV_AWS_DEFAULT_REGION, storage.region)]
    secret = storage.credentials_secret
    if secret and storage.uri.startswith("s3://"):
        out += [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, **({"optional": True} if optional else {})}}}
                for key, optional in constants.AWS_SECRET_KEYS]
    elif secret:
        out.append(_env(constants.ENV_GOOGLE_APPLICATION_CREDENTIALS,
                        f"{constants.STORAGE_CREDENTIALS_MOUNT_PATH}/{constants.GCS_KEY_FILE}"))
    return out


def _job_env(job: TrainingJob, attempt: int) -> list[dict[str, Any]]:
    """What every pod of the gang gets: the job, its attempt, config and checkpoint paths."""
    spec, name = job.spec, job.metadata.name
    return [
        _env(constants.ENV_PYTHONUNBUFFERED, 1),
        _env(constants.ENV_CONFIG_PATH, f"{constants.RUNTIME_CONFIG_DIR}/{constants.RUNTIME_CONFIG_FILE}"),
        _env(constants.ENV_JOB_NAME, name),
        _env(constants.ENV_NAMESPACE, job.metadata.namespace),
        _env(constants.ENV_RESTART_ATTEMPT, attempt),
        _env(constants.ENV_JOB_UID, job.metadata.uid or ""),  # recorded in checkpoints (provenance)
    ] + _checkpoint_env(job) + [
        _env(constants.ENV_PROGRESS_PORT, constants.PROGRESS_PORT),
        _env(constants.ENV_METRICS_PORT, constants.METRICS_PORT),
        {"name": constants.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": constants.ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ] + plugin_for(spec).job_env(spec)


def role_env(job: TrainingJob, slot: Slot) -> list[dict[str, str]]:
    """Jobs with spec.roles: this pod's role and index, every role's size, and the DNS suffix
    of the gang's pods (``<job>-<role>-<i>.$PHALANX_SUBDOMAIN``; workers ``<job>-node-<rank>``)."""
    spec = job.spec
    if not spec.roles:
        return []
    counts = role_counts(spec)
    return [
        _env(constants.ENV_ROLE, slot.role),
        _env(constants.ENV_ROLE_INDEX, slot.index),
        _env(constants.ENV_ROLE_REPLICAS, counts[slot.role]),
        _env(constants.ENV_ROLES, ",".join(f"{role}={n}" for role, n in counts.items())),
        _env(constants.ENV_SUBDOMAIN, f"{service_name(job.metadata.name)}.{job.metadata.namespace}.svc"),
    ]


def progress_env(job: TrainingJob, slot: Slot) -> list[dict[str, str]]:
    """spec.progress, for the workers (rank 0 among them reports): the collector, and the regex
    collector's patterns (a JSON list) or the jsonl collector's file."""
    progress = job.spec.progress
    if progress is None or not slot.is_worker:
        return []
    env = [_env(constants.ENV_PROGRESS_COLLECTOR, progress.collector)]
    if progress.patterns is not None:
        env.append(_env(constants.ENV_PROGRESS_PATTERNS, json.dumps(progress.patterns)))
    if progress.file is not None:
        env.append(_env(constants.ENV_PROGRESS_FILE, progress.file))
    return env


def rendezvous_env(job: TrainingJob, slot: Slot | int, attempt: int, master_port: int) -> list[dict[str, Any]]:
    """A pod's env from the operator. Workers get their torch rank; every pod gets MASTER_ADDR
    (worker 0) and, with spec.roles, its role; then what its framework wires (TF_CONFIG, Horovod's)
    and, for the workers of a job with spec.progress, how their progress is read."""
    slot = worker(slot) if isinstance(slot, int) else slot
    addr = master_addr(job.metadata.name)
    ranked = _rank_env(job, slot.index, attempt, master_port) if slot.is_worker else []
    return ([_env(constants.ENV_MASTER_ADDR, addr), _env(constants.ENV_MASTER_PORT, master_port)] + ranked + _job_env(job, attempt)
            + role_env(job, slot) + plugin_for(job.spec).slot_env(job, slot, master_port) + progress_env(job, slot))


def container_command(job: TrainingJob, slot: Slot) -> tuple[list[str], list[str] | None]:
    """(command, args) of ``slot``'s container: the runtime's entrypoint, or the user's command;
    a worker's under the log collector when spec.progress names one (outermost: it reads what
    the command and everything it starts write; args stay the command's)."""
    command, args = slot_command(job.spec, slot)
    if command is None:
        return list(RUNTIME_COMMAND), args
    if slot.is_worker and wraps_command(job.spec.progress):
        return collected(command), args
    return command, args


def gpu_visibility_env(job: TrainingJob, slot: Slot) -> list[dict[str, str]]:
    """``NVIDIA_VISIBLE_DEVICES=void`` for a pod without GPUs (a CPU role next to a GPU worker must
    not see, and fill, that worker's GPUs); the job's or role's env, after it, may override it."""
    res = slot_resources(job.spec, slot)
    if res.gpus or any(k.startswith("nvidia.com/") for k in res.extra):
        return []
    return [_env(constants.ENV_NVIDIA_VISIBLE_DEVICES, constants.NVIDIA_NO_DEVICES)]


def build_resources(job: TrainingJob, slot: Slot | None = None) -> dict[str, Any]:
    """Requests = limits of a worker, or of ``slot``'s role."""
    res = slot_resources(job.spec, slot or worker(0))
    amounts: dict[str, Any] = {}
    if res.cpu is not None:
        amounts["cpu"] = str(res.cpu)
    if res.memory is not None:
        amounts["memory"] = str(res.memory)
    if res.gpus:
        amounts[constants.RESOURCE_GPU] = str(res.gpus)
    amounts.update({k: str(v) for k, v in res.extra.items()})
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


# Pod Security "restricted": non-root with a fixed uid (the runtime image's user), no privilege
# escalation, no capabilities (a network profile may add IPC_LOCK), the runtime's seccomp profile.
POD_SECURITY_CONTEXT = {
    "runAsNonRoot": True, "runAsUser": constants.RUNTIME_UID, "runAsGroup": constants.RUNTIME_GID,
    "fsGroup": constants.RUNTIME_GID, "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def scratch_env() -> list[dict[str, str]]:
    """HOME, caches and TMPDIR on the writable scratch emptyDir (the image may be read-only to
    this uid); the job's own env, which comes after, may point them elsewhere."""
    home = constants.SCRATCH_MOUNT_PATH
    return [_env("HOME", home), _env("TMPDIR", home), _env("XDG_CACHE_HOME", f"{home}/.cache"),
            _env("TRITON_CACHE_DIR", f"{home}/.cache/triton"),
            _env("TORCHINDUCTOR_CACHE_DIR", f"{home}/.cache/torchinductor")]


def _volumes(job: TrainingJob, shm_size: str) -> tuple[list[dict], list[dict]]:
    spec = job.spec
    volumes = [
        {"name": constants.VOLUME_CONFIG, "configMap": {"name": config_map_name(job.metadata.name)}},
        {"name": constants.SHM_VOLUME_NAME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
        {"name": constants.VOLUME_SCRATCH, "emptyDir": {}},
    ]
    mounts = [
        {"name": constants.VOLUME_CONFIG, "mountPath": constants.RUNTIME_CONFIG_DIR, "readOnly": True},
        {"name": constants.SHM_VOLUME_NAME, "mountPath": constants.SHM_MOUNT_PATH},
        {"name": constants.VOLUME_SCRATCH, "mountPath": constants.SCRATCH_MOUNT_PATH},
    ]
    storage = spec.checkpoint.storage
    if spec.checkpoint.volume is not None or storage is not None:
        source = spec.checkpoint.volume.to_kube() if storage is None else {"emptyDir": local_tier_dir(storage.local_tier)}
        volumes.append({"name": constants.VOLUME_CHECKPOINT, **source})
        mounts.append({"name": constants.VOLUME_CHECKPOINT, "mountPath": spec.checkpoint.mount_path})
    if storage is not None and storage.credentials_secret and not storage.uri.startswith("s3://"):
        volumes.append({"name": constants.VOLUME_STORAGE_CREDENTIALS, "secret": {
            "secretName": storage.credentials_secret, "items": [{"key": constants.GCS_KEY_FILE, "path": constants.GCS_KEY_FILE}]}})
        mounts.append({"name": constants.VOLUME_STORAGE_CREDENTIALS, "mountPath": constants.STORAGE_CREDENTIALS_MOUNT_PATH,
                       "readOnly": True})
    volumes += [v.to_kube() for v in spec.volumes]
    mounts += [m.model_dump(by_alias=True, mode="json", exclude_none=True) for m in spec.volume_mounts]
    return volumes, mounts


def local_tier_dir(tier) -> dict[str, Any]:
    """checkpoint.storage's pod-local emptyDir: its medium and sizeLimit as the job sets them."""
    return {**({"medium": tier.medium} if tier.medium else {}),
            **({"sizeLimit": str(tier.size_limit)} if tier.size_limit is not None else {})}


def in_place_exit_codes(job: TrainingJob) -> list[int]:
    """The trainer's exit codes that restart the pod's containers in place: the runtime's own
    restart code and the codes failurePolicy names retryable. A code 128 and up (killed by a
    signal: the OOM killer, SIGTERM of a deletion or preemption) and every other code end the
    pod, whose failure the operator handles the usual way (recreate the gang, or fail the job): a
    memory limit or a node going away is not cured by restarting on the same node."""
    policy = job.spec.failure_policy
    retryable = (code for code in policy.retryable_exit_codes if code < 128)
    codes = {constants.EXIT_RESTART_IN_PLACE, *retryable} - set(policy.permanent_exit_codes)
    return sorted(codes)


def restart_in_place(job: TrainingJob, pod_spec: dict[str, Any]) -> None:
    """The trainer's restart rule (Kubernetes RestartAllContainers: the kubelet restarts every
    container of the pod on its node) and the downward-API file through which the operator asks
    the pod to restart (the annotation ANNOTATION_RESTART_REQUEST)."""
    codes = in_place_exit_codes(job)
    if not codes:
        return  # the job made every in-place code permanent
    container = pod_spec["containers"][0]
    container["restartPolicy"] = "Never"  # required with rules; the pod's own policy stays Never
    container["restartPolicyRules"] = [{"action": constants.RESTART_RULE_ACTION,
                                        "exitCodes": {"operator": "In", "values": codes}}]
    field_path = f"metadata.annotations['{constants.ANNOTATION_RESTART_REQUEST}']"
    pod_spec["volumes"].append({"name": constants.VOLUME_PODINFO, "downwardAPI": {
        "items": [{"path": constants.RESTART_REQUEST_FILE, "fieldRef": {"fieldPath": field_path}}]}})
    container["volumeMounts"].append({"name": constants.VOLUME_PODINFO, "mountPath": constants.PODINFO_MOUNT_PATH,
                                      "readOnly": True})
    container["env"].append(_env(constants.ENV_RESTART_REQUEST_FILE,
                                 f"{constants.PODINFO_MOUNT_PATH}/{constants.RESTART_REQUEST_FILE}"))
    policy = job.spec.failure_policy
    container["env"] += [_env(constants.ENV_RESTART_BACKOFF_SECONDS, str(policy.backoff_seconds)),
                         _env(constants.ENV_RESTART_MAX_BACKOFF_SECONDS, str(policy.max_backoff_seconds))]


def build_pod(
    job: TrainingJob,
    rank: Slot | int,
    attempt: int,
    wiring: NetworkWiring,
    default_shm_size: str = constants.DEFAULT_SHM_SIZE,
    gated: bool = True,
    in_place: bool = False,
    default_image: str | None = None,
) -> dict[str, Any]:
    """The pod of slot ``rank`` (a node-rank, or a role's pod). ``wiring`` is the job's network
    wiring (render.job.job_wiring), computed once per job; ``in_place``: its trainer restarts in
    place (restart_in_place); ``default_image``: the config's runtimeImage, for a job that names none."""
    spec, name = job.spec, job.metadata.name
    slot = worker(rank) if isinstance(rank, int) else rank
    role = role_of(spec, slot.role)
    command, args = container_command(job, slot)
    master_port = wiring.master_port
    shm_size = str(spec.shm_size or wiring.shm_size or default_shm_size)
    volumes, mounts = _volumes(job, shm_size)
    container: dict[str, Any] = {
        "name": constants.CONTAINER_NAME,
        "image": spec.image or default_image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": command,
        "env": rendezvous_env(job, slot, attempt, master_port) + scratch_env() + gpu_visibility_env(job, slot)
        + [e.to_kube() for e in spec.env]
        + ([e.to_kube() for e in role.env] if role is not None else []),
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        "ports": [
            {"name": constants.PORT_NAME_RENDEZVOUS, "containerPort": master_port, "protocol": "TCP"},
            {"name": constants.PORT_NAME_PROGRESS, "containerPort": constants.PROGRESS_PORT, "protocol": "TCP"},
            {"name": constants.PORT_NAME_METRICS, "containerPort": constants.METRICS_PORT, "protocol": "TCP"},
        ] + plugin_for(spec).container_ports(job),
        "volumeMounts": mounts,
        # a failed program that wrote no termination message gets its log's last lines as one
        "terminationMessagePolicy": constants.TERMINATION_MESSAGE_POLICY,
    }
    if args:
        container["args"] = args
    resources = build_resources(job, slot)
    if resources:
        container["resources"] = resources
    pod_spec: dict[str, Any] = {
        "hostname": slot_hostname(name, slot),
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
        pod_spec["schedulingGates"] = [{"name": constants.GANG_SCHEDULING_GATE}]
    if in_place:
        restart_in_place(job, pod_spec)
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
        slot_pod_name(name, slot, attempt),
        constants.COMPONENT_WORKER,  # every pod of the gang: the headless Service and the gang's NetworkPolicy select it
        **slot_labels(spec, slot), **{constants.LABEL_RESTART_ATTEMPT: str(attempt)},
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    return merge_network(pod, wiring)  # built here: nothing else holds it

