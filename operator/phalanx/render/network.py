"""NCCL / RDMA pod wiring for a job on a cluster network profile (pure).

``render_network(spec, profile)`` decides *what* a worker needs (env, extra resources, Multus
annotation, IPC_LOCK, NCCL_TOPO_FILE volume, hostNetwork + DNS policy + clash-free ports, /dev/shm
size); ``apply_network(pod, wiring)`` merges it into a rendered Pod dict.

Only system variables are set by default (interfaces, HCAs, GID index, cross-NIC, IB timeouts,
topology file, GPUDirect-TCPX devices, the PyTorch NCCL watchdog). Debug variables (NCCL_DEBUG,
NCCL_P2P_LEVEL, NCCL_IB_DISABLE, NCCL_ALGO, NCCL_PROTO, ...) come only from the job's
``network.ncclEnv``, which also overrides any system value.
"""

from __future__ import annotations

import copy
import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Any

from phalanx import constants
from phalanx.api.config import Fabric, NetworkProfile

# Variables worth a warning when a job sets them (debug or tuning knobs that hurt when left on in production: NCCL's own docs say so).
DEBUG_ONLY_VARS = frozenset({
    "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL", "NCCL_ALGO", "NCCL_PROTO",
    "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
})
_RDMA_FABRICS = (Fabric.INFINIBAND, Fabric.ROCE)


@dataclass
class NetworkWiring:
    env: list[dict[str, str]] = field(default_factory=list)  # core/v1 EnvVar, ordered
    resources: dict[str, int] = field(default_factory=dict)  # extra requests = limits per pod
    annotations: dict[str, str] = field(default_factory=dict)
    capabilities_add: list[str] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    host_network: bool = False
    dns_policy: str | None = None
    shm_size: str | None = None  # profile default; spec.shmSize wins (pod renderer)
    master_port: int = constants.DEFAULT_MASTER_PORT
    progress_port: int = constants.PROGRESS_PORT
    metrics_port: int = constants.METRICS_PORT
    warnings: list[str] = field(default_factory=list)  # worth an Event

    def env_dict(self) -> dict[str, str]:
        return {e["name"]: e["value"] for e in self.env}


def host_ports(job_key: str, port_range: tuple[int, int] = constants.HOST_NETWORK_PORT_RANGE) -> tuple[int, int, int]:
    """Three consecutive host ports (rendezvous, progress, metrics) for a hostNetwork job, from a
    stable hash of its key ('namespace/name') inside ``port_range`` (inclusive)."""
    lo, hi = port_range
    slots = (hi - lo + 1) // 3
    if slots < 1:
        raise ValueError(f"port range {lo}-{hi} holds fewer than 3 ports")
    h = int.from_bytes(hashlib.sha256(job_key.encode()).digest()[:8], "big")
    base = lo + (h % slots) * 3
    return base, base + 1, base + 2


def _ib_hca(hcas: list[str]) -> str:
    """'=mlx5_0:1,mlx5_1:1' — the '=' makes NCCL match exactly (mlx5_1 would match mlx5_10..)."""
    items = [h.lstrip("=^") for h in hcas]
    return "=" + ",".join(items)


def render_network(
    spec: Any,
    profile: NetworkProfile,
    *,
    job_key: str | None = None,
    port_range: tuple[int, int] = constants.HOST_NETWORK_PORT_RANGE,
) -> NetworkWiring:
    """Everything the job's worker pods need for ``profile``'s fabric.

    ``job_key`` ('namespace/name') seeds the hostNetwork port block; pass it whenever hostNetwork
    may be on (without it the spec's own content is hashed, which two identical jobs share).
    The spec's network is checked against the profile by ``phalanx.validate.validate_network``.
    """
    w = NetworkWiring()
    env = _fabric_env(profile, w)
    _topo_file(profile, w, env)
    env.update(_watchdog_env(profile))
    # Further system env of the profile (e.g. FI_PROVIDER=efa for old EFA plugins, NCCL_NET).
    env.update({k: str(v) for k, v in profile.env.items()})
    _job_overrides(spec, w, env)

    w.resources = profile.extra_resources()
    if profile.multus_networks:
        w.annotations[constants.ANNOTATION_MULTUS_NETWORKS] = profile.multus_networks
    if profile.ipc_lock:
        w.capabilities_add.append("IPC_LOCK")
    if profile.shm_size is not None:
        w.shm_size = str(profile.shm_size)

    if spec.network.host_network and profile.allow_host_network:
        w.host_network = True
        w.dns_policy = constants.DNS_POLICY_HOST_NETWORK
        key = job_key or hashlib.sha256(spec.model_dump_json().encode()).hexdigest()
        w.master_port, w.progress_port, w.metrics_port = host_ports(key, port_range)

    w.env = [{"name": k, "value": v} for k, v in env.items()]
    return w


def _fabric_env(profile: NetworkProfile, w: NetworkWiring) -> dict[str, str]:
    """The fabric's system variables: interfaces, HCAs, GID index, IB timeouts, cross-NIC, TCPX."""
    env: dict[str, str] = {}
    fabric = Fabric(profile.fabric)
    if profile.socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = profile.socket_ifname
    if fabric in _RDMA_FABRICS:
        if profile.hcas:
            env["NCCL_IB_HCA"] = _ib_hca(profile.hcas)
        if fabric == Fabric.ROCE and profile.gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(profile.gid_index)
        if profile.ib_timeout is not None:
            env["NCCL_IB_TIMEOUT"] = str(profile.ib_timeout)
        if profile.ib_retry_cnt is not None:
            env["NCCL_IB_RETRY_CNT"] = str(profile.ib_retry_cnt)
    elif profile.hcas or profile.gid_index is not None:
        w.warnings.append(f"network profile sets HCAs/GID index but fabric is {fabric.value}; ignored")
    if fabric in (*_RDMA_FABRICS, Fabric.EFA) and profile.cross_nic is not None:
        env["NCCL_CROSS_NIC"] = str(profile.cross_nic)
    if fabric == Fabric.GPUDIRECT_TCPX:
        if profile.tcpx_socket_ifname:
            env["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] = profile.tcpx_socket_ifname
        if profile.tcpx_ctrl_dev:
            env["NCCL_GPUDIRECTTCPX_CTRL_DEV"] = profile.tcpx_ctrl_dev
    return env


def _topo_file(profile: NetworkProfile, w: NetworkWiring, env: dict[str, str]) -> None:
    """NCCL_TOPO_FILE, mounted from the node or a ConfigMap (or already in the image)."""
    if profile.topo_file is None:
        return
    tf = profile.topo_file
    env["NCCL_TOPO_FILE"] = tf.path
    fname = posixpath.basename(tf.path)
    if tf.host_path:
        w.volumes.append({"name": constants.TOPO_FILE_VOLUME_NAME,
                          "hostPath": {"path": tf.host_path, "type": "File"}})
        w.volume_mounts.append({"name": constants.TOPO_FILE_VOLUME_NAME, "mountPath": tf.path, "readOnly": True})
    elif tf.config_map:
        w.volumes.append({"name": constants.TOPO_FILE_VOLUME_NAME,
                          "configMap": {"name": tf.config_map, "items": [{"key": fname, "path": fname}]}})
        w.volume_mounts.append({"name": constants.TOPO_FILE_VOLUME_NAME, "mountPath": tf.path,
                                "subPath": fname, "readOnly": True})
    # Neither: the file is in the image (e.g. a cloud's base image); only the env is set.


def _watchdog_env(profile: NetworkProfile) -> dict[str, str]:
    """The PyTorch NCCL watchdog and the runtime's process-group timeout."""
    wd = profile.watchdog
    return {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": str(wd.async_error_handling),
        "TORCH_NCCL_ENABLE_MONITORING": "1" if wd.enable_monitoring else "0",
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(wd.heartbeat_timeout_seconds),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1" if wd.dump_on_timeout else "0",
        constants.ENV_PG_TIMEOUT_SECONDS: str(wd.pg_timeout_seconds),
    }


def _job_overrides(spec: Any, w: NetworkWiring, env: dict[str, str]) -> None:
    """The job's own overrides (the only way debug variables get in) win."""
    for k, v in spec.network.nccl_env.items():
        if k in DEBUG_ONLY_VARS:
            w.warnings.append(f"network.ncclEnv sets debug variable {k}={v}; remove it for production runs")
        if k == "NCCL_IB_HCA" and v and v[0] not in "=^":
            w.warnings.append(
                f"network.ncclEnv NCCL_IB_HCA={v!r} has no '=' prefix; NCCL matches it as a prefix "
                "(mlx5_1 also selects mlx5_10..mlx5_19)"
            )
        env[k] = str(v)


# ---------------------------------------------------------------------------------------------
# Merge into a pod

_PORT_ENV = {
    constants.ENV_MASTER_PORT: "master_port",
    constants.ENV_PET_MASTER_PORT: "master_port",
    constants.ENV_PROGRESS_PORT: "progress_port",
    constants.ENV_METRICS_PORT: "metrics_port",
}
_PORT_NAMES = {constants.PORT_NAME_RENDEZVOUS: "master_port", constants.PORT_NAME_PROGRESS: "progress_port", constants.PORT_NAME_METRICS: "metrics_port"}


def _trainer(pod_spec: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec.setdefault("containers", [])
    for c in containers:
        if c.get("name") == constants.CONTAINER_NAME:
            return c
    if not containers:
        containers.append({"name": constants.CONTAINER_NAME})
    return containers[0]


def apply_network(pod: dict[str, Any], wiring: NetworkWiring) -> dict[str, Any]:
    """A copy of ``pod`` with ``wiring`` merged into its trainer container and pod spec.

    Env the pod already sets (the user's spec.env) is kept; wiring adds the rest. Extended
    resources go into requests and limits; Multus networks are appended to an existing list;
    volumes/mounts are added unless one with the same name/mountPath exists; with hostNetwork the
    rendezvous/progress/metrics env and container ports move to the job's port block, and a
    ``PET_RDZV_ENDPOINT`` keeps its host but gets the new port.
    """
    return merge_network(copy.deepcopy(pod), wiring)


def merge_network(pod: dict[str, Any], wiring: NetworkWiring) -> dict[str, Any]:
    """:func:`apply_network` in place: for a pod just built that nothing else holds (a copy per
    pod was a third of a 512-pod gang's render)."""
    meta = pod.setdefault("metadata", {})
    spec = pod.setdefault("spec", {})
    c = _trainer(spec)

    env = c.setdefault("env", [])
    have = {e.get("name") for e in env}
    env.extend(dict(e) for e in wiring.env if e["name"] not in have)
    if wiring.host_network:
        for e in env:
            attr = _PORT_ENV.get(e.get("name"))
            if attr and "value" in e:
                e["value"] = str(getattr(wiring, attr))
            elif e.get("name") == constants.ENV_PET_RDZV_ENDPOINT and "value" in e:
                host = e["value"].rsplit(":", 1)[0]
                e["value"] = f"{host}:{wiring.master_port}"
        for p in c.get("ports") or []:
            attr = _PORT_NAMES.get(p.get("name"))
            if attr:
                p["containerPort"] = getattr(wiring, attr)
                p.pop("hostPort", None)

    if wiring.resources:
        res = c.setdefault("resources", {})
        for kind in ("requests", "limits"):
            bucket = res.setdefault(kind, {})
            for k, v in wiring.resources.items():
                bucket[k] = v

    if wiring.annotations:
        ann = meta.setdefault("annotations", {})
        for k, v in wiring.annotations.items():
            if k == constants.ANNOTATION_MULTUS_NETWORKS and ann.get(k) and v not in ann[k]:
                ann[k] = f"{ann[k]},{v}"
            else:
                ann.setdefault(k, v)

    if wiring.capabilities_add:
        caps = c.setdefault("securityContext", {}).setdefault("capabilities", {})
        add = caps.setdefault("add", [])
        for cap in wiring.capabilities_add:
            if cap not in add:
                add.append(cap)

    vols = spec.setdefault("volumes", [])
    vol_names = {v.get("name") for v in vols}
    vols.extend(copy.deepcopy(v) for v in wiring.volumes if v["name"] not in vol_names)
    mounts = c.setdefault("volumeMounts", [])
    mount_paths = {m.get("mountPath") for m in mounts}
    mounts.extend(dict(m) for m in wiring.volume_mounts if m["mountPath"] not in mount_paths)
    if not vols:
        spec.pop("volumes")
    if not mounts:
        c.pop("volumeMounts")

    if wiring.shm_size:
        shm_mount = next((m for m in c.get("volumeMounts", []) if m.get("mountPath") == constants.SHM_MOUNT_PATH), None)
        if shm_mount is None:
            spec.setdefault("volumes", []).append(
                {"name": constants.SHM_VOLUME_NAME, "emptyDir": {"medium": "Memory", "sizeLimit": wiring.shm_size}})
            c.setdefault("volumeMounts", []).append({"name": constants.SHM_VOLUME_NAME, "mountPath": constants.SHM_MOUNT_PATH})

    if wiring.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = wiring.dns_policy or constants.DNS_POLICY_HOST_NETWORK
    return pod
