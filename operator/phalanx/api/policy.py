"""The cluster's policy for TrainingJobs, owned by the admin (chart values → operator config, and
the chart's ValidatingAdmissionPolicy from the same values). A job can never do more than its
namespace's policy allows; every refusal names the field and the rule."""

from __future__ import annotations

from pydantic import Field

from phalanx.api.base import Model

CONTROL_PLANE_KEYS = ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"]


class PolicyRules(Model):
    """What a TrainingJob may ask for. ``None`` lists mean "any"."""

    allowed_volume_types: list[str] = Field(
        default_factory=lambda: ["persistentVolumeClaim", "configMap", "emptyDir", "csi", "ephemeral", "nfs"],
        description="VolumeSource members allowed in spec.volumes and spec.checkpoint.volume (no hostPath by default).")
    allow_secrets: bool = Field(False, description="Secret volumes, projected secrets and secretKeyRef env.")
    allowed_service_accounts: list[str] = Field(
        default_factory=list, description="spec.serviceAccountName values allowed (empty: none may be named).")
    allowed_priority_classes: list[str] | None = Field(None, description="spec.scheduling.priorityClassName values.")
    allowed_scheduler_names: list[str] = Field(
        default_factory=list, description="spec.scheduling.schedulerName values (empty: none may be named).")
    forbidden_node_selector_keys: list[str] = Field(
        default_factory=lambda: list(CONTROL_PLANE_KEYS),
        description="Node label keys jobs may not select on (control-plane nodes by default).")
    forbidden_toleration_keys: list[str] = Field(
        default_factory=lambda: list(CONTROL_PLANE_KEYS), description="Taint keys jobs may not tolerate.")
    allow_keyless_tolerations: bool = Field(False, description="A toleration without a key (operator Exists) tolerates every taint.")
    allowed_network_profiles: list[str] | None = Field(None, description="spec.network.profile values.")
    max_nodes: int | None = Field(None, ge=1, description="Most nodes (pods) per job, elastic maxNodes included.")
    max_restarts: int | None = Field(None, ge=0, description="Highest spec.failurePolicy.maxRestarts.")
    min_restart_backoff_seconds: int = Field(0, ge=0, description="Lowest spec.failurePolicy.backoffSeconds.")


class NamespacePolicy(Model):
    """Rules for the namespaces whose labels match (every pair must match)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    rules: PolicyRules = Field(default_factory=PolicyRules)


class ClusterPolicy(Model):
    """``namespaces``: first match wins; otherwise ``default``."""

    default: PolicyRules = Field(default_factory=PolicyRules)
    namespaces: list[NamespacePolicy] = Field(default_factory=list)

    def for_namespace(self, labels: dict[str, str] | None) -> PolicyRules:
        labels = labels or {}
        for entry in self.namespaces:
            if all(labels.get(k) == v for k, v in entry.match_labels.items()):
                return entry.rules
        return self.default
