"""The cluster's policy for TrainingJobs, owned by the admin (chart values → operator config, and
the chart's ValidatingAdmissionPolicy from the same values). A job can never do more than its
namespace's policy allows; every refusal names the field and the rule.

The defaults are for a cluster shared by tenants who do not trust each other: an admin loosens
them per namespace (``namespaces``) or for all (``default``)."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.base import Model, bounded_str
from phalanx.api.types import GangBackend

CONTROL_PLANE_KEYS = ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"]
# Taints the node lifecycle controller, kubectl cordon/drain and the cloud provider put on nodes
# that must not get new pods (cordoned, shut down, under memory/disk/pid pressure, without a pod
# network, not yet initialised). Tolerating them lands a job where the admin said no. Not here:
# not-ready and unreachable, which the DefaultTolerationSeconds admission plugin adds to every pod
# (NoExecute, 300 s) and which a job may shorten to fail over faster.
NODE_CONDITION_KEYS = [
    "node.kubernetes.io/unschedulable", "node.kubernetes.io/out-of-service", "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure", "node.kubernetes.io/pid-pressure", "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized",
]
# Volume types bounded by the job's namespace: its claims (and claim templates), its ConfigMaps,
# the pod's own data and scratch. Every other source is mounted by the kubelet with the node's
# identity (nfs, iscsi, rbd, cephfs, glusterfs, fc: any reachable export, around every
# PV/PVC boundary; csi inline: any driver's node publish; flexVolume: a node binary; hostPath,
# gitRepo, image ...): an admin adds those back where a namespace is trusted with them.
SAFE_VOLUME_TYPES = ["persistentVolumeClaim", "configMap", "emptyDir", "ephemeral", "downwardAPI", "projected"]
# The fields of core/v1 volume sources that name a Secret (Kubernetes 1.36; a unit test checks
# this against the OpenAPI spec). Each counts as a Secret: refused unless allowSecrets.
VOLUME_SECRET_REFS = {
    "azureFile": "secretName", "cephfs": "secretRef", "cinder": "secretRef", "csi": "nodePublishSecretRef",
    "flexVolume": "secretRef", "iscsi": "secretRef", "rbd": "secretRef", "scaleIO": "secretRef",
    "storageos": "secretRef",
}
# Every core/v1 VolumeProjection member (Kubernetes 1.36).
PROJECTED_SOURCES = ("clusterTrustBundle", "configMap", "downwardAPI", "podCertificate", "secret", "serviceAccountToken")
# Public trust anchors and the namespace's own ConfigMaps and pod metadata. Not serviceAccountToken
# (a token for the namespace's default service account, any audience: what cloud workload
# identity trusts) nor podCertificate (a certificate from a cluster signer); secret only with
# allowSecrets.
SAFE_PROJECTED_SOURCES = ["configMap", "downwardAPI", "clusterTrustBundle"]
# Backends whose pods kube-scheduler places: no second scheduler. Where Kueue enforces quota, an
# admin lists only kueue, or a job on native skips the queue.
SAFE_BACKENDS = [GangBackend.NATIVE, GangBackend.KUEUE, GangBackend.WORKLOAD]
# The schedulerName a backend sets on the pods when the job names none (backends/volcano.py,
# backends/coscheduling.py; tests/unit/phalanx/policy/test_cluster.py renders each backend to keep this true).
BACKEND_SCHEDULER_NAMES = {GangBackend.VOLCANO: constants.VOLCANO_SCHEDULER_NAME,
                           GangBackend.COSCHEDULING: constants.COSCHEDULING_SCHEDULER_NAME}
# Kubernetes reserves the prefix for its own classes (system-node-critical, system-cluster-critical):
# above every workload, preempting anything.
SYSTEM_PRIORITY_PREFIX = "system-"
DEFAULT_MAX_NODES = 1024


def effective_scheduler_name(scheduler_name: str | None, backend: str) -> str | None:
    """The schedulerName the pods get: the job's, else its backend's; None is kube-scheduler."""
    return scheduler_name or BACKEND_SCHEDULER_NAMES.get(GangBackend(backend))


NAMESPACE_PLACEHOLDER = "{namespace}"


class StorageGrant(Model):
    """Object storage a namespace's jobs may use for checkpoint.storage: a URI prefix (with
    ``{namespace}``, each namespace its own), the one endpoint its jobs name, and the Secrets
    that may hold its credentials."""

    uri: str = bounded_str(None, 1024, description="s3:// or gs:// prefix; a job's storage.uri is it or below it. "
                                                   "{namespace} stands for the job's namespace.")
    endpoint: str | None = bounded_str(patterns.ENDPOINT_URL, 512, default=None,
                                       description="The endpoint jobs name in storage.endpoint (null: none, the provider's own).")
    credentials_secrets: list[str] = Field(default_factory=list,
                                           description="Secrets jobs may name in storage.credentialsSecret (empty: none; "
                                                       "the pods' own identity only). Allowed without allowSecrets.")

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        v = v.rstrip("/")
        if not re.match(patterns.STORAGE_URI, v.replace(NAMESPACE_PLACEHOLDER, "namespace")):
            raise ValueError(f"must be {patterns.DESCRIPTIONS[patterns.STORAGE_URI]}; {NAMESPACE_PLACEHOLDER} may stand for the namespace")
        return v

    def for_namespace(self, namespace: str) -> str:
        return self.uri.replace(NAMESPACE_PLACEHOLDER, namespace)

    def admits(self, namespace: str, uri: str, endpoint: str | None, secret: str | None) -> bool:
        prefix = self.for_namespace(namespace)
        return ((uri == prefix or uri.startswith(prefix + "/")) and endpoint == self.endpoint
                and (secret is None or secret in self.credentials_secrets))


class PolicyRules(Model):
    """What a TrainingJob may ask for. ``None`` lists mean "any"."""

    allowed_volume_types: list[str] = Field(
        default_factory=lambda: list(SAFE_VOLUME_TYPES),
        description="VolumeSource members allowed in spec.volumes and spec.checkpoint.volume (default: the "
        "namespace-bounded ones; no nfs, csi, hostPath, ...); secret also needs allowSecrets.")
    allow_secrets: bool = Field(
        False, description="Secret volumes, projected secrets, secretKeyRef env and the Secrets volume sources name "
        "(csi.nodePublishSecretRef, rbd.secretRef, ...).")
    allowed_projected_sources: list[str] = Field(
        default_factory=lambda: list(SAFE_PROJECTED_SOURCES),
        description="projected volume sources allowed, each checked (default configMap, downwardAPI, "
        "clusterTrustBundle; add serviceAccountToken or podCertificate to allow them); secret also needs allowSecrets.")
    allowed_service_accounts: list[str] = Field(
        default_factory=list, description="spec.serviceAccountName values allowed (empty: none may be named).")
    allowed_priority_classes: list[str] | None = Field(
        None, description=f"spec.scheduling.priorityClassName values (null: any but {SYSTEM_PRIORITY_PREFIX}*, "
        "which only a list naming them allows).")
    allowed_backends: list[GangBackend] = Field(
        default_factory=lambda: list(SAFE_BACKENDS),
        description="spec.scheduling.backend values (default: those kube-scheduler places; volcano and coscheduling "
        "also need their scheduler in allowedSchedulerNames).")
    allowed_scheduler_names: list[str] = Field(
        default_factory=list, description="The pods' schedulerName: spec.scheduling.schedulerName, else the one the "
        "backend sets (volcano, scheduler-plugins-scheduler) (empty: kube-scheduler only).")
    allowed_queues: list[str] | None = Field(
        None, description="spec.scheduling.queue values (null: any; a Kueue LocalQueue is the namespace's own, "
        "a Volcano queue is cluster-wide: list them where volcano is allowed).")
    forbidden_node_selector_keys: list[str] = Field(
        default_factory=lambda: list(CONTROL_PLANE_KEYS),
        description="Node label keys jobs may not select on (control-plane nodes by default).")
    forbidden_toleration_keys: list[str] = Field(
        default_factory=lambda: CONTROL_PLANE_KEYS + NODE_CONDITION_KEYS,
        description="Taint keys jobs may not tolerate (control-plane nodes; cordoned, out-of-service, "
        "under-pressure and uninitialised nodes by default).")
    allow_keyless_tolerations: bool = Field(False, description="A toleration without a key (operator Exists) tolerates every taint.")
    allowed_checkpoint_storage: list[StorageGrant] = Field(
        default_factory=list, description="Object storage jobs may use for spec.checkpoint.storage (empty: none): "
        "each a URI prefix ({namespace}: the job's namespace), its endpoint and the credential Secrets allowed.")
    allowed_network_profiles: list[str] | None = Field(None, description="spec.network.profile values (default profile included).")
    max_nodes: int | None = Field(DEFAULT_MAX_NODES, ge=1, description="Most pods per job: workers (elastic maxNodes "
                                  "included) and spec.roles together (null: no limit).")
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
