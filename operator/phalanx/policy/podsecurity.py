"""Pod Security levels (restricted < baseline < privileged): what a job's pods need, and a
refusal naming the cause and the namespace's label when the namespace enforces less."""

from __future__ import annotations

from phalanx.api.config import NetworkProfile
from phalanx.api.types import TrainingJobSpec
from phalanx.problems import Problem

LEVELS = ("restricted", "baseline", "privileged")
ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
# Volume types the restricted level allows; baseline allows every type but hostPath.
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})


def profile_level(profile: NetworkProfile) -> tuple[str, str]:
    """The level a network profile's pods need, and why (the profile may declare more)."""
    needs = [("restricted", "")]
    if profile.ipc_lock:
        needs.append(("privileged", "the IPC_LOCK capability for RDMA"))
    if profile.topo_file is not None and profile.topo_file.host_path:
        needs.append(("privileged", "a hostPath NCCL topology file"))
    if profile.pod_security_level:
        needs.append((profile.pod_security_level, "declared by the profile"))
    return max(needs, key=lambda n: LEVELS.index(n[0]))


def _volume_level(source: str | None) -> str:
    if source == "hostPath":
        return "privileged"
    return "restricted" if source in RESTRICTED_VOLUMES else "baseline"


def required_levels(spec: TrainingJobSpec, profile: NetworkProfile | None) -> list[tuple[str, str, str]]:
    """(level, field, reason) for everything in the job that needs more than restricted."""
    out = []
    if profile is not None:
        level, why = profile_level(profile)
        if level != "restricted":
            out.append((level, "spec.network.profile", f"network profile {spec.network.profile!r} needs {why}"))
    if spec.network.host_network:
        out.append(("privileged", "spec.network.hostNetwork", "the host network"))
    for i, volume in enumerate(spec.volumes):
        level = _volume_level(volume.source())
        if level != "restricted":
            out.append((level, f"spec.volumes[{i}]", f"a {volume.source()} volume"))
    if spec.checkpoint.volume is not None:
        level = _volume_level(spec.checkpoint.volume.source())
        if level != "restricted":
            out.append((level, "spec.checkpoint.volume", f"a {spec.checkpoint.volume.source()} volume"))
    return out


def pod_security_problems(spec: TrainingJobSpec, profile: NetworkProfile | None, namespace: str,
                          namespace_labels: dict[str, str] | None) -> list[Problem]:
    enforced = (namespace_labels or {}).get(ENFORCE_LABEL)
    if enforced not in LEVELS:
        return []  # not labelled: the cluster's default applies (the pod dry-run checks it)
    return [
        Problem(field, f"needs Pod Security level {level} ({why}); namespace {namespace} enforces {enforced} "
                       f"(label {ENFORCE_LABEL}={enforced})", "operator")
        for level, field, why in required_levels(spec, profile)
        if LEVELS.index(level) > LEVELS.index(enforced)
    ]
