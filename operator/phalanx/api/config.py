"""Cluster-level operator configuration (Helm values → ConfigMap → operator): network profiles
and topology levels. Pure pydantic, shared by the operator, the planner and `phalanx plan`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Literal

from pydantic import Field, PrivateAttr, model_validator

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.kubetypes import Toleration
from phalanx.api.policy import ClusterPolicy
from phalanx.api.types import Model, Quantity


class Fabric(StrEnum):
    INFINIBAND = "infiniband"
    ROCE = "roce"
    EFA = "efa"
    GPUDIRECT_TCPX = "gpudirect-tcpx"
    ETHERNET = "ethernet"


class TopoFile(Model):
    path: str = Field(..., pattern=r"^/", description="Path of NCCL_TOPO_FILE inside the pod.")
    host_path: str | None = Field(None, description="Mount from the node (e.g. /opt/microsoft/ndv5-topo.xml).")
    config_map: str | None = Field(None, description="Or from a ConfigMap (key = file name).")


class TorchWatchdog(Model):
    async_error_handling: int = Field(3, ge=0, le=3, description="TORCH_NCCL_ASYNC_ERROR_HANDLING")
    enable_monitoring: bool = Field(True, description="TORCH_NCCL_ENABLE_MONITORING")
    heartbeat_timeout_seconds: int = Field(600, ge=1, description="TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC")
    dump_on_timeout: bool = Field(False, description="TORCH_NCCL_DUMP_ON_TIMEOUT")
    pg_timeout_seconds: int = Field(600, ge=1, description="Process-group timeout (PHALANX_PG_TIMEOUT_SECONDS).")


class NetworkProfile(Model):
    fabric: Fabric = Fabric.ETHERNET
    hcas: list[str] = Field(default_factory=list, description="HCAs as <hca>[:port]; rendered NCCL_IB_HCA='=...'.")
    socket_ifname: str | None = Field(None, description="NCCL_SOCKET_IFNAME (prefix list, ^ excludes, = exact).")
    gid_index: int | None = Field(None, ge=0, description="NCCL_IB_GID_INDEX (RoCE).")
    cross_nic: int | None = Field(None, ge=0, le=2, description="NCCL_CROSS_NIC (0 rail-optimised).")
    ib_timeout: int | None = Field(None, ge=1, le=31)
    ib_retry_cnt: int | None = Field(None, ge=0, le=7)
    rdma_resource: str | None = Field(None, description="Extended resource for RDMA, e.g. rdma/rdma_shared_device_a.")
    rdma_count: int = Field(1, ge=1)
    multus_networks: str | None = Field(None, description="k8s.v1.cni.cncf.io/networks annotation value.")
    ipc_lock: bool = Field(False, description="Add the IPC_LOCK capability (RDMA memory registration).")
    shm_size: Quantity | None = Field(None, description="Default /dev/shm size for jobs on this profile.")
    topo_file: TopoFile | None = None
    allow_host_network: bool = Field(False, description="Jobs may opt into hostNetwork.")
    tcpx_socket_ifname: str | None = Field(None, description="NCCL_GPUDIRECTTCPX_SOCKET_IFNAME")
    tcpx_ctrl_dev: str | None = Field(None, description="NCCL_GPUDIRECTTCPX_CTRL_DEV")
    env: dict[str, str] = Field(default_factory=dict, description="Further system env for this fabric.")
    watchdog: TorchWatchdog = Field(default_factory=TorchWatchdog)
    pod_security_level: Literal["restricted", "baseline", "privileged"] | None = Field(
        None, description="The Pod Security level this profile's pods need (default: derived from ipcLock, "
        "a hostPath topoFile); a job is refused in a namespace that enforces less.")

    def extra_resources(self) -> dict[str, int]:
        """Extended resources every pod on this fabric requests (= limits): the RDMA device, the
        EFA adapter by default on EFA. The gang planner counts them; the pod renderer adds them."""
        rdma = self.rdma_resource
        if rdma is None and self.fabric == Fabric.EFA:
            rdma = constants.RESOURCE_EFA
        return {rdma: self.rdma_count} if rdma else {}


class TopologyLevel(Model):
    name: str = Field(..., description="Level name used by jobs (e.g. block, subblock, hostname).")
    label: str = Field(..., description="Node label key holding the domain of this level.")
    bandwidth_gbps: float = Field(
        800.0, gt=0, description="Per-node bandwidth in Gb/s (gigabits per second, as NICs are rated: a 400 Gb/s "
        "NDR link is 400) between two nodes whose domains first differ at this level.")
    latency_us: float = Field(5.0, ge=0, description="Per-hop latency (µs) across this level.")
    oversubscription: float = Field(1.0, ge=1.0, description="Oversubscription above this level.")


class TopologyPreset(StrEnum):
    """Where the topology levels come from (gang/topology_presets.py holds each preset's levels)."""

    AUTO = "auto"  # detected from the nodes' labels (gang/topology_presets.detect)
    GKE = "gke"  # cloud.google.com/gce-topology-block / -subblock
    AWS = "aws"  # EC2 instance topology: topology.k8s.aws/network-node-layer-1..3
    KUEUE = "kueue"  # the levels of a Kueue Topology object (topology.kueueTopology)
    PHALANX = "phalanx"  # phalanx.dev/topology-block / -subblock, labels an admin sets
    CUSTOM = "custom"  # the admin's own topology.levels
    NONE = "none"  # no topology: every node its own domain


def default_levels() -> list[TopologyLevel]:
    """The phalanx preset: labels an admin puts on the nodes (docs/placement.md)."""
    return [
        TopologyLevel(name="block", label="phalanx.dev/topology-block", bandwidth_gbps=200, latency_us=10, oversubscription=2),
        TopologyLevel(name="subblock", label="phalanx.dev/topology-subblock", bandwidth_gbps=400, latency_us=5),
        TopologyLevel(name="hostname", label="kubernetes.io/hostname", bandwidth_gbps=400, latency_us=2),
    ]


class TopologyConfig(Model):
    preset: TopologyPreset = Field(
        TopologyPreset.AUTO, description="Which node labels describe the network: auto (detected from the nodes at "
        "start-up and on every node change: the preset whose labels most nodes carry, with NVLink cliques inside), "
        "gke, aws, kueue, phalanx, custom (levels below) or none. Left out with levels given: custom.")
    levels: list[TopologyLevel] = Field(
        default_factory=list, max_length=16, description="The admin's own levels, coarse → fine, hostname last "
        "(preset custom; with auto, one more candidate). Empty: the phalanx preset's for custom.")
    kueue_topology: str | None = Field(
        None, description="Preset kueue (or a candidate of auto): the Kueue Topology object (kueue.x-k8s.io) whose "
        "spec.levels[].nodeLabel are the levels; the operator reads it at start-up. Unset with auto: every "
        "Topology object the operator can list is a candidate.")
    nvlink_label: str = Field("nvidia.com/gpu.clique", description="NVLink-domain label (GPU Feature Discovery): "
                              "where nodes carry it, a clique level sits just above hostname.")
    nvlink_bandwidth_gbps: float = Field(
        28800.0, gt=0, description="Per-node bandwidth (Gb/s) between two nodes of one NVLink clique (GB200 NVL72: "
        "4 GPUs × 900 GB/s × 8).")
    intra_node_bandwidth_gbps: float = Field(3600.0, gt=0, description="NVLink per-GPU bandwidth inside a node (Gb/s; "
                                             "H100 SXM: 450 GB/s each way = 3600).")
    intra_node_latency_us: float = Field(1.0, ge=0)

    # Kueue Topology objects the operator read at start-up (not configuration; see with_kueue_topologies).
    _kueue_topologies: tuple[dict, ...] = PrivateAttr(())

    @property
    def kueue_topologies(self) -> tuple[dict, ...]:
        return self._kueue_topologies

    def with_kueue_topologies(self, objects: Iterable[dict]) -> TopologyConfig:
        """This config with the Kueue Topology objects found (the kueue preset's levels, auto's candidates)."""
        found = self.model_copy()
        found._kueue_topologies = tuple(objects)
        return found

    @model_validator(mode="after")
    def _levels_mean_custom(self) -> TopologyConfig:
        if self.levels and "preset" not in self.model_fields_set:
            self.preset = TopologyPreset.CUSTOM
        return self

    @property
    def resolved_levels(self) -> list[TopologyLevel]:
        """The levels without looking at nodes: custom's own, a fixed preset's, or (auto, kueue:
        nodes decide) the phalanx preset's. ``gang.topology_presets.detect`` gives them for nodes."""
        from phalanx.api.topology_levels import static_levels

        return static_levels(self)


def levels_of(topology: TopologyConfig | Sequence[TopologyLevel] | None) -> list[TopologyLevel]:
    """The levels of a topology given as a config (its ``resolved_levels``: no nodes looked at),
    as a list of levels, or not at all (the phalanx preset's, ``default_levels``)."""
    if topology is None:
        return default_levels()
    if isinstance(topology, TopologyConfig):
        return topology.resolved_levels
    return list(topology)


class JobToleration(Toleration):
    """A toleration every gang pod gets (a node pool's taint no resource names, e.g. AKS's sku=gpu)."""

    when_requesting: list[str] = Field(
        default_factory=list, max_length=16, description="Only pods requesting one of these resources get it "
        "(e.g. [nvidia.com/gpu]); empty: every pod.")

    def to_kube(self) -> dict:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"when_requesting"})


# The label prometheus-operator puts on every Prometheus pod it runs (kube-prometheus-stack's too).
DEFAULT_SCRAPER_POD_LABELS = {"app.kubernetes.io/name": "prometheus"}


class NetworkPolicyConfig(Model):
    """The per-job NetworkPolicy: who may reach a job's pods besides its own gang. As in a
    NetworkPolicy peer: namespace labels null = the job's own namespace, {} = every namespace; pod
    labels null or {} = every pod of those namespaces. The operator's both null: from anywhere;
    the scraper's both null: no scraper rule. The chart's values.yaml carries the same defaults."""

    enabled: bool = True
    operator_namespace_labels: dict[str, str] | None = Field(
        None, description="The operator's namespace, e.g. {kubernetes.io/metadata.name: phalanx-system}.")
    operator_pod_labels: dict[str, str] | None = Field(
        default_factory=lambda: {"app.kubernetes.io/name": "phalanx-operator"}, description="The operator's pods.")
    # Default: what the Prometheus Operator (kube-prometheus-stack) runs, wherever it runs, so the
    # chart's PodMonitor gets the runtime series where NetworkPolicies are enforced.
    scraper_namespace_labels: dict[str, str] | None = Field(
        default_factory=dict, description="Prometheus' namespaces (metrics port only): {} every namespace, "
        "e.g. {kubernetes.io/metadata.name: monitoring} one.")
    scraper_pod_labels: dict[str, str] | None = Field(
        default_factory=lambda: dict(DEFAULT_SCRAPER_POD_LABELS),
        description="Prometheus' pods (metrics port only); the label the Prometheus Operator gives them.")


class Limits(Model):
    """What one object may cost the operator: every check runs off the event loop, and these
    bound how long it takes. A refusal names the limit; an admin raises it in the chart values."""

    max_spec_bytes: int = Field(
        128 * 1024, ge=4096, le=3 << 20,
        description="A TrainingJob's or TrainingSweep's spec, as compact JSON, at most this many bytes "
        "(it is validated on every pass; a generous job with many env vars and volumes is under 16 KiB).")
    max_sweep_check_bytes: int = Field(
        2 << 20, ge=1 << 16, le=1 << 30,
        description="A TrainingSweep is checked trial by trial, each as a whole TrainingJob: at most this many "
        "bytes of trial specs (trials × the template's bytes; 256 trials of an 8 KiB template, 64 of 32 KiB). "
        "The check takes up to ~2 s of CPU per MiB, off the event loop.")


class HealthConfig(Model):
    """Node health (gang/nodehealth.py): which node signals and how much job evidence quarantine a
    node (a NodeQuarantine), and for how long. NotReady and the unreachable taint are not listed:
    the planner already leaves such nodes out."""

    enabled: bool = Field(True, description="Quarantine nodes (False: NodeQuarantines are still honoured, none created).")
    unhealthy_conditions: list[str] = Field(
        default_factory=lambda: ["GpuUnhealthy", "SysLogsXIDError", "SysLogsSXIDError", "SysLogsGPUFallenOff"],
        max_length=64, description="Node condition types that mean the node's devices are unhealthy while "
        "their status is True (set by a node problem detector or a GPU health monitor).")
    unhealthy_taints: list[str] = Field(
        default_factory=list, max_length=64, description="Taint keys that mean the same (any effect); a "
        "NoSchedule taint already keeps pods that do not tolerate it away.")
    evidence_threshold: int = Field(
        2, ge=1, le=100, description="A node named by this many job failures (communication errors, hangs, "
        "lost pods, failed pre-flight checks) within evidenceWindowSeconds is quarantined.")
    evidence_window_seconds: int = Field(3600, ge=1, description="How far back job failures count.")
    evidence_namespaces: int = Field(
        2, ge=1, le=100, description="Job failures quarantine a node only when they come from at least this many "
        "namespaces (a lost node counts whatever its job): what a job reports is its tenant's word, and one tenant "
        "must not take nodes away from the others. 1 trusts every tenant.")
    max_evidence_fraction: float = Field(
        0.1, ge=0, le=1, description="At most this share of the nodes (at least one) is quarantined on job "
        "evidence at once; conditions and taints are not bounded.")
    quarantine_seconds: int = Field(3600, ge=1, description="How long a quarantine lasts (while a node "
                                    "signal persists, it is renewed).")
    resync_seconds: float = Field(30.0, gt=0, le=3600, description="How often quarantines are checked "
                                  "for expiry and node signals re-read.")


class OperatorConfig(Model):
    network_profiles: dict[str, NetworkProfile] = Field(default_factory=lambda: {"default": NetworkProfile()})
    topology: TopologyConfig = Field(default_factory=TopologyConfig)
    pod_create_concurrency: int = Field(32, ge=1, le=1024)
    create_pinned: bool = Field(
        True, description="Native gangs: plan a new gang before creating it and, when it is placed, create each pod "
        "pinned to its node and without the gate (one request per pod). False, or a gang not placed yet: pods are "
        "created behind the gate and released together with one patch each once the gang is placed.")
    bind_timeout_seconds: int = Field(
        120, ge=1, description="A released gang whose pinned pods are not all bound by then is re-planned."
    )
    default_shm_size: Quantity = "2Gi"
    runtime_image: str | None = Field(
        None, pattern=patterns.IMAGE, max_length=512, description="The image of a job that names none (spec.image): "
        "the runtime image `make images` builds and the chart's runtime.image names. None: every job must name one.")
    network_policy: NetworkPolicyConfig = Field(default_factory=NetworkPolicyConfig)
    policy: ClusterPolicy = Field(default_factory=ClusterPolicy, description="What TrainingJobs may ask for, per namespace.")
    limits: Limits = Field(default_factory=Limits, description="Bounds on the work one object may cost the operator.")
    health: HealthConfig = Field(default_factory=HealthConfig, description="Node health and quarantine.")
    job_tolerations: list[JobToleration] = Field(
        default_factory=list, max_length=64, description="Tolerations every gang pod gets besides its own and the "
        "ones its extended resources bring (gang/tolerations.py); each must pass the policy's toleration rules "
        "for every namespace.")
    force_delete_after_seconds: int = Field(
        60, ge=0, description="A pod still terminating this long after its grace period, on a node that is "
        "gone or NotReady, is deleted with grace period 0 (its kubelet can no longer confirm).")
    restart_in_place: bool = Field(
        True, description="Restart a gang in place (the trainer container's restart rules ask the kubelet to "
        "restart every container of the pod, Kubernetes RestartAllContainers) when the cluster supports it "
        "(found at start-up: the API server keeps the rules and every node's kubelet declares the feature). "
        "False, or a cluster without it: every restart deletes and recreates the gang.")
    replace_lost_nodes: bool = Field(
        True, description="When one node of a running gang that restarts in place is lost (gone, NotReady) or "
        "quarantined, recreate only its pod on a free node of the gang's topology domain and restart the other "
        "pods in place; without such a node the gang restarts as a whole (lost) or keeps running (quarantined).")
    @model_validator(mode="after")
    def _job_tolerations_within_policy(self) -> OperatorConfig:
        rules = [("policy.default", self.policy.default)] + [
            (f"policy.namespaces[{i}].rules", entry.rules) for i, entry in enumerate(self.policy.namespaces)]
        for index, tol in enumerate(self.job_tolerations):
            for where, rule in rules:
                if not tol.key and not rule.allow_keyless_tolerations:
                    raise ValueError(f"jobTolerations[{index}]: a toleration without a key tolerates every taint; "
                                     f"{where}.allowKeylessTolerations is false")
                if tol.key in rule.forbidden_toleration_keys:
                    raise ValueError(f"jobTolerations[{index}].key: tolerating {tol.key} is not allowed by "
                                     f"{where}.forbiddenTolerationKeys")
        return self

    # What the API server serves, found at start-up (not configuration; see with_workload_api).
    _workload_api_versions: tuple[str, ...] | None = PrivateAttr(None)
    _installed: bool = PrivateAttr(False)

    @property
    def installed(self) -> bool:
        """Whether this is the config of an installed operator (the operator's own, or a file
        `--config` names), not the built-in defaults an offline command falls back to: only then
        is a job without spec.image and no runtimeImage known to be refused."""
        return self._installed

    def as_installed(self) -> OperatorConfig:
        found = self.model_copy()
        found._installed = True
        return found

    _restart_all_containers: bool | None = PrivateAttr(None)

    @property
    def in_place_restarts(self) -> bool:
        """Whether the gang's pods carry restart rules and restart in place: configured on, and the
        cluster found able at start-up (not discovered, as offline render and validate: off)."""
        return self.restart_in_place and bool(self._restart_all_containers)

    def with_restart_all_containers(self, supported: bool | None) -> OperatorConfig:
        """This config with what discovery found of in-place restarts (None: not discovered)."""
        found = self.model_copy()
        found._restart_all_containers = supported
        return found

    @property
    def workload_api_versions(self) -> tuple[str, ...] | None:
        """The Workload API versions (scheduling.k8s.io) the cluster serves, oldest → newest, as the
        operator discovered them at start-up; None when not discovered (offline render and validate:
        the workload backend renders the newest shape)."""
        return self._workload_api_versions

    def with_workload_api(self, versions: Iterable[str] | None) -> OperatorConfig:
        """This config with what discovery found of the Workload API (None: not discovered)."""
        found = self.model_copy()
        found._workload_api_versions = None if versions is None else tuple(versions)
        return found
