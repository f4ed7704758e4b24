"""The TrainingJob API (phalanx.dev/v1alpha1): the single source of truth.

The CRD in crds/ is generated from these models (``phalanx crd``); the operator validates with
them; the runtime reads the same spec from its ConfigMap. Field names are camelCase on the wire.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Free-form Kubernetes objects (core/v1 VolumeSource, Toleration, EnvVar, ...) are kept as
# dicts: the API server validates them when the operator creates the pods.
KubeObject = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]
Quantity = Annotated[int | str, Field(json_schema_extra={"x-kubernetes-int-or-string": True})]


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    out = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    return out


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", use_enum_values=True,
        validate_default=True,
    )


# ---------------------------------------------------------------------------------------------
# Enums


class PipelineSchedule(StrEnum):
    GPIPE = "GPipe"
    ONE_F_ONE_B = "1F1B"
    INTERLEAVED_1F1B = "Interleaved1F1B"
    ZBV_ZERO_BUBBLE = "ZBVZeroBubble"


class Precision(StrEnum):
    FP32 = "fp32"
    BF16 = "bf16"


class ActivationCheckpointing(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class GradCompression(StrEnum):
    NONE = "none"
    BF16 = "bf16"
    POWERSGD = "powersgd"


class LrDecay(StrEnum):
    CONSTANT = "constant"
    LINEAR = "linear"
    COSINE = "cosine"


class DataSource(StrEnum):
    SYNTHETIC = "synthetic"
    TOKENS = "tokens"
    CORPUS = "corpus"


class TokenDtype(StrEnum):
    UINT16 = "uint16"
    UINT32 = "uint32"


class GangBackend(StrEnum):
    NATIVE = "native"
    VOLCANO = "volcano"
    COSCHEDULING = "coscheduling"
    KUEUE = "kueue"
    WORKLOAD = "workload"


class GangTimeoutPolicy(StrEnum):
    FAIL = "Fail"
    WAIT = "Wait"


class Phase(StrEnum):
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


# ---------------------------------------------------------------------------------------------
# Spec


class Resources(Model):
    """Per-node (per-pod) resources. GPUs become ``nvidia.com/gpu`` requests and limits."""

    gpus: int = Field(0, ge=0, le=64, description="GPUs per node (nvidia.com/gpu).")
    cpu: Quantity | None = Field(None, description="CPU request and limit per node, e.g. '8'.")
    memory: Quantity | None = Field(None, description="Memory request and limit per node, e.g. '64Gi'.")
    extra: dict[str, Quantity] = Field(
        default_factory=dict,
        description="Extra extended resources per node, e.g. rdma/rdma_shared_device_a: 1.",
    )


class Parallelism(Model):
    """How the world (nodes × procsPerNode) is split. Mesh order: pp → dp_replicate → dp_shard → tp."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.pipelineSchedule != 'ZBVZeroBubble' || self.virtualStages == 2",
                    "ZBVZeroBubble needs virtualStages = 2 (two stages per rank, V shape)",
                    ".virtualStages"),
                cel("self.pipelineSchedule == 'Interleaved1F1B' || self.pipelineSchedule == 'ZBVZeroBubble' || self.virtualStages == 1",
                    "virtualStages > 1 needs pipelineSchedule Interleaved1F1B or ZBVZeroBubble",
                    ".virtualStages"),
                cel("self.pipeline == 1 || self.microbatches >= self.pipeline",
                    "pipeline microbatches must be >= pipeline", ".microbatches"),
                cel("self.pipeline == 1 || self.pipelineSchedule != 'ZBVZeroBubble' || self.microbatches >= self.pipeline * self.virtualStages",
                    "ZBVZeroBubble needs microbatches >= pipeline × virtualStages", ".microbatches"),
                cel("!has(self.data) || self.data % self.replicate == 0",
                    "data must be a multiple of replicate (HSDP replica groups)", ".replicate"),
                cel("self.replicate == 1 || self.zero >= 2",
                    "replicate > 1 (HSDP) needs zero 2 or 3", ".replicate"),
                cel("!self.cpuOffload || self.zero == 3", "cpuOffload needs zero 3", ".cpuOffload"),
            ]
        }
    )

    data: int | None = Field(
        None, ge=1, description="Data-parallel degree. Default: world / (tensor × pipeline)."
    )
    zero: int = Field(0, ge=0, le=3, description="ZeRO stage: 0 DDP, 1 optimizer, 2 +grads, 3 +params (FSDP).")
    replicate: int = Field(
        1, ge=1, description="HSDP: replica groups of the data-parallel degree (zero 2/3 only)."
    )
    cpu_offload: bool = Field(False, description="Offload sharded parameters/optimizer to CPU (zero 3, GPU only).")
    tensor: int = Field(1, ge=1, le=64, description="Tensor-parallel degree (inside a node).")
    sequence_parallel: bool = Field(False, description="Sequence parallelism for norms/dropout with TP.")
    pipeline: int = Field(1, ge=1, le=128, description="Pipeline-parallel degree (stages).")
    pipeline_schedule: PipelineSchedule = Field(PipelineSchedule.ONE_F_ONE_B, description="Pipeline schedule.")
    microbatches: int = Field(1, ge=1, description="Pipeline microbatches per step per data-parallel rank.")
    virtual_stages: int = Field(1, ge=1, le=8, description="Pipeline stages per rank (interleaved schedules).")


class ModelSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("has(self.preset) != has(self.entrypoint)",
                    "set exactly one of model.preset (built-in transformer) or model.entrypoint (module:function)"),
            ]
        }
    )

    preset: str | None = Field(
        None, description="Built-in transformer preset: debug, tiny, small, 125m, 1b, 8b, 70b.",
        json_schema_extra={"enum": ["debug", "tiny", "small", "125m", "1b", "8b", "70b"]},
    )
    overrides: dict[str, float | int | bool] = Field(
        default_factory=dict,
        description="Shape overrides: dim, nLayers, nHeads, nKvHeads, vocabSize, ffnHidden, maxSeqLen, tieEmbeddings, ropeTheta, normEps.",
    )
    entrypoint: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="User model 'package.module:function'; receives a context (mesh, ranks, device, config).",
    )


class DataSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.source != 'tokens' || has(self.path)", "data.path is required when source is tokens", ".path"),
            ]
        }
    )

    source: DataSource = Field(DataSource.SYNTHETIC, description="synthetic | tokens (memmap file) | corpus (built-in text).")
    path: str | None = Field(None, description="Token file on shared storage (source tokens).")
    dtype: TokenDtype = Field(TokenDtype.UINT16, description="Token file dtype.")
    seq_len: int = Field(256, ge=8, le=1 << 20, description="Sequence length in tokens.")


class LrSchedule(Model):
    warmup_steps: int = Field(0, ge=0)
    decay: LrDecay = LrDecay.COSINE
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)


class TrainingSpec(Model):
    steps: int = Field(100, ge=1, description="Optimizer steps to run.")
    global_batch_size: int = Field(8, ge=1, description="Sequences per optimizer step, all ranks.")
    micro_batch_size: int = Field(
        1, ge=1,
        description="Sequences per forward per data-parallel rank (gradient accumulation = global / (micro × data)). Ignored with pipeline > 1 (microbatches split the local batch).",
    )
    lr: float = Field(3e-4, gt=0.0, le=10.0)
    weight_decay: float = Field(0.1, ge=0.0)
    lr_schedule: LrSchedule = Field(default_factory=LrSchedule)
    precision: Precision = Field(Precision.BF16, description="Compute precision on GPU (CPU runs fp32).")
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.NONE
    grad_clip: float = Field(1.0, ge=0.0, description="Max global gradient norm; 0 disables.")
    grad_compression: GradCompression = Field(GradCompression.NONE, description="DDP communication hook (zero 0).")
    seed: int = Field(1234, ge=0)
    log_every: int = Field(1, ge=1)


class CheckpointSpec(Model):
    volume: KubeObject | None = Field(
        None, description="A core/v1 VolumeSource for shared storage, e.g. {persistentVolumeClaim: {claimName: ckpt}}."
    )
    mount_path: str = Field("/checkpoints", pattern=r"^/")
    interval_steps: int = Field(0, ge=0, description="Save every N steps; 0 saves only at the end.")
    keep_last: int = Field(3, ge=1)
    async_save: bool = Field(True, alias="async", description="Stage, then write in the background.")
    resume: bool = Field(True, description="Resume from the last committed checkpoint.")
    export_consolidated: bool = Field(False, description="Write a consolidated model at the end.")


class TopologySpec(Model):
    required: str | None = Field(None, description="All pods inside one domain of this level (label key or level name).")
    preferred: str | None = Field(None, description="Best effort: as few domains of this level as possible.")


class SchedulingSpec(Model):
    backend: GangBackend = Field(GangBackend.NATIVE, description="Gang backend.")
    gang_timeout_seconds: int = Field(600, ge=0, description="How long a gang may wait for placement; 0 = forever.")
    on_gang_timeout: GangTimeoutPolicy = Field(GangTimeoutPolicy.WAIT)
    topology: TopologySpec = Field(default_factory=TopologySpec)
    priority_class_name: str | None = None
    queue: str | None = Field(None, description="Queue (Kueue LocalQueue / Volcano queue).")
    scheduler_name: str | None = Field(None, description="Override the pods' schedulerName.")


class NetworkSpec(Model):
    profile: str = Field("default", description="Cluster network profile (operator config).")
    nccl_env: dict[str, str] = Field(default_factory=dict, description="NCCL/torch env overrides (debug variables allowed here).")
    host_network: bool = Field(False, description="Run pods on the host network (RDMA without CNI).")


class FailurePolicy(Model):
    max_restarts: int = Field(3, ge=0, description="Whole-gang restarts before the job fails.")
    retryable_exit_codes: list[int] = Field(
        default_factory=list, max_length=256,
        description="Exit codes always retried, besides 128-255 (signals) which are retryable by default.",
    )
    permanent_exit_codes: list[int] = Field(
        default_factory=list, max_length=256, description="Exit codes that fail the job at once, even if 128-255."
    )
    backoff_seconds: int = Field(10, ge=0, description="First restart delay; doubles each restart.")
    max_backoff_seconds: int = Field(300, ge=0)
    hang_timeout_seconds: int = Field(0, ge=0, description="Restart when no step progress for this long; 0 = off.")


class ElasticSpec(Model):
    """Run with fewer nodes (down to minNodes) when the gang cannot be placed for
    replaceTimeoutSeconds; grow back towards spec.nodes when capacity returns."""

    min_nodes: int = Field(..., ge=1)
    max_nodes: int = Field(..., ge=1)
    replace_timeout_seconds: int = Field(
        120, ge=0, description="Wait this long for a replacement node before shrinking; also the least time at one size before growing."
    )


class TrainingJobSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("(self.nodes * self.procsPerNode) % (self.parallelism.tensor * self.parallelism.pipeline) == 0",
                    "nodes × procsPerNode must be divisible by parallelism.tensor × parallelism.pipeline",
                    ".parallelism"),
                cel("!has(self.parallelism.data) || self.nodes * self.procsPerNode == self.parallelism.data * self.parallelism.tensor * self.parallelism.pipeline",
                    "nodes × procsPerNode must equal parallelism.data × tensor × pipeline", ".parallelism"),
                cel("self.parallelism.tensor <= self.procsPerNode",
                    "parallelism.tensor must fit inside one node (tensor <= procsPerNode)", ".parallelism.tensor"),
                cel("has(self.model) || has(self.command)",
                    "set model (built-in runtime) or command (your own entrypoint)", ".model"),
                cel("!has(self.elastic) || (self.elastic.minNodes <= self.nodes && self.nodes <= self.elastic.maxNodes)",
                    "elastic.minNodes <= nodes <= elastic.maxNodes", ".elastic"),
            ]
        }
    )

    image: str = Field(..., min_length=1, description="Runtime image.")
    image_pull_policy: str = Field("IfNotPresent", json_schema_extra={"enum": ["Always", "IfNotPresent", "Never"]})
    command: list[str] | None = Field(None, max_length=64, description="User entrypoint mode: replaces the runtime's command.")
    args: list[str] | None = Field(None, max_length=256)
    nodes: int = Field(1, ge=1, le=16384, description="Pods (one per node).")
    procs_per_node: int = Field(1, ge=1, le=64, description="Worker processes per pod (usually GPUs per node).")
    resources: Resources = Field(default_factory=Resources)
    parallelism: Parallelism = Field(default_factory=Parallelism)
    model: ModelSpec | None = None
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    elastic: ElasticSpec | None = None
    suspend: bool = False
    active_deadline_seconds: int | None = Field(None, ge=1)
    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    env: list[KubeObject] = Field(default_factory=list, max_length=256, description="core/v1 EnvVar list added to the trainer.")
    tolerations: list[KubeObject] = Field(default_factory=list, max_length=64)
    node_selector: dict[str, str] = Field(default_factory=dict)
    service_account_name: str | None = None
    volumes: list[KubeObject] = Field(default_factory=list, max_length=64, description="Extra core/v1 Volumes.")
    volume_mounts: list[KubeObject] = Field(default_factory=list, max_length=64, description="Extra core/v1 VolumeMounts for the trainer.")
    shm_size: Quantity | None = Field(None, description="Size of the memory-backed /dev/shm (default 2Gi, NCCL needs it).")

    # --- derived, not on the wire -------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def data_degree(self) -> int:
        p = self.parallelism
        return p.data if p.data is not None else self.world_size // (p.tensor * p.pipeline)


# ---------------------------------------------------------------------------------------------
# Status


class Condition(Model):
    type: str
    status: str = Field(..., json_schema_extra={"enum": ["True", "False", "Unknown"]})
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class CheckpointStatus(Model):
    step: int
    path: str
    time: str | None = None


class PlacementStatus(Model):
    nodes: list[str] = Field(default_factory=list, description="Node of each node-rank.")
    span: dict[str, int] = Field(default_factory=dict, description="Domains used per topology level.")
    predicted_allreduce_seconds: float | None = None
    message: str | None = None


class TrainingJobStatus(Model):
    phase: Phase = Phase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    ready_nodes: int = 0
    total_nodes: int = 0
    nodes: str = Field("0/0", description="ready/total, for the printer column.")
    world_size: int | None = None
    active_nodes: int | None = Field(None, description="Nodes in the current gang (elastic jobs shrink and grow it).")
    restarts: int = 0
    restart_attempt: int = Field(0, description="Generation of the pod set (bumped by restarts and resume).")
    attempt_created: bool = Field(False, description="Every pod of the current attempt was created once.")
    next_restart_time: str | None = None
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    tokens_per_second: float | None = None
    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    last_checkpoint: CheckpointStatus | None = None
    placement: PlacementStatus | None = None
    start_time: str | None = None
    completion_time: str | None = None
    last_progress_time: str | None = None
    message: str | None = None


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class TrainingJob(BaseModel):
    """The whole object, as read from YAML or the API server."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")
    api_version: str = Field("phalanx.dev/v1alpha1", alias="apiVersion")
    kind: str = "TrainingJob"
    metadata: ObjectMeta
    spec: TrainingJobSpec
    status: TrainingJobStatus | None = None
