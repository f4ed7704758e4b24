"""Hostile and harmless TrainingJobs and TrainingSweeps against the cluster policy, each under one
policy entry: tests/unit/test_policy_cases.py holds the operator's Python rules to them,
tests/integration/test_policy_admission.py the chart's ValidatingAdmissionPolicy (and the CRD's
CEL, for the env rules) on the real API server. ``field``: where the operator's problem is;
``words``: what the API server's refusal says (``spec.`` or ``spec.template.spec.`` included)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from phalanx.api.policy import (
    SAFE_BACKENDS,
    SAFE_PROJECTED_SOURCES,
    SAFE_VOLUME_TYPES,
    PolicyRules,
    StorageGrant,
)

SEAWEED = "http://seaweedfs.storage.svc:8333"

# The policy entries the cases run under (the chart's policy.namespaces, one label value each).
ENTRIES: dict[str, PolicyRules] = {
    # the chart's defaults, with a small pod cap
    "strict": PolicyRules(max_nodes=8),
    # an admin who trusts the namespace with more
    "loose": PolicyRules(
        max_nodes=8, max_restarts=5,
        allowed_volume_types=[*SAFE_VOLUME_TYPES, "csi", "nfs", "rbd", "azureFile"],
        allowed_projected_sources=[*SAFE_PROJECTED_SOURCES, "serviceAccountToken"],
        allowed_backends=[*SAFE_BACKENDS, "volcano", "coscheduling"], allowed_scheduler_names=["volcano"],
        allowed_queues=["team-a"], allowed_priority_classes=["high"],
        allowed_checkpoint_storage=[StorageGrant(uri="s3://shared/ckpt", endpoint=SEAWEED, credentials_secrets=["ckpt-s3"]),
                                    StorageGrant(uri="s3://ckpt/{namespace}")]),
    # rules whose field has a default: a job that leaves it out is held to the default
    "defaults": PolicyRules(max_nodes=8, allowed_network_profiles=["ib"], min_restart_backoff_seconds=30),
}

JOB = {
    "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "case"},
    "spec": {"image": "ghcr.io/acme/train:1.0", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8},
             "command": ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"]},
}
IB = {"network": {"profile": "ib"}, "failurePolicy": {"backoffSeconds": 60}}  # "defaults"-clean


@dataclass(frozen=True)
class Case:
    name: str
    entry: str
    spec: dict[str, Any]  # merged into the job's spec, or the sweep's template's
    field: str = ""  # hostile: the operator's problem field starts so
    words: str = ""  # hostile: in the API server's refusal
    sweep: dict[str, Any] | None = None  # a TrainingSweep with this spec (its template: JOB + spec)
    # "policy": the admission policy and the operator's policy; "rule": the admission policy and an
    # operator rule that is not the policy's; "crd": the CRD's CEL and its Python twin
    source: str = "policy"

    @property
    def hostile(self) -> bool:
        return bool(self.words)


def manifest(case: Case) -> dict[str, Any]:
    spec = copy.deepcopy(JOB["spec"]) | copy.deepcopy(case.spec)
    name = case.name.lower().replace("_", "-")
    if case.sweep is None:
        return {**copy.deepcopy(JOB), "metadata": {"name": name}, "spec": spec}
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep", "metadata": {"name": name},
            "spec": {"template": {"spec": spec}, **copy.deepcopy(case.sweep)}}


def _lr(*values: float) -> list[dict[str, Any]]:
    return [{"path": "training.lr", "values": list(values)}]


SECRET_ENV = {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
TOKEN = {"serviceAccountToken": {"path": "token", "audience": "sts.amazonaws.com", "expirationSeconds": 86400}}
RBD = {"monitors": ["10.0.0.1:6789"], "image": "ckpt", "secretRef": {"name": "ceph"}}

HOSTILE = [
    # --- env the runtime or the operator reads (the CRD's rules; the operator's ncclEnv rule) ---
    Case("gpuEnv", "strict", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
         "spec.env[0].name", "NVIDIA_* and AMD_VISIBLE_DEVICES", source="crd"),
    Case("gpuCapsEnv", "strict", {"env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]},
         "spec.env[0].name", "tell the node's container runtime which devices", source="crd"),
    Case("gaudiEnv", "strict", {"env": [{"name": "HABANA_VISIBLE_MODULES", "value": "0,1,2,3,4,5,6,7"}]},
         "spec.env[0].name", "tell the node's container runtime which devices", source="crd"),
    Case("roleGpuEnv", "strict", {"roles": [{"name": "ps", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]},
         "spec.roles[0].env[0].name", "tell the node's container runtime which devices", source="crd"),
    Case("rendezvousEnv", "strict", {"env": [{"name": "MASTER_ADDR", "value": "evil.example"}]},
         "spec.env[0].name", "are the rendezvous variables the operator sets", source="crd"),
    Case("operatorEnv", "strict", {"env": [{"name": "PHALANX_CHECKPOINT_DIR", "value": "/elsewhere"}]},
         "spec.env[0].name", "PHALANX_* variables are set by the operator", source="crd"),
    Case("sweepGpuEnv", "strict", {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
         "spec.template.spec.env[0].name", "tell the node's container runtime which devices", sweep={"parameters": _lr(0.1)}, source="crd"),
    Case("ncclGpuEnv", "strict", {"network": {"ncclEnv": {"NVIDIA_VISIBLE_DEVICES": "all"}}},
         "spec.network.ncclEnv", "spec.network.ncclEnv: NVIDIA_*", source="rule"),
    # --- volumes ---
    Case("hostPath", "strict", {"checkpoint": {"volume": {"hostPath": {"path": "/"}}}, "nodes": 1},
         "spec.checkpoint.volume", "spec.checkpoint.volume: a volume type"),
    Case("socket", "strict", {"volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd/containerd.sock"}}]},
         "spec.volumes[0]", "spec.volumes: a volume type"),
    Case("secret", "strict", {"volumes": [{"name": "s", "secret": {"secretName": "db"}}]},
         "spec.volumes[0]", "spec.volumes: a volume type"),
    Case("nfs", "strict", {"volumes": [{"name": "n", "nfs": {"server": "10.0.0.9", "path": "/exports/other-team"}}]},
         "spec.volumes[0]", "spec.volumes: a volume type"),
    Case("csiCheckpoint", "strict", {"checkpoint": {"volume": {"csi": {"driver": "s3.csi.aws.com"}}}},
         "spec.checkpoint.volume", "spec.checkpoint.volume: a volume type"),
    Case("iscsi", "strict", {"volumes": [{"name": "i", "iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.2001-04.com.example:t", "lun": 0}}]},
         "spec.volumes[0]", "spec.volumes: a volume type"),
    Case("csiSecret", "loose", {"volumes": [{"name": "c", "csi": {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": "db"}}}]},
         "spec.volumes[0].csi.nodePublishSecretRef", "spec.volumes: a volume source names a Secret"),
    Case("rbdSecret", "loose", {"checkpoint": {"volume": {"rbd": RBD}}},
         "spec.checkpoint.volume.rbd.secretRef", "spec.checkpoint.volume: a volume source names a Secret"),
    Case("azureFileSecret", "loose", {"volumes": [{"name": "a", "azureFile": {"secretName": "storage", "shareName": "data"}}]},
         "spec.volumes[0].azureFile.secretName", "spec.volumes: a volume source names a Secret"),
    Case("projectedToken", "strict", {"volumes": [{"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}, TOKEN]}}]},
         "spec.volumes[0].projected.sources[1].serviceAccountToken", "spec.volumes: a projected source"),
    Case("projectedSecret", "loose", {"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "db"}}]}}]},
         "spec.volumes[0].projected.sources[0].secret", "spec.volumes: a projected source"),
    Case("projectedCertificate", "loose", {"volumes": [{"name": "p", "projected": {"sources": [
        {"podCertificate": {"signerName": "example.com/signer", "keyType": "ED25519", "credentialBundlePath": "creds.pem"}}]}}]},
         "spec.volumes[0].projected.sources[0].podCertificate", "spec.volumes: a projected source"),
    Case("checkpointToken", "strict", {"checkpoint": {"volume": {"projected": {"sources": [TOKEN]}}}, "nodes": 1},
         "spec.checkpoint.volume.projected.sources[0].serviceAccountToken", "spec.checkpoint.volume: a projected source"),
    # --- Secrets and identity ---
    Case("secretEnv", "strict", {"env": [SECRET_ENV]}, "spec.env[0].valueFrom.secretKeyRef", "spec.env: Secret references"),
    Case("roleSecretEnv", "strict", {"roles": [{"name": "ps", "env": [SECRET_ENV]}]},
         "spec.roles[0].env[0].valueFrom.secretKeyRef", "spec.roles[].env: Secret references"),
    Case("foreignSA", "strict", {"serviceAccountName": "kube-admin"}, "spec.serviceAccountName", "spec.serviceAccountName: not allowed"),
    # --- scheduling ---
    Case("scheduler", "strict", {"scheduling": {"schedulerName": "rogue"}},
         "spec.scheduling.schedulerName", "spec.scheduling.schedulerName: not allowed by the cluster policy: rogue"),
    Case("volcano", "strict", {"scheduling": {"backend": "volcano"}},
         "spec.scheduling.backend", "spec.scheduling.backend: not allowed by the cluster policy: volcano"),
    Case("coschedulingScheduler", "loose", {"scheduling": {"backend": "coscheduling"}},
         "spec.scheduling.backend", "spec.scheduling.backend: its scheduler is not allowed by the cluster policy: scheduler-plugins-scheduler"),
    Case("systemPriority", "strict", {"scheduling": {"priorityClassName": "system-node-critical"}},
         "spec.scheduling.priorityClassName", "spec.scheduling.priorityClassName: not allowed"),
    Case("priority", "loose", {"scheduling": {"priorityClassName": "low"}},
         "spec.scheduling.priorityClassName", "spec.scheduling.priorityClassName: not allowed"),
    Case("queue", "loose", {"scheduling": {"backend": "kueue", "queue": "team-b"}},
         "spec.scheduling.queue", "spec.scheduling.queue: not allowed"),
    # --- placement ---
    Case("tolerateAll", "strict", {"tolerations": [{"operator": "Exists"}]}, "spec.tolerations[0]", "spec.tolerations: a toleration without a key"),
    Case("cordoned", "strict", {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]},
         "spec.tolerations[0].key", "spec.tolerations: tolerating these taints"),
    Case("memoryPressure", "strict", {"tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists"}]},
         "spec.tolerations[0].key", "spec.tolerations: tolerating these taints"),
    Case("controlPlane", "strict", {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}},
         "spec.nodeSelector[node-role.kubernetes.io/control-plane]", "spec.nodeSelector: these node label keys"),
    # --- limits, and the defaults of absent fields ---
    Case("nodes", "strict", {"nodes": 9}, "spec.nodes", "spec.nodes: at most 8 pods per job"),
    Case("rolePods", "strict", {"roles": [{"name": "ps", "replicas": 6}, {"name": "chief"}]}, "spec.roles", "spec.nodes: at most 8 pods per job"),
    Case("restarts", "loose", {"failurePolicy": {"maxRestarts": 9}}, "spec.failurePolicy.maxRestarts", "spec.failurePolicy.maxRestarts: at most 5"),
    Case("defaultProfile", "defaults", {"failurePolicy": {"backoffSeconds": 60}},
         "spec.network.profile", "spec.network.profile: not allowed by the cluster policy: default"),
    Case("defaultBackoff", "defaults", {"network": {"profile": "ib"}},
         "spec.failurePolicy.backoffSeconds", "spec.failurePolicy.backoffSeconds: at least 30"),
    # --- sweeps: the template, then every value of a parameter or a list trial ---
    Case("sweepTemplateNfs", "strict", {"volumes": [{"name": "n", "nfs": {"server": "10.0.0.9", "path": "/x"}}]},
         "spec.template.spec.volumes[0]", "spec.template.spec.volumes: a volume type", sweep={"parameters": _lr(0.1)}),
    Case("sweepTemplateCordoned", "strict", {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
         "spec.template.spec.tolerations[0].key", "spec.template.spec.tolerations: tolerating these taints", sweep={"parameters": _lr(0.1)}),
    Case("sweepNodes", "strict", {}, "spec.parameters[0].values[1]", "a value of nodes the cluster policy does not allow",
         sweep={"parameters": [{"path": "nodes", "values": [1, 16]}]}),
    Case("sweepNodesRange", "strict", {}, "spec.parameters[0].range", "a value of nodes the cluster policy does not allow",
         sweep={"algorithm": "random", "maxTrials": 1, "parameters": [{"path": "nodes", "range": {"min": 1, "max": 9.5}}]}),
    Case("sweepElastic", "strict", {"elastic": {"minNodes": 1, "maxNodes": 2}}, "spec.parameters[0].values[1]",
         "a value of elastic.maxNodes", sweep={"parameters": [{"path": "elastic.maxNodes", "values": [4, 16]}]}),
    Case("sweepPriority", "strict", {}, "spec.parameters[0].values[0]", "a value of scheduling.priorityClassName",
         sweep={"parameters": [{"path": "scheduling.priorityClassName", "values": ["system-cluster-critical"]}]}),
    Case("sweepBackend", "strict", {}, "spec.parameters[0].values[1]", "a value of scheduling.backend",
         sweep={"parameters": [{"path": "scheduling.backend", "values": ["native", "volcano"]}]}),
    Case("sweepBackendScheduler", "loose", {}, "spec.parameters[0].values[0]", "a value of scheduling.backend",
         sweep={"parameters": [{"path": "scheduling.backend", "values": ["coscheduling"]}]}),
    Case("sweepServiceAccount", "strict", {}, "spec.parameters[0].values[0]", "a value of serviceAccountName",
         sweep={"parameters": [{"path": "serviceAccountName", "values": ["kube-admin"]}]}),
    Case("sweepQueue", "loose", {"scheduling": {"backend": "kueue", "queue": "team-a"}}, "spec.parameters[0].values[1]",
         "a value of scheduling.queue", sweep={"parameters": [{"path": "scheduling.queue", "values": ["team-a", "team-b"]}]}),
    Case("sweepRestartsRange", "loose", {}, "spec.parameters[0].range", "a value of failurePolicy.maxRestarts",
         sweep={"algorithm": "random", "maxTrials": 2, "parameters": [{"path": "failurePolicy.maxRestarts", "range": {"min": 1, "max": 9}}]}),
    Case("sweepBackoff", "defaults", IB, "spec.parameters[0].values[0]", "a value of failurePolicy.backoffSeconds",
         sweep={"parameters": [{"path": "failurePolicy.backoffSeconds", "values": [5, 60]}]}),
    Case("sweepProfile", "defaults", IB, "spec.parameters[0].values[1]", "a value of network.profile",
         sweep={"parameters": [{"path": "network.profile", "values": ["ib", "default"]}]}),
    Case("sweepVolumeParameter", "strict", {}, "spec.parameters[0].path", "volumes and storage are checked in the template",
         sweep={"parameters": [{"path": "checkpoint.volume.nfs.server", "values": ["10.0.0.9"]}]}, source="rule"),
    Case("sweepStorageParameter", "loose", {}, "spec.parameters[0].path", "volumes and storage are checked in the template",
         sweep={"parameters": [{"path": "checkpoint.storage.uri", "values": ["s3://ckpt/other-team"]}]}, source="rule"),
    # --- object storage: only what a grant of the namespace admits, URI, endpoint and Secret together ---
    Case("storageNotGranted", "strict", {"checkpoint": {"storage": {"uri": "s3://ckpt/team"}}},
         "spec.checkpoint.storage", "spec.checkpoint.storage: not allowed by the cluster policy"),
    Case("storageOtherNamespace", "loose", {"checkpoint": {"storage": {"uri": "s3://ckpt/team-b/run"}}},
         "spec.checkpoint.storage.uri", "spec.checkpoint.storage: not allowed by the cluster policy"),
    Case("storageBesideGrant", "loose", {"checkpoint": {"storage": {"uri": "s3://shared/ckpt-other"}}},
         "spec.checkpoint.storage.uri", "spec.checkpoint.storage: not allowed by the cluster policy"),
    Case("storageOtherEndpoint", "loose", {"checkpoint": {"storage": {"uri": "s3://shared/ckpt/team", "endpoint": "http://evil.example:9000"}}},
         "spec.checkpoint.storage.endpoint", "spec.checkpoint.storage: not allowed by the cluster policy"),
    Case("storageNoEndpoint", "loose", {"checkpoint": {"storage": {"uri": "s3://shared/ckpt/team"}}},
         "spec.checkpoint.storage.endpoint", "spec.checkpoint.storage: not allowed by the cluster policy"),
    Case("storageOtherSecret", "loose", {"checkpoint": {"storage": {"uri": "s3://shared/ckpt/team", "endpoint": SEAWEED,
                                                                    "credentialsSecret": "admin-keys"}}},
         "spec.checkpoint.storage.credentialsSecret", "spec.checkpoint.storage: not allowed by the cluster policy"),
    Case("sweepTemplateStorage", "strict", {"checkpoint": {"storage": {"uri": "s3://ckpt/team"}}},
         "spec.template.spec.checkpoint.storage", "spec.template.spec.checkpoint.storage: not allowed", sweep={"parameters": _lr(0.1)}),
    Case("sweepTrialScheduler", "strict", {}, "spec.trials[1]", "a value of scheduling.schedulerName",
         sweep={"algorithm": "list", "trials": [{"training.lr": 0.1}, {"scheduling.schedulerName": "rogue"}]}),
    Case("sweepTrialNodes", "strict", {}, "spec.trials[0]", "a value of nodes",
         sweep={"algorithm": "list", "trials": [{"nodes": 12}]}),
    Case("sweepTrialBackend", "loose", {}, "spec.trials[0]", "a value of scheduling.backend",
         sweep={"algorithm": "list", "trials": [{"scheduling.backend": "coscheduling"}]}),
]

HARMLESS = [
    Case("projectedBundle", "strict", {"volumes": [{"name": "p", "projected": {"sources": [
        {"configMap": {"name": "c"}}, {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
        {"clusterTrustBundle": {"signerName": "example.com/ca", "path": "ca.pem"}}]}}]}),
    Case("claims", "strict", {"checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}},
                              "volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                                  "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]}),
    Case("processEnv", "strict", {"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}, {"name": "HIP_VISIBLE_DEVICES", "value": "0"},
                                          {"name": "OMP_NUM_THREADS", "value": "4"}, {"name": "NCCL_DEBUG", "value": "WARN"}]}),
    Case("priorityAndQueue", "strict", {"scheduling": {"backend": "kueue", "queue": "q", "priorityClassName": "training-high"}}),
    Case("workload", "strict", {"scheduling": {"backend": "workload"}}),
    Case("notReady", "strict", {"tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                                                 "tolerationSeconds": 30}]}),
    Case("eightPods", "strict", {"nodes": 6, "roles": [{"name": "ps"}, {"name": "chief"}]}),
    Case("trusted", "loose", {"checkpoint": {"volume": {"nfs": {"server": "10.0.0.9", "path": "/ckpt"}}},
                              "volumes": [{"name": "c", "csi": {"driver": "s3.csi.aws.com"}},
                                          {"name": "t", "projected": {"sources": [TOKEN]}}],
                              "scheduling": {"backend": "volcano", "queue": "team-a", "priorityClassName": "high"}}),
    Case("storageGranted", "loose", {"checkpoint": {"storage": {"uri": "s3://shared/ckpt/team/run", "endpoint": SEAWEED,
                                                                "credentialsSecret": "ckpt-s3", "region": "us-east-1"},
                                                    "intervalSteps": 100}}),
    Case("storageGrantItself", "loose", {"checkpoint": {"storage": {"uri": "s3://shared/ckpt", "endpoint": SEAWEED}}}),
    Case("coschedulingNamed", "loose", {"scheduling": {"backend": "coscheduling", "schedulerName": "volcano"}}),
    Case("defaultsMet", "defaults", IB),
    Case("sweep", "strict", {}, sweep={"parameters": [{"path": "nodes", "values": [1, 8]},
                                                      {"path": "scheduling.priorityClassName", "values": ["low", "high"]}]}),
    Case("sweepRange", "strict", {}, sweep={"algorithm": "random", "maxTrials": 2,
                                            "parameters": [{"path": "nodes", "range": {"min": 1, "max": 8.9}}]}),
    Case("sweepNamedBackend", "loose", {}, sweep={"parameters": [{"path": "scheduling.backend", "values": ["coscheduling"]},
                                                                 {"path": "scheduling.schedulerName", "values": ["volcano"]}]}),
    Case("sweepTrials", "loose", {}, sweep={"algorithm": "list", "trials": [
        {"scheduling.backend": "coscheduling", "scheduling.schedulerName": "volcano"}, {"scheduling.queue": "team-a"}]}),
]
