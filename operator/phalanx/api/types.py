"""The TrainingJob API (phalanx.dev/v1alpha1): the single source of truth.

The CRD in crds/ is generated from these models (``phalanx crd``); the operator validates with
them; the runtime reads the same spec from its ConfigMap. Field names are camelCase on the wire.
"""

from __future__ import annotations

import functools
import json
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.base import KubeObject, Model, Quantity, bounded_str, keys_match, unique_by
from phalanx.api.deepspeed import DEEPSPEED_RULES
from phalanx.api.horovod import HOROVOD_RULES
from phalanx.api.kubetypes import (
    PER_NODE_SOURCES,
    RESERVED_PATH_RULE,
    EnvVar,
    Toleration,
    Volume,
    VolumeMount,
    VolumeSource,
    reserved_env,
)
from phalanx.api.pretrained import FINETUNE_RULES, DataPrepare, EvalSpec, Lora, Pretrained
from phalanx.api.progress import PROGRESS_RULES, ProgressSpec
from phalanx.api.resources import Resources
from phalanx.api.roles import MAX_ROLES, ROLE_RULES, Role, SuccessPolicy
from phalanx.api.rules import Rule, default_unless, parallelism_default
from phalanx.api.tensorflow import TENSORFLOW_ROLE_RULES, TENSORFLOW_RULES, deciding_roles

__all__ = ["KubeObject", "Model", "Quantity", "Resources", "Role", "SuccessPolicy"]  # re-exported

# Pod hostnames are "<job>-node-<rank>" and must stay a DNS label (63 chars).
MAX_JOB_NAME = 45


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


class Framework(StrEnum):
    NONE = "none"
    DEEPSPEED = "deepspeed"
    TENSORFLOW = "tensorflow"
    HOROVOD = "horovod"


class DataSource(StrEnum):
    SYNTHETIC = "synthetic"
    TOKENS = "tokens"
    CORPUS = "corpus"
    PREPARED = "prepared"


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


class ParameterServer(Model):
    """Parameter-server training in the built-in runtime (torch.distributed.rpc): the first
    ``servers`` ranks hold the parameters (dense tensors whole, embedding tables by rows) and the
    optimizer; the other ranks are workers that pull, compute and push gradients."""

    servers: int = Field(1, ge=1, le=1024, description="Parameter-server ranks (the first ranks of the job).")
    mode: Literal["sync", "async"] = Field(
        "sync", description="sync: every step averages all workers' gradients (a barrier per step); "
        "async: each push is applied at once, workers run ahead of the slowest by at most staleness steps.")
    staleness: int = Field(0, ge=0, le=1 << 20, description="async: how many steps a worker may run ahead of the slowest.")

    checks = (
        Rule("self.mode == 'async' || self.staleness == 0",
             "parallelism.parameterServer.staleness applies to mode async only (sync waits for every worker each step)",
             lambda m: m.mode == "async" or m.staleness == 0, ".staleness"),
    )


class Parallelism(Model):
    """How the world (nodes × procsPerNode) is split. Mesh order: pp → dp_replicate → dp_shard → tp.
    Used by the built-in runtime (spec.model); a command job's own script splits its world itself."""

    data: int | None = Field(
        None, ge=1, le=1 << 20, description="Data-parallel degree. Default: world / (tensor × pipeline)."
    )
    zero: int = Field(0, ge=0, le=3, description="ZeRO stage: 0 DDP, 1 optimizer, 2 +grads, 3 +params (FSDP).")
    replicate: int = Field(
        1, ge=1, le=1 << 20, description="HSDP: replica groups of the data-parallel degree (zero 2/3 only)."
    )
    cpu_offload: bool = Field(False, description="Offload sharded parameters/optimizer to CPU (zero 3, GPU only).")
    tensor: int = Field(1, ge=1, le=64, description="Tensor-parallel degree (inside a node).")
    sequence_parallel: bool = Field(False, description="Sequence parallelism for norms/dropout with TP.")
    pipeline: int = Field(1, ge=1, le=128, description="Pipeline-parallel degree (stages).")
    pipeline_schedule: PipelineSchedule = Field(PipelineSchedule.ONE_F_ONE_B, description="Pipeline schedule.")
    microbatches: int = Field(1, ge=1, le=65536, description="Pipeline microbatches per step per data-parallel rank.")
    virtual_stages: int = Field(1, ge=1, le=8, description="Pipeline stages per rank (interleaved schedules).")
    parameter_server: ParameterServer | None = Field(
        None, description="Parameter-server mode (built-in model only): servers + workers instead of all-reduce.")


class ModelOverrides(Model):
    """Shape overrides of the built-in transformer preset (bounded: a bad shape is refused at apply)."""

    dim: int | None = Field(None, ge=8, le=65536)
    n_layers: int | None = Field(None, ge=1, le=1024)
    n_heads: int | None = Field(None, ge=1, le=1024)
    n_kv_heads: int | None = Field(None, ge=1, le=1024)
    vocab_size: int | None = Field(None, ge=2, le=1 << 22)
    ffn_hidden: int | None = Field(None, ge=1, le=1 << 20)
    max_seq_len: int | None = Field(None, ge=8, le=1 << 20)
    tie_embeddings: bool | None = None
    rope_theta: float | None = Field(None, gt=0, le=1e9)
    norm_eps: float | None = Field(None, gt=0, le=0.1)

    def as_dict(self) -> dict[str, Any]:
        """camelCase keys of the overrides that are set (presets.resolve_shape's input)."""
        return self.model_dump(by_alias=True, exclude_none=True)


_OVERRIDES_SET = " || ".join(f"has(self.overrides.{key})" for key in
                           (info.alias or name for name, info in ModelOverrides.model_fields.items()))


class ModelSpec(Model):
    preset: Literal["debug", "tiny", "small", "125m", "1b", "8b", "70b"] | None = Field(
        None, description="Built-in transformer preset: debug, tiny, small, 125m, 1b, 8b, 70b.")
    overrides: ModelOverrides = Field(default_factory=ModelOverrides, description="Shape overrides of the preset.")
    pretrained: Pretrained | None = Field(
        None, description="The built-in transformer with the shape and weights of a Hugging Face model directory (docs/pretrained.md).")
    entrypoint: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", max_length=256,
        description="User model 'package.module:function'; receives a context (mesh, ranks, device, config).",
    )
    lora: Lora | None = Field(
        None, description="Train low-rank adapters only, the base model frozen (model.preset or model.pretrained).")

    checks = (
        Rule("(has(self.preset) ? 1 : 0) + (has(self.pretrained) ? 1 : 0) + (has(self.entrypoint) ? 1 : 0) == 1",
             "set exactly one of model.preset (built-in transformer), model.pretrained (a Hugging Face model "
             "directory) or model.entrypoint (module:function)",
             lambda m: [m.preset, m.pretrained, m.entrypoint].count(None) == 2),
        Rule(f"has(self.preset) || !has(self.overrides) || !({_OVERRIDES_SET})",
             "model.overrides reshape a preset: set them with model.preset only (a pretrained model's shape is its config.json)",
             lambda m: m.preset is not None or not m.overrides.as_dict(), ".overrides"),
    )


class DataSpec(Model):
    source: DataSource = Field(DataSource.SYNTHETIC, description="synthetic | tokens (memmap file) | corpus (built-in text) "
                               "| prepared (a directory `phalanx data prepare` or data.prepare wrote).")
    path: str | None = Field(None, max_length=4096, description="Token file (source tokens) or prepared directory "
                             "(source prepared) on shared storage.")
    dtype: TokenDtype = Field(TokenDtype.UINT16, description="Token file dtype.")
    seq_len: int = Field(256, ge=8, le=1 << 20, description="Sequence length in tokens.")
    prepare: DataPrepare | None = Field(
        None, description="Source prepared: prepare these raw files into data.path before training (docs/pretrained.md).")


class LrSchedule(Model):
    warmup_steps: int = Field(0, ge=0, le=1 << 31)
    decay: LrDecay = LrDecay.COSINE
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)


class TrainingSpec(Model):
    steps: int = Field(100, ge=1, le=1 << 40, description="Optimizer steps to run.")
    global_batch_size: int = Field(8, ge=1, le=1 << 24, description="Sequences per optimizer step, all ranks.")
    micro_batch_size: int = Field(
        1, ge=1, le=1 << 24,
        description="Sequences per forward per data-parallel rank (gradient accumulation = global / (micro × data)). Ignored with pipeline > 1 (microbatches split the local batch).",
    )
    lr: float = Field(3e-4, gt=0.0, le=10.0)
    weight_decay: float = Field(0.1, ge=0.0, le=10.0)
    lr_schedule: LrSchedule = Field(default_factory=LrSchedule)
    precision: Precision = Field(Precision.BF16, description="Compute precision on GPU (CPU runs fp32).")
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.NONE
    grad_clip: float = Field(1.0, ge=0.0, le=1e6, description="Max global gradient norm; 0 disables.")
    grad_compression: GradCompression = Field(GradCompression.NONE, description="DDP communication hook (zero 0).")
    seed: int = Field(1234, ge=0, le=(1 << 53) - 1)
    log_every: int = Field(1, ge=1, le=1 << 31)
    eval: EvalSpec | None = Field(
        None, description="Evaluate on the held-out split: eval_loss and perplexity in status.metrics.")


# The checkpoint settings besides the volume, with their defaults: (wire name, attribute, default).
CHECKPOINT_SETTINGS: tuple[tuple[str, str, Any], ...] = (
    ("mountPath", "mount_path", "/checkpoints"),
    ("intervalSteps", "interval_steps", 0),
    ("keepLast", "keep_last", 3),
    ("async", "async_save", True),
    ("resume", "resume", True),
    ("exportConsolidated", "export_consolidated", False),
    ("exportHuggingFace", "export_hugging_face", False),
)
_CKPT_DEFAULT = {attr: default for _, attr, default in CHECKPOINT_SETTINGS}


def _needs_volume(field: str, attr: str, default: Any) -> Rule:
    """A job saves checkpoints only on checkpoint.volume or checkpoint.storage: without either its
    pods get no checkpoint dir (the image is read-only to them), so any other checkpoint setting is
    a mistake."""
    return default_unless("has(self.volume) || has(self.storage)",
                          lambda c: c.volume is not None or c.storage is not None, field, attr, default,
                          f"needs checkpoint.volume or checkpoint.storage: a job without one saves no checkpoints "
                          f"(set checkpoint.volume, e.g. {{persistentVolumeClaim: {{claimName: ckpt}}}}, or "
                          f"checkpoint.storage.uri, e.g. s3://bucket/prefix, or leave {field} at its default "
                          f"{json.dumps(default)})")


class LocalTier(Model):
    """Where the pods save first with checkpoint.storage: their own emptyDir (the checkpoint dir at
    mountPath), uploaded in the background, so training waits for a local save only."""

    enabled: bool = Field(True, description="Save to the pod's emptyDir and upload in the background; false: "
                                            "every rank writes to the bucket while training waits (async: staging).")
    medium: Literal["", "Memory"] = Field("", description="The emptyDir's medium: Memory puts the tier in RAM "
                                                           "(counted against the pod's memory limit).")
    size_limit: Quantity | None = Field(None, description="The emptyDir's sizeLimit (a rank's shards of two steps "
                                                          "and its node's other ranks' must fit).")


class CheckpointStorage(Model):
    """Object storage for checkpoints: no volume every pod mounts. Where it is, and how the pods
    reach it the cloud's way; nothing here is a credential."""

    uri: str = bounded_str(patterns.STORAGE_URI, 1024,
                           description="s3://<bucket>/<prefix> or gs://<bucket>/<prefix>; a job's checkpoints go to "
                                       "<uri>/<namespace>/<job>. The cluster policy says which a namespace may use.")
    endpoint: str | None = bounded_str(patterns.ENDPOINT_URL, 512, default=None,
                                       description="An S3-compatible endpoint (SeaweedFS, Ceph RGW, R2, ...), as "
                                                   "AWS_ENDPOINT_URL_S3; without it the provider's own (s3:// only).")
    region: str | None = bounded_str(patterns.REGION, 64, default=None, description="AWS_REGION (s3:// only).")
    credentials_secret: str | None = bounded_str(
        patterns.DNS_SUBDOMAIN, patterns.MAX_DNS_SUBDOMAIN, default=None,
        description="A Secret in the job's namespace: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (optional "
                    "AWS_SESSION_TOKEN) for s3://, a service-account key file key.json for gs://. Without it the pod's "
                    "own identity (IRSA, EKS Pod Identity, GKE workload identity via spec.serviceAccountName).")
    local_tier: LocalTier = Field(default_factory=LocalTier)

    checks = (
        Rule("!has(self.endpoint) || self.uri.startsWith('s3://')", "endpoint and region are for s3:// storage "
             "(gs:// reaches Google Cloud Storage itself)", lambda c: c.endpoint is None or c.uri.startswith("s3://"),
             ".endpoint"),
        Rule("!has(self.region) || self.uri.startsWith('s3://')", "endpoint and region are for s3:// storage "
             "(gs:// reaches Google Cloud Storage itself)", lambda c: c.region is None or c.uri.startswith("s3://"),
             ".region"),
    )


class CheckpointSpec(Model):
    volume: VolumeSource | None = Field(
        None, description="A core/v1 VolumeSource for shared storage, e.g. {persistentVolumeClaim: {claimName: ckpt}}. "
                          "Without it (or storage) the job saves no checkpoints, and the other fields must keep their defaults."
    )
    storage: CheckpointStorage | None = Field(
        None, description="Object storage instead of a volume: the built-in runtime's checkpoints go to "
                          "<storage.uri>/<namespace>/<job>; the pods' checkpoint dir is then a pod-local emptyDir.")
    mount_path: str = bounded_str(patterns.ABSOLUTE_PATH, 1024, default=_CKPT_DEFAULT["mount_path"],
                                  description="Where every pod mounts the volume (with storage: the pod-local "
                                              "emptyDir); a job's checkpoint dir is <mountPath>/<namespace>/<job>.")
    interval_steps: int = Field(_CKPT_DEFAULT["interval_steps"], ge=0, le=1 << 31,
                                description="Save every N steps; 0 saves only at the end.")
    keep_last: int = Field(_CKPT_DEFAULT["keep_last"], ge=1, le=1000, description="Committed checkpoints kept; older ones are deleted.")
    async_save: bool = Field(_CKPT_DEFAULT["async_save"], alias="async", description="Stage, then write in the background.")
    resume: bool = Field(_CKPT_DEFAULT["resume"], description="Resume from the last committed checkpoint.")
    export_consolidated: bool = Field(_CKPT_DEFAULT["export_consolidated"],
                                      description="Write a consolidated model at the end.")
    export_hugging_face: bool = Field(
        _CKPT_DEFAULT["export_hugging_face"], alias="exportHuggingFace",
        description="Write the final checkpoint as a Hugging Face model directory (<checkpoint>/final/hf) that "
        "transformers loads as it is (built-in model only).")

    checks = (
        RESERVED_PATH_RULE,
        *(_needs_volume(*setting) for setting in CHECKPOINT_SETTINGS),
        Rule("!has(self.volume) || !has(self.storage)", "checkpoint.volume and checkpoint.storage: one place for "
             "checkpoints, not both", lambda c: c.volume is None or c.storage is None, ".storage"),
        default_unless("!has(self.storage)", lambda c: c.storage is None, "exportHuggingFace", "export_hugging_face",
                       False, "with checkpoint.storage the Hugging Face export is not written yet (it needs "
                              "checkpoint.volume); use phalanx export on a downloaded checkpoint, or a volume"),
    )


class TopologySpec(Model):
    required: str | None = bounded_str(patterns.QUALIFIED_NAME, patterns.MAX_QUALIFIED_NAME, default=None,
                                       description="All pods inside one domain of this level (label key or level name).")
    preferred: str | None = bounded_str(patterns.QUALIFIED_NAME, patterns.MAX_QUALIFIED_NAME, default=None,
                                        description="Best effort: as few domains of this level as possible.")


class SchedulingSpec(Model):
    backend: GangBackend = Field(GangBackend.NATIVE, description="Gang backend.")
    gang_timeout_seconds: int = Field(600, ge=0, le=1 << 31, description="How long a gang may wait for placement; 0 = forever.")
    on_gang_timeout: GangTimeoutPolicy = Field(GangTimeoutPolicy.WAIT)
    topology: TopologySpec = Field(default_factory=TopologySpec)
    priority_class_name: str | None = bounded_str(patterns.DNS_SUBDOMAIN, patterns.MAX_DNS_SUBDOMAIN, default=None)
    queue: str | None = bounded_str(patterns.DNS_SUBDOMAIN, patterns.MAX_DNS_SUBDOMAIN, default=None,
                                    description="Queue (Kueue LocalQueue / Volcano queue).")
    scheduler_name: str | None = bounded_str(patterns.DNS_SUBDOMAIN, patterns.MAX_DNS_SUBDOMAIN, default=None,
                                             description="Override the pods' schedulerName.")


class NetworkSpec(Model):
    profile: str = bounded_str(patterns.DNS_SUBDOMAIN, patterns.MAX_DNS_SUBDOMAIN, default="default",
                               description="Cluster network profile (operator config).")
    nccl_env: dict[str, Annotated[str, Field(max_length=4096)]] = Field(default_factory=dict, max_length=128,
                                     description="NCCL/torch env overrides (debug variables allowed here).")
    host_network: bool = Field(False, description="Run pods on the host network (RDMA without CNI).")

    checks = (
        Rule(None, f"ncclEnv keys are environment variable names (letters, digits, '_'; not {constants.ENV_RESERVED_PREFIX}*)",
             lambda n: keys_match(n.nccl_env, patterns.C_IDENTIFIER, 256)
             and not any(k.startswith(constants.ENV_RESERVED_PREFIX) for k in n.nccl_env), ".ncclEnv"),
        # added to the trainer's env where nothing set the name yet: reserved as in spec.env
        Rule(None, "ncclEnv keys must not be device-grant (NVIDIA_*, AMD_VISIBLE_DEVICES, ...) or rendezvous "
             "(MASTER_ADDR, WORLD_SIZE, ...) variables: the rules of spec.env apply",
             lambda n: not any(reserved_env(k) for k in n.nccl_env), ".ncclEnv"),
    )


class FailurePolicy(Model):
    max_restarts: int = Field(3, ge=0, le=10000, description="Whole-gang restarts before the job fails.")
    retryable_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=list, max_length=256,
        description="Exit codes always retried, besides 128-255 (signals) which are retryable by default.",
    )
    permanent_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=list, max_length=256, description="Exit codes that fail the job at once, even if 128-255."
    )
    backoff_seconds: int = Field(10, ge=0, le=86400, description="First restart delay; doubles each restart.")
    max_backoff_seconds: int = Field(300, ge=0, le=86400, description="The longest restart delay (the doubling stops there).")
    hang_timeout_seconds: int = Field(0, ge=0, le=1 << 31, description="Restart when no step progress for this long; 0 = off.")
    preflight: bool = Field(False, description="Built-in trainer: before training, every rank checks its device (CUDA "
                            "and a small matmul, with GPUs) and the gang all-reduces once; a node that fails is named "
                            "in the failure (category Preflight) and counts as evidence against it (node health).")
    preflight_timeout_seconds: int = Field(60, ge=1, le=3600, description="How long the pre-flight all-reduce may take.")

    checks = (
        Rule("!has(self.retryableExitCodes) || !has(self.permanentExitCodes) || !self.retryableExitCodes.exists(c, c in self.permanentExitCodes)",
             "an exit code cannot be both retryable and permanent",
             lambda f: not set(f.retryable_exit_codes) & set(f.permanent_exit_codes)),
    )


class ElasticSpec(Model):
    """Run with fewer nodes (down to minNodes) when the gang cannot be placed for
    replaceTimeoutSeconds; grow back towards spec.nodes when capacity returns."""

    min_nodes: int = Field(..., ge=1, le=16384)
    max_nodes: int = Field(..., ge=1, le=16384)
    replace_timeout_seconds: int = Field(
        120, ge=0, le=1 << 31, description="Wait this long for a replacement node before shrinking; also the least time at one size before growing."
    )

    checks = (
        Rule("self.minNodes <= self.maxNodes", "elastic.minNodes must be <= elastic.maxNodes",
             lambda e: e.min_nodes <= e.max_nodes, ".minNodes"),
    )


# --- Rules of the whole spec ------------------------------------------------------------------
# "Built-in runtime" rules hold only for jobs that set spec.model (the runtime trains it);
# a command-only job is the user's own script: its only layout is nodes × procsPerNode.
_RUNTIME = "!has(self.model) || "


def _runtime(holds):
    return lambda s: s.model is None or holds(s)


def _multi_node(s) -> bool:
    return s.nodes > 1 or (s.elastic is not None and s.elastic.max_nodes > 1)


_MULTI_NODE_CEL = "(self.nodes > 1 || (has(self.elastic) && self.elastic.maxNodes > 1))"
_PER_NODE_CEL = " || ".join(f"has(self.checkpoint.volume.{s})" for s in PER_NODE_SOURCES)

SPEC_RULES = (
    Rule("has(self.model) || has(self.command)",
         "set model (built-in runtime) or command (your own entrypoint)",
         lambda s: s.model is not None or s.command is not None, ".model"),
    Rule(_RUNTIME + "(self.nodes * self.procsPerNode) % (self.parallelism.tensor * self.parallelism.pipeline) == 0",
         "nodes × procsPerNode must be divisible by parallelism.tensor × parallelism.pipeline",
         _runtime(lambda s: s.world_size % (s.parallelism.tensor * s.parallelism.pipeline) == 0), ".parallelism"),
    Rule(_RUNTIME + "!has(self.parallelism.data) || self.nodes * self.procsPerNode == self.parallelism.data * self.parallelism.tensor * self.parallelism.pipeline",
         "nodes × procsPerNode must equal parallelism.data × tensor × pipeline",
         _runtime(lambda s: s.parallelism.data is None
                  or s.world_size == s.parallelism.data * s.parallelism.tensor * s.parallelism.pipeline), ".parallelism"),
    Rule(_RUNTIME + "self.parallelism.tensor <= self.procsPerNode",
         "parallelism.tensor must fit inside one node (tensor <= procsPerNode)",
         _runtime(lambda s: s.parallelism.tensor <= s.procs_per_node), ".parallelism.tensor"),
    Rule(_RUNTIME + "self.parallelism.pipelineSchedule != 'ZBVZeroBubble' || self.parallelism.virtualStages == 2",
         "ZBVZeroBubble needs virtualStages = 2 (two stages per rank, V shape)",
         _runtime(lambda s: s.parallelism.pipeline_schedule != "ZBVZeroBubble" or s.parallelism.virtual_stages == 2),
         ".parallelism.virtualStages"),
    Rule(_RUNTIME + "self.parallelism.pipelineSchedule in ['Interleaved1F1B', 'ZBVZeroBubble'] || self.parallelism.virtualStages == 1",
         "virtualStages > 1 needs pipelineSchedule Interleaved1F1B or ZBVZeroBubble",
         _runtime(lambda s: s.parallelism.pipeline_schedule in ("Interleaved1F1B", "ZBVZeroBubble")
                  or s.parallelism.virtual_stages == 1), ".parallelism.virtualStages"),
    Rule(_RUNTIME + "self.parallelism.pipeline == 1 || self.parallelism.microbatches >= self.parallelism.pipeline",
         "pipeline microbatches must be >= pipeline",
         _runtime(lambda s: s.parallelism.pipeline == 1 or s.parallelism.microbatches >= s.parallelism.pipeline),
         ".parallelism.microbatches"),
    Rule(_RUNTIME + "self.parallelism.pipeline == 1 || self.parallelism.pipelineSchedule != 'ZBVZeroBubble' || self.parallelism.microbatches >= self.parallelism.pipeline * self.parallelism.virtualStages",
         "ZBVZeroBubble needs microbatches >= pipeline × virtualStages",
         _runtime(lambda s: s.parallelism.pipeline == 1 or s.parallelism.pipeline_schedule != "ZBVZeroBubble"
                  or s.parallelism.microbatches >= s.parallelism.pipeline * s.parallelism.virtual_stages),
         ".parallelism.microbatches"),
    Rule(_RUNTIME + "!has(self.parallelism.data) || self.parallelism.data % self.parallelism.replicate == 0",
         "data must be a multiple of replicate (HSDP replica groups)",
         _runtime(lambda s: s.parallelism.data is None or s.parallelism.data % s.parallelism.replicate == 0),
         ".parallelism.replicate"),
    Rule(_RUNTIME + "self.parallelism.replicate == 1 || self.parallelism.zero >= 2",
         "replicate > 1 (HSDP) needs zero 2 or 3",
         _runtime(lambda s: s.parallelism.replicate == 1 or s.parallelism.zero >= 2), ".parallelism.replicate"),
    Rule(_RUNTIME + "!self.parallelism.cpuOffload || self.parallelism.zero == 3", "cpuOffload needs zero 3",
         _runtime(lambda s: not s.parallelism.cpu_offload or s.parallelism.zero == 3), ".parallelism.cpuOffload"),
    Rule(_RUNTIME + "self.data.source != 'tokens' || has(self.data.path)", "data.path is required when source is tokens",
         _runtime(lambda s: s.data.source != "tokens" or s.data.path is not None), ".data.path"),
    Rule("!has(self.elastic) || (self.elastic.minNodes <= self.nodes && self.nodes <= self.elastic.maxNodes)",
         "elastic.minNodes <= nodes <= elastic.maxNodes",
         lambda s: s.elastic is None or s.elastic.min_nodes <= s.nodes <= s.elastic.max_nodes, ".elastic"),
    Rule("has(self.model) || has(self.progress) || self.failurePolicy.hangTimeoutSeconds == 0",
         "failurePolicy.hangTimeoutSeconds reads rank 0's step progress: the built-in runtime reports it, a "
         "command job only with spec.progress",
         lambda s: s.model is not None or s.progress is not None or s.failure_policy.hang_timeout_seconds == 0,
         ".failurePolicy.hangTimeoutSeconds"),
    Rule(f"!{_MULTI_NODE_CEL} || !has(self.checkpoint.volume) || !({_PER_NODE_CEL})",
         "a multi-node job's checkpoints need storage every node shares; "
         f"{', '.join(PER_NODE_SOURCES)} volumes live on one node and are lost on a gang restart "
         "(use a ReadWriteMany persistentVolumeClaim, nfs or csi)",
         lambda s: not _multi_node(s) or s.checkpoint.volume is None or s.checkpoint.volume.source() not in PER_NODE_SOURCES,
         ".checkpoint.volume"),
    Rule("!has(self.volumeMounts) || self.volumeMounts.all(m, has(self.volumes) && self.volumes.exists(v, v.name == m.name))",
         "every volumeMount must name a volume of spec.volumes",
         lambda s: {m.name for m in s.volume_mounts} <= {v.name for v in s.volumes}, ".volumeMounts"),
    Rule("!has(self.checkpoint.volume) || !has(self.volumeMounts) || !self.volumeMounts.exists(m, m.mountPath == self.checkpoint.mountPath)",
         "a volumeMount uses checkpoint.mountPath, where the checkpoint volume is mounted",
         lambda s: s.checkpoint.volume is None or all(m.mount_path != s.checkpoint.mount_path for m in s.volume_mounts),
         ".volumeMounts"),
    Rule(None, "nodeSelector keys must be label keys ([prefix/]name, name at most 63 characters)",
         lambda s: keys_match(s.node_selector, patterns.QUALIFIED_NAME, patterns.MAX_QUALIFIED_NAME),
         ".nodeSelector"),
)


# --- parallelism.parameterServer (built-in runtime) -------------------------------------------
# The first `servers` ranks hold parameters and optimizer (phalanx_runtime.ps); the rest are
# workers that each see the whole model: none of the layouts that split a model or its state.
_PS = "!has(self.parallelism.parameterServer) || "


def _ps(holds):
    return lambda s: s.parallelism.parameter_server is None or holds(s)


_ps_default = functools.partial(parallelism_default, _PS, lambda s: s.parallelism.parameter_server is not None,
                                "parallelism.parameterServer")


PARAMETER_SERVER_RULES = (
    Rule(_PS + "(has(self.model) && !has(self.command))",
         "parallelism.parameterServer runs the built-in runtime: set spec.model, not command",
         _ps(lambda s: s.model is not None and s.command is None), ".parallelism.parameterServer"),
    Rule(_PS + "self.nodes * self.procsPerNode > self.parallelism.parameterServer.servers",
         "parallelism.parameterServer.servers must be less than nodes × procsPerNode (at least one worker)",
         _ps(lambda s: s.world_size > s.parallelism.parameter_server.servers), ".parallelism.parameterServer.servers"),
    _ps_default("zero", "zero", 0, "0", "the servers hold the optimizer state"),
    _ps_default("tensor", "tensor", 1, "1", "every worker computes the whole model"),
    _ps_default("pipeline", "pipeline", 1, "1", "every worker computes the whole model"),
    Rule(_PS + "!has(self.parallelism.data)",
         "parallelism.parameterServer: spec.parallelism.data must be unset (the workers, nodes × procsPerNode − servers, are the data-parallel ranks)",
         _ps(lambda s: s.parallelism.data is None), ".parallelism.data"),
    Rule(_PS + "self.training.gradCompression == 'none'",
         "parallelism.parameterServer: spec.training.gradCompression must be none (a DDP hook; workers push to servers)",
         _ps(lambda s: s.training.grad_compression == GradCompression.NONE), ".training.gradCompression"),
    Rule(_PS + "!has(self.elastic)",
         "parallelism.parameterServer: spec.elastic is not supported (servers and workers are fixed ranks)",
         _ps(lambda s: s.elastic is None), ".elastic"),
)


class TrainingJobSpec(Model):
    image: str | None = bounded_str(
        patterns.IMAGE, 512, default=None, description="The pods' image (an OCI reference, no spaces); left out: the "
        "operator config's runtimeImage (chart value runtime.image), the built-in runtime's image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, min_length=1, max_length=64, description="User entrypoint mode: replaces the runtime's command.")
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(None, max_length=256)
    framework: Framework = Field(
        Framework.NONE, description="Command jobs: deepspeed renders the parallelism and training fields into a "
        "DeepSpeed config at $PHALANX_DEEPSPEED_CONFIG (/etc/phalanx/deepspeed.json); tensorflow renders TF_CONFIG "
        "(every pod one worker; with roles chief/ps/evaluator, ParameterServerStrategy); horovod renders Horovod's "
        "gloo rendezvous env (run the script under python -m phalanx_runtime.horovod_launch); none: the script "
        "splits its world itself.")
    nodes: int = Field(1, ge=1, le=16384, description="Pods (one per node).")
    procs_per_node: int = Field(1, ge=1, le=64, description="Worker processes per pod (usually GPUs per node).")
    resources: Resources = Field(default_factory=Resources)
    parallelism: Parallelism = Field(default_factory=Parallelism)
    model: ModelSpec | None = Field(None, description="Built-in runtime mode: what it trains. Absent for command-only jobs.")
    progress: ProgressSpec | None = Field(
        None, description="Command jobs: how rank 0's progress (step, loss, metrics) is read, for the status, "
        "hang detection and sweeps (docs/your-code.md).")
    data: DataSpec = Field(default_factory=DataSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    scheduling: SchedulingSpec = Field(default_factory=SchedulingSpec)
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    failure_policy: FailurePolicy = Field(default_factory=FailurePolicy)
    elastic: ElasticSpec | None = None
    suspend: bool = False
    active_deadline_seconds: int | None = Field(None, ge=1, le=1 << 40)
    ttl_seconds_after_finished: int | None = Field(None, ge=0, le=1 << 40)
    env: list[EnvVar] = Field(default_factory=list, max_length=256, description="core/v1 EnvVar list added to the trainer.",
                              json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    node_selector: dict[str, Annotated[str, bounded_str(patterns.LABEL_VALUE, patterns.MAX_LABEL_VALUE)]] = Field(
        default_factory=dict, max_length=64)
    service_account_name: str | None = bounded_str(patterns.DNS_SUBDOMAIN, patterns.MAX_DNS_SUBDOMAIN, default=None)
    volumes: list[Volume] = Field(default_factory=list, max_length=64, description="Extra core/v1 Volumes.",
                                  json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, max_length=64, description="Extra core/v1 VolumeMounts for the trainer.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"]})
    shm_size: Quantity | None = Field(None, description="Size of the memory-backed /dev/shm (default 2Gi, NCCL needs it).")
    roles: list[Role] = Field(
        default_factory=list, max_length=MAX_ROLES,
        description="Command jobs: groups of pods besides the workers (parameter servers, chief, evaluator), "
        "each with its own replicas, resources and command; one gang with the workers, all or nothing.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})
    success_policy: SuccessPolicy | None = Field(
        None, description="Which roles' pods must all exit 0 for the job to succeed (default: all; "
        "chief for framework tensorflow with a chief role).")

    # the order of the CRD's x-kubernetes-validations
    checks = (SPEC_RULES + PROGRESS_RULES + DEEPSPEED_RULES + TENSORFLOW_RULES + PARAMETER_SERVER_RULES + ROLE_RULES
              + TENSORFLOW_ROLE_RULES + HOROVOD_RULES + FINETUNE_RULES)

    @field_validator("roles")
    @classmethod
    def _roles_unique(cls, v: list[Role]) -> list[Role]:
        return unique_by(v, "name", "role name")

    @field_validator("env")
    @classmethod
    def _env_unique(cls, v: list[EnvVar]) -> list[EnvVar]:
        return unique_by(v, "name", "env name")

    @field_validator("volumes")
    @classmethod
    def _volumes_unique(cls, v: list[Volume]) -> list[Volume]:
        return unique_by(v, "name", "volume name")

    @field_validator("volume_mounts")
    @classmethod
    def _mounts_unique(cls, v: list[VolumeMount]) -> list[VolumeMount]:
        return unique_by(v, "mount_path", "mountPath")

    # --- derived, not on the wire -------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def data_degree(self) -> int:
        p = self.parallelism
        if p.parameter_server is not None:
            return self.world_size - p.parameter_server.servers  # the workers
        return p.data if p.data is not None else self.world_size // (p.tensor * p.pipeline)

    @property
    def gang_size(self) -> int:
        """Pods of the gang: the workers and every role's replicas."""
        return self.nodes + sum(r.replicas for r in self.roles)

    @property
    def success_roles(self) -> tuple[str, ...]:
        """Roles whose pods must all succeed: successPolicy's; for tensorflow the chief (else the
        workers: an evaluator never decides); else every role."""
        if self.success_policy is not None:
            return tuple(self.success_policy.roles)
        return deciding_roles(self) or (constants.ROLE_WORKER, *(r.name for r in self.roles))

    @property
    def uses_runtime(self) -> bool:
        """The built-in runtime trains this job (spec.model set); else it is a command-only job."""
        return self.model is not None


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
    roles: dict[str, list[str]] | None = Field(None, description="Jobs with spec.roles: node of each pod of each role.")
    predicted_allreduce_seconds: float | None = None
    message: str | None = None


class RoleStatus(Model):
    name: str
    replicas: int = 0
    ready: int = 0


class FailureStatus(Model):
    """The gang's last failure: the pod that named it and why (lifecycle/failure_cause.py)."""

    pod: str = Field(..., description="The failed pod (or what was lost, or 'rank 0' for a hang).")
    node_rank: int | None = Field(None, description="The pod's node-rank (workers).")
    node: str | None = Field(None, description="The node the pod ran on when it failed.")
    rank: int | None = Field(None, description="The global rank of the process that failed, when the pod named it.")
    exit_code: int | None = Field(None, description="The trainer container's exit code.")
    reason: str = Field(..., description="'exited', or the pod's reason (Evicted, NodeLost, PodLost, Hang, ...).")
    # a str, not the enum: a status written by an operator that knows more categories still reads
    category: str = Field(..., description="What kind of failure it was.",
                          json_schema_extra={"enum": [c.value for c in constants.FailureCategory]})
    message: str = Field("", description="The error's last line(s), from the container's termination message.")
    time: str | None = None


class NodeReplacementStatus(Model):
    """The last lost or quarantined node of the running gang and what became of it
    (lifecycle/replace_node.py): its pod recreated on a spare node of the same topology domain while
    the others restart in place, or why not (then the gang restarts as usual)."""

    node_rank: int = Field(..., description="The node-rank whose node was lost or quarantined.")
    pod: str = Field(..., description="Its pod (recreated under the same name).")
    old_node: str
    new_node: str | None = Field(None, description="The spare node; unset when the node was not replaced alone.")
    domain: str | None = Field(None, description="The topology domain the spare was chosen in, e.g. 'block=b1'.")
    cause: str = Field(..., description="NodeLost (gone or NotReady) or NodeQuarantined.")
    message: str = ""
    attempt: int = Field(0, description="The restart attempt whose pod it was.")
    done: bool = Field(False, description="The replacement pod was created (or the replacement was not used).")
    time: str | None = None


class TrainingJobStatus(Model):
    phase: Phase = Phase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    ready_nodes: int = 0
    total_nodes: int = 0
    nodes: str = Field("0/0", description="ready/total, for the printer column.")
    world_size: int | None = None
    active_nodes: int | None = Field(None, description="Nodes in the current gang (elastic jobs shrink and grow it).")
    roles: list[RoleStatus] | None = Field(None, description="Jobs with spec.roles: ready pods of each role, workers first.")
    roles_ready: str | None = Field(None, description="'worker:4/4 ps:2/2', for the printer column.")
    restarts: int = 0
    restart_attempt: int = Field(0, description="Generation of the pod set (bumped by restarts and resume).")
    attempt_created: bool = Field(False, description="Every pod of the current attempt was created once.")
    last_restart_mode: str | None = Field(
        None, description="How the gang last restarted: InPlace (its pods' containers restarted on the same "
        "nodes), Recreate (its pods deleted and created again as a new attempt) or ReplaceNode (one lost node's pod "
        "created again on a spare node of its domain, the others restarted in place).",
        json_schema_extra={"enum": [m.value for m in constants.RestartMode]})
    in_place_restarts: int = Field(
        0, ge=0, description="In-place restarts of the current attempt (the highest trainer container restart "
        "count the operator has counted); a new attempt starts from 0.")
    next_restart_time: str | None = None
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    metrics: dict[str, float] | None = Field(
        None, max_length=constants.MAX_REPORTED_METRICS,
        description="The last value of each metric rank 0 reported (eval_loss, learning_rate, ...).")
    resumed_step: int | None = Field(None, description="The step the current attempt's script resumed from (its checkpoint).")
    tokens_per_second: float | None = None
    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    last_checkpoint: CheckpointStatus | None = None
    placement: PlacementStatus | None = None
    start_time: str | None = None
    completion_time: str | None = None
    last_progress_time: str | None = None
    startup: dict[str, float] | None = Field(
        None, max_length=len(constants.StartupPhase),
        description="The built-in runtime's start-up timeline, as rank 0 last reported it: when each phase ended, in "
                    "seconds since its container started (launcher, agent, worker, imports, processGroup, mesh, model, "
                    "optimizer, data, checkpoint, metrics, firstStep).")
    last_failure: FailureStatus | None = Field(
        None, description="Why the gang last failed (kept through restarts; the Restarting or Failed condition says it too).")
    node_replacement: NodeReplacementStatus | None = Field(
        None, description="The last lost or quarantined node of the running gang: replaced alone, or why not.")
    reason: str | None = Field(
        None, description="Why the job is in its phase: the reason of the condition that decides it (the wait's, "
        "e.g. Insufficient or CreateRefused; AllNodesRunning; the restart's or the failure's cause; Succeeded).")
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

    def owner_references(self) -> list[dict[str, Any]]:
        """The controller reference every child carries (garbage collection on delete, and how a
        pod of an earlier job of this name is told apart); none while the job has no uid — an
        ownerReference without one is invalid."""
        if not self.metadata.uid:
            return []
        return [{"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": self.metadata.name, "uid": self.metadata.uid,
                 "controller": True, "blockOwnerDeletion": True}]
