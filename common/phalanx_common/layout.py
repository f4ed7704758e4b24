"""Which parallel layouts a spec can run: the mesh and every reason it cannot (pure, torch-free).

Shared by the operator's validator (on ``phalanx.api.types.TrainingJobSpec``) and the runtime (on
``phalanx_runtime.config.JobSpec``, which keeps the same attribute names for the fields read here;
``phalanx_runtime.distributed.parallel_dims`` builds the mesh). Mesh order (torchtitan):
``pp → dp_replicate → dp_shard → tp`` (tp innermost, inside a node).

* zero 0/1 (DDP, ZeRO-1): ``dp_replicate = data``, ``dp_shard = 1``.
* zero 2/3 (FSDP2): ``dp_replicate = parallelism.replicate`` (HSDP groups),
  ``dp_shard = data / replicate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx_common.presets import ModelShape, resolve_shape

# A job's spec: the operator's TrainingJobSpec or the runtime's JobSpec (this module reads only
# attributes both have: nodes, procs_per_node, command, data_degree, resources.gpus, parallelism,
# model, data, training).
TrainingJobSpec = Any

MESH_DIM_NAMES = ("pp", "dp_replicate", "dp_shard", "tp")
SINGLE_STAGE_SCHEDULES = ("GPipe", "1F1B")
MULTI_STAGE_SCHEDULES = ("Interleaved1F1B", "ZBVZeroBubble")


@dataclass(frozen=True)
class Layout:
    """Degrees of the 4-D device mesh (every dim present, size 1 allowed)."""

    pp: int
    dp_replicate: int
    dp_shard: int
    tp: int

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.pp * self.dp * self.tp

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.pp, self.dp_replicate, self.dp_shard, self.tp)

    def coords(self, rank: int) -> dict[str, int]:
        """Mesh coordinates of a global rank (row-major, tp fastest)."""
        tp = rank % self.tp
        rest = rank // self.tp
        dps = rest % self.dp_shard
        rest //= self.dp_shard
        dpr = rest % self.dp_replicate
        pp = rest // self.dp_replicate
        return {"pp": pp, "dp_replicate": dpr, "dp_shard": dps, "tp": tp,
                "dp": dpr * self.dp_shard + dps}


def layout_of(spec: TrainingJobSpec) -> Layout:
    p = spec.parallelism
    dp = spec.data_degree
    if p.zero >= 2:
        rep = p.replicate
        return Layout(pp=p.pipeline, dp_replicate=rep, dp_shard=max(dp // rep, 1), tp=p.tensor)
    return Layout(pp=p.pipeline, dp_replicate=dp, dp_shard=1, tp=p.tensor)


def model_shape(spec: TrainingJobSpec) -> ModelShape | None:
    """Shape of the built-in transformer, or None for an entrypoint model."""
    if spec.model is None or spec.model.preset is None:
        return None
    return resolve_shape(spec.model.preset, spec.model.overrides.as_dict())


def check_layout(spec: TrainingJobSpec, *, cuda_available: bool | None = None, checkpointing: bool = True) -> list[str]:
    """Every reason this spec cannot run, as ``"<field>: <reason>"`` messages (empty = fine).

    ``checkpointing``: the run writes checkpoints (always, in a pod or in local mode; only the
    in-process test harness trains without them).

    Pure: no torch, no processes. ``cuda_available`` is what the runtime knows about its machine;
    the operator passes None and the check uses ``resources.gpus`` instead.
    """
    p = spec.parallelism
    world = spec.nodes * spec.procs_per_node
    dp = p.data if p.data is not None else max(world // (p.tensor * p.pipeline), 1)
    if p.parameter_server is not None:
        dp = max(world - p.parameter_server.servers, 1)  # the workers
    has_gpu = spec.resources.gpus > 0 if cuda_available is None else cuda_available
    return (_mesh_errors(spec, world) + _data_parallel_errors(spec, dp, has_gpu) + _batch_errors(spec, dp)
            + _pipeline_errors(spec, checkpointing) + _model_errors(spec))


def _pipeline_stages(spec: TrainingJobSpec) -> int:
    p = spec.parallelism
    return p.pipeline * (p.virtual_stages if p.pipeline_schedule in MULTI_STAGE_SCHEDULES else 1)


def _mesh_errors(spec: TrainingJobSpec, world: int) -> list[str]:
    """World size vs layout; tensor parallelism inside a node; processes vs GPUs."""
    errors: list[str] = []
    p = spec.parallelism
    tp, pp = p.tensor, p.pipeline
    if world % (tp * pp) != 0:
        errors.append(
            f"parallelism: world size {world} (nodes {spec.nodes} × procsPerNode {spec.procs_per_node}) "
            f"is not divisible by tensor × pipeline = {tp} × {pp} = {tp * pp}")
    if p.data is not None and p.data * tp * pp != world:
        errors.append(
            f"parallelism.data: data × tensor × pipeline = {p.data} × {tp} × {pp} = {p.data * tp * pp} "
            f"but the world size is {world} (nodes {spec.nodes} × procsPerNode {spec.procs_per_node})")
    if tp > spec.procs_per_node:
        errors.append(f"parallelism.tensor: tensor {tp} must fit inside one node (procsPerNode {spec.procs_per_node})")
    elif spec.procs_per_node % tp != 0:
        errors.append(f"parallelism.tensor: tensor {tp} must divide procsPerNode {spec.procs_per_node} "
                      "(a tensor-parallel group may not straddle nodes)")
    if spec.resources.gpus > 0 and spec.procs_per_node > spec.resources.gpus:
        errors.append(f"procsPerNode: {spec.procs_per_node} processes per node but only "
                      f"resources.gpus {spec.resources.gpus} GPUs per node")
    return errors


def _data_parallel_errors(spec: TrainingJobSpec, dp: int, has_gpu: bool) -> list[str]:
    """Data parallelism and ZeRO: HSDP groups, DDP with tensor parallelism, offload, compression."""
    errors: list[str] = []
    p, t = spec.parallelism, spec.training
    tp, pp = p.tensor, p.pipeline
    if p.replicate > 1:
        if p.zero < 2:
            errors.append(f"parallelism.replicate: replicate {p.replicate} (HSDP) needs zero 2 or 3, got zero {p.zero}")
        if dp % p.replicate != 0:
            errors.append(f"parallelism.replicate: data-parallel degree {dp} is not a multiple of replicate {p.replicate}")
    if p.zero in (0, 1) and tp > 1 and dp > 1:
        errors.append(f"parallelism.zero: zero {p.zero} (DDP) with tensor {tp} and data {dp} is not supported; "
                      "use zero 2 or 3 (FSDP2 composes with tensor parallelism)")
    if p.cpu_offload:
        if p.zero != 3:
            errors.append("parallelism.cpuOffload: needs zero 3")
        if not has_gpu:
            errors.append("parallelism.cpuOffload: CPU offload needs GPUs (resources.gpus > 0 / CUDA); "
                          "this job runs on CPU, where parameters already live in host memory")
    if t.grad_compression != "none":
        if p.zero != 0:
            errors.append(f"training.gradCompression: {t.grad_compression} is a DDP communication hook and needs zero 0, got zero {p.zero}")
        if tp > 1 or pp > 1:
            errors.append(f"training.gradCompression: {t.grad_compression} needs tensor 1 and pipeline 1")
    return errors


def _batch_errors(spec: TrainingJobSpec, dp: int) -> list[str]:
    """The global batch splits evenly over data-parallel ranks, then into micro-batches."""
    p, t = spec.parallelism, spec.training
    if dp < 1:
        return []
    if t.global_batch_size % dp != 0:
        return [f"training.globalBatchSize: {t.global_batch_size} is not divisible by the data-parallel degree {dp}"]
    local = t.global_batch_size // dp
    if p.pipeline > 1:
        if local % p.microbatches != 0:
            return [f"parallelism.microbatches: local batch {local} (globalBatchSize {t.global_batch_size} / data {dp}) "
                    f"is not divisible by microbatches {p.microbatches}"]
    elif local % t.micro_batch_size != 0:
        return [f"training.microBatchSize: local batch {local} (globalBatchSize {t.global_batch_size} / data {dp}) "
                f"is not divisible by microBatchSize {t.micro_batch_size}"]
    return []


def _pipeline_errors(spec: TrainingJobSpec, checkpointing: bool) -> list[str]:
    """Pipeline schedules, stages per rank, microbatches; sequence parallelism."""
    errors: list[str] = []
    p = spec.parallelism
    tp, pp, v = p.tensor, p.pipeline, p.virtual_stages
    if p.pipeline_schedule == "ZBVZeroBubble" and v != 2:
        errors.append("parallelism.virtualStages: ZBVZeroBubble needs virtualStages = 2 (two stages per rank, V shape)")
    if p.pipeline_schedule in SINGLE_STAGE_SCHEDULES and v != 1:
        errors.append(f"parallelism.virtualStages: virtualStages {v} needs pipelineSchedule Interleaved1F1B or ZBVZeroBubble")
    n_stages = _pipeline_stages(spec)
    if pp > 1 and p.microbatches < pp:
        errors.append(f"parallelism.microbatches: {p.microbatches} microbatches cannot fill {pp} pipeline stages (need >= pipeline)")
    if pp > 1 and p.pipeline_schedule == "ZBVZeroBubble" and p.microbatches < n_stages:
        errors.append(f"parallelism.microbatches: ZBVZeroBubble needs microbatches >= pipeline × virtualStages = {n_stages}")
    if checkpointing and pp > 1 and v > 1:
        errors.append(f"parallelism.virtualStages: checkpoints of {v} pipeline stages per rank are not "
                      "supported yet; use virtualStages 1 (GPipe or 1F1B)")
    if p.sequence_parallel and tp == 1:
        errors.append("parallelism.sequenceParallel: sequence parallelism needs tensor > 1")
    return errors


def _model_errors(spec: TrainingJobSpec) -> list[str]:
    """Exactly one model source; the built-in transformer's shape against the layout and data (a
    pretrained model's shape is its config.json: ``phalanx_common.hf_config`` checks it where the
    directory can be read)."""
    pp = spec.parallelism.pipeline
    if spec.model is not None and [spec.model.preset, spec.model.pretrained, spec.model.entrypoint].count(None) != 2:
        return ["model: set exactly one of model.preset (built-in transformer), model.pretrained (a Hugging Face "
                "model directory) or model.entrypoint"]
    if spec.model is not None and spec.model.preset is not None:
        try:
            shape = resolve_shape(spec.model.preset, spec.model.overrides.as_dict())
        except KeyError as e:
            return [f"model.preset: {e.args[0]}"]
        except (ValueError, TypeError) as e:
            return [f"model.overrides: {e}"]
        return _shape_errors(spec, shape)
    if spec.model is not None and spec.model.entrypoint is not None and pp > 1:
        return ["parallelism.pipeline: entrypoint models cannot be pipelined by the runtime (pipeline must be 1)"]
    if spec.model is None and not spec.command:
        return ["model: the built-in runtime needs model.preset, model.pretrained or model.entrypoint (or use spec.command)"]
    return []


def _shape_errors(spec: TrainingJobSpec, shape: ModelShape) -> list[str]:
    errors: list[str] = []
    p = spec.parallelism
    tp, pp, v = p.tensor, p.pipeline, p.virtual_stages
    n_stages = _pipeline_stages(spec)
    if shape.dim % shape.n_heads != 0:
        errors.append(f"model: dim {shape.dim} is not divisible by nHeads {shape.n_heads}")
    elif shape.head_dim % 2 != 0:
        errors.append(f"model: head dimension {shape.head_dim} (dim {shape.dim} / nHeads {shape.n_heads}) "
                      "must be even (rotary embeddings rotate pairs)")
    if shape.n_heads % shape.n_kv_heads != 0:
        errors.append(f"model: nHeads {shape.n_heads} is not a multiple of nKvHeads {shape.n_kv_heads}")
    for what, size in (("nHeads", shape.n_heads), ("nKvHeads", shape.n_kv_heads), ("ffnHidden", shape.ffn_hidden),
                       ("vocabSize", shape.vocab_size)):
        if size % tp != 0:
            errors.append(f"parallelism.tensor: tensor {tp} does not divide the model's {what} {size}")
    if n_stages > shape.n_layers:
        errors.append(f"parallelism.pipeline: the model has {shape.n_layers} layers and cannot split into "
                      f"{n_stages} pipeline stages (pipeline {pp} × stages per rank "
                      f"{v if n_stages != pp else 1}); each stage needs at least one layer")
    if pp > 1 and shape.tie_embeddings:
        errors.append("model.overrides: tieEmbeddings cannot be split across pipeline stages "
                      "(set overrides.tieEmbeddings: false or pipeline 1)")
    if spec.data.seq_len > shape.max_seq_len:
        errors.append(f"data.seqLen: {spec.data.seq_len} exceeds the model's maxSeqLen {shape.max_seq_len}")
    if p.sequence_parallel and tp > 1 and spec.data.seq_len % tp != 0:
        errors.append(f"parallelism.sequenceParallel: seqLen {spec.data.seq_len} is not divisible by tensor {tp}")
    if spec.data.source == "corpus" and shape.vocab_size < 256:
        errors.append(f"data.source: the corpus is byte-level (256 tokens) but vocabSize is {shape.vocab_size}")
    return errors
