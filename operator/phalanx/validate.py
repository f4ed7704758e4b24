"""Semantic rules beyond the CRD schema (pure). Every problem names the field and the rule."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from phalanx.api.config import OperatorConfig
from phalanx.api.presets import resolve_shape
from phalanx.api.types import TrainingJob, TrainingJobSpec
from phalanx.backends import render_backend
from phalanx.render.network import validate_network

# Pod hostnames are "<job>-node-<rank>" and must stay a DNS label (63 chars).
MAX_JOB_NAME = 45
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidJob(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_problems(error: ValidationError, prefix: str = "spec") -> list[Problem]:
    problems = []
    for err in error.errors():
        field = _loc((prefix, *err["loc"])) if err["loc"] else prefix
        problems.append(Problem(field, err["msg"]))
    return problems


def parse_job(obj: dict[str, Any]) -> TrainingJob:
    """Parse a TrainingJob object; raises InvalidJob with field paths."""
    if not isinstance(obj, dict):
        raise InvalidJob([Problem("<root>", "a TrainingJob must be a mapping")])
    kind = obj.get("kind")
    if kind not in (None, "TrainingJob"):
        raise InvalidJob([Problem("kind", f"expected TrainingJob, got {kind!r}")])
    if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
        raise InvalidJob([Problem("metadata.name", "is required")])
    if not isinstance(obj.get("spec"), dict):
        raise InvalidJob([Problem("spec", "is required")])
    try:
        return TrainingJob.model_validate(obj)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            problems.append(Problem(_loc(err["loc"]), err["msg"]))
        raise InvalidJob(problems) from None


def _layout_problems(spec: TrainingJobSpec) -> list[Problem]:
    """Cross-field rules the CEL expressions also enforce (kept here for `phalanx render`,
    clusters without CEL, and messages with the exact numbers)."""
    p = spec.parallelism
    out: list[Problem] = []
    world = spec.world_size
    if world % (p.tensor * p.pipeline):
        out.append(Problem("spec.parallelism", f"world size {world} (nodes {spec.nodes} × procsPerNode {spec.procs_per_node}) is not divisible by tensor {p.tensor} × pipeline {p.pipeline}"))
        return out
    if p.data is not None and p.data * p.tensor * p.pipeline != world:
        out.append(Problem("spec.parallelism.data", f"data {p.data} × tensor {p.tensor} × pipeline {p.pipeline} = {p.data * p.tensor * p.pipeline}, but nodes × procsPerNode = {world}"))
        return out
    if p.tensor > spec.procs_per_node:
        out.append(Problem("spec.parallelism.tensor", f"tensor {p.tensor} exceeds procsPerNode {spec.procs_per_node}: a tensor-parallel group must stay inside one node"))
    elif spec.procs_per_node % p.tensor:
        out.append(Problem("spec.parallelism.tensor", f"procsPerNode {spec.procs_per_node} is not a multiple of tensor {p.tensor}: a tensor-parallel group would straddle nodes"))
    dp = spec.data_degree
    if dp % p.replicate:
        out.append(Problem("spec.parallelism.replicate", f"data degree {dp} is not a multiple of replicate {p.replicate}"))
    if p.replicate > 1 and p.zero < 2:
        out.append(Problem("spec.parallelism.replicate", "replicate > 1 (HSDP) needs zero 2 or 3"))
    if p.cpu_offload and p.zero != 3:
        out.append(Problem("spec.parallelism.cpuOffload", "cpuOffload needs zero 3"))
    if p.cpu_offload and spec.resources.gpus == 0:
        out.append(Problem("spec.parallelism.cpuOffload", "CPU offload needs GPUs (resources.gpus > 0)"))
    if p.pipeline > 1 and p.microbatches < p.pipeline * p.virtual_stages:
        out.append(Problem("spec.parallelism.microbatches", f"microbatches {p.microbatches} < pipeline stages {p.pipeline * p.virtual_stages} (pipeline {p.pipeline} × virtualStages {p.virtual_stages})"))
    if p.pipeline_schedule == "ZBVZeroBubble" and p.pipeline > 1 and p.virtual_stages != 2:
        out.append(Problem("spec.parallelism.virtualStages", "ZBVZeroBubble needs virtualStages = 2"))
    if p.virtual_stages > 1 and p.pipeline_schedule not in ("Interleaved1F1B", "ZBVZeroBubble"):
        out.append(Problem("spec.parallelism.virtualStages", f"virtualStages {p.virtual_stages} needs pipelineSchedule Interleaved1F1B or ZBVZeroBubble, not {p.pipeline_schedule}"))
    if p.sequence_parallel and p.tensor == 1:
        out.append(Problem("spec.parallelism.sequenceParallel", "sequence parallelism needs tensor > 1"))
    if spec.training.grad_compression != "none" and p.zero != 0:
        out.append(Problem("spec.training.gradCompression", f"DDP communication hooks apply to zero 0 only, not zero {p.zero}"))
    return out


def _batch_problems(spec: TrainingJobSpec) -> list[Problem]:
    t, p = spec.training, spec.parallelism
    dp = spec.data_degree
    if t.global_batch_size % dp:
        return [Problem("spec.training.globalBatchSize", f"{t.global_batch_size} is not divisible by the data-parallel degree {dp}")]
    local = t.global_batch_size // dp
    if p.pipeline > 1:
        if local % p.microbatches:
            return [Problem("spec.parallelism.microbatches", f"local batch {local} (globalBatchSize {t.global_batch_size} / data {dp}) is not divisible by microbatches {p.microbatches}")]
    elif local % t.micro_batch_size:
        return [Problem("spec.training.microBatchSize", f"local batch {local} (globalBatchSize {t.global_batch_size} / data {dp}) is not divisible by microBatchSize {t.micro_batch_size}")]
    return []


def _model_problems(spec: TrainingJobSpec) -> list[Problem]:
    m = spec.model
    if m is None:
        if not spec.command:
            return [Problem("spec.model", "set model (built-in runtime) or command (your own entrypoint)")]
        return []
    if (m.preset is None) == (m.entrypoint is None):
        return [Problem("spec.model", "set exactly one of model.preset or model.entrypoint")]
    if m.entrypoint is not None:
        if m.overrides:
            return [Problem("spec.model.overrides", "overrides apply to model.preset only")]
        return []
    try:
        shape = resolve_shape(m.preset, m.overrides)
    except (KeyError, ValueError) as exc:
        field = "spec.model.preset" if isinstance(exc, KeyError) else "spec.model.overrides"
        return [Problem(field, str(exc).strip('"'))]
    p = spec.parallelism
    out: list[Problem] = []
    if shape.dim % shape.n_heads:
        out.append(Problem("spec.model.overrides", f"dim {shape.dim} is not divisible by nHeads {shape.n_heads}"))
    if shape.n_heads % shape.n_kv_heads:
        out.append(Problem("spec.model.overrides", f"nHeads {shape.n_heads} is not divisible by nKvHeads {shape.n_kv_heads}"))
    if shape.n_heads % p.tensor:
        out.append(Problem("spec.parallelism.tensor", f"tensor {p.tensor} does not divide the model's nHeads {shape.n_heads}"))
    if shape.n_kv_heads % p.tensor:
        out.append(Problem("spec.parallelism.tensor", f"tensor {p.tensor} does not divide the model's nKvHeads {shape.n_kv_heads}"))
    if shape.ffn_hidden % p.tensor:
        out.append(Problem("spec.parallelism.tensor", f"tensor {p.tensor} does not divide the model's ffnHidden {shape.ffn_hidden}"))
    stages = p.pipeline * p.virtual_stages
    if stages > shape.n_layers:
        out.append(Problem("spec.parallelism.pipeline", f"{stages} pipeline stages (pipeline {p.pipeline} × virtualStages {p.virtual_stages}) exceed the model's {shape.n_layers} layers"))
    if spec.data.seq_len > shape.max_seq_len:
        out.append(Problem("spec.data.seqLen", f"seqLen {spec.data.seq_len} exceeds the model's maxSeqLen {shape.max_seq_len}"))
    if spec.data.source != "synthetic" and shape.vocab_size < 256 and spec.data.source == "corpus":
        out.append(Problem("spec.model.overrides", f"the byte-level corpus needs vocabSize >= 256, got {shape.vocab_size}"))
    return out


def _cluster_problems(spec: TrainingJobSpec, config: OperatorConfig) -> list[Problem]:
    out: list[Problem] = []
    for error in validate_network(spec, config.network_profiles.get(spec.network.profile)):
        field, _, message = error.partition(": ")
        if field == "network.profile":
            message += f"; known: {', '.join(sorted(config.network_profiles))}"
        out.append(Problem(f"spec.{field}", message))
    stub = TrainingJob(metadata={"name": "validate"}, spec=spec)
    for error in render_backend(stub, levels=config.topology.levels).errors:
        out.append(Problem("spec.scheduling", error))
    levels = {lvl.name for lvl in config.topology.levels} | {lvl.label for lvl in config.topology.levels}
    for key in ("required", "preferred"):
        level = getattr(spec.scheduling.topology, key)
        if level is not None and level not in levels:
            out.append(Problem(f"spec.scheduling.topology.{key}", f"unknown topology level {level!r}; known: {', '.join(lvl.name for lvl in config.topology.levels)}"))
    if spec.elastic and spec.elastic.min_nodes > spec.elastic.max_nodes:
        out.append(Problem("spec.elastic", f"minNodes {spec.elastic.min_nodes} > maxNodes {spec.elastic.max_nodes}"))
    if spec.elastic and not spec.elastic.min_nodes <= spec.nodes <= spec.elastic.max_nodes:
        out.append(Problem("spec.elastic", f"nodes {spec.nodes} is outside [minNodes {spec.elastic.min_nodes}, maxNodes {spec.elastic.max_nodes}]"))
    fp = spec.failure_policy
    both = sorted(set(fp.retryable_exit_codes) & set(fp.permanent_exit_codes))
    if both:
        out.append(Problem("spec.failurePolicy", f"exit codes {both} are both retryable and permanent"))
    if spec.checkpoint.interval_steps and spec.checkpoint.volume is None and spec.nodes > 1:
        out.append(Problem("spec.checkpoint.volume", "checkpoints of a multi-node job need shared storage (a volume every node can mount)"))
    return out


def _name_problems(name: str) -> list[Problem]:
    if len(name) > MAX_JOB_NAME:
        return [Problem("metadata.name", f"{len(name)} characters; at most {MAX_JOB_NAME} (pod hostnames '<name>-node-<rank>' must fit a DNS label)")]
    if not _DNS_1035.match(name):
        return [Problem("metadata.name", "must be a DNS-1035 label (lower-case letters, digits, '-', starting with a letter)")]
    return []


def validate_spec(spec: TrainingJobSpec, config: OperatorConfig | None = None) -> list[Problem]:
    config = config or OperatorConfig()
    problems = _layout_problems(spec)
    if not problems:
        problems += _batch_problems(spec)
    problems += _model_problems(spec)
    problems += _cluster_problems(spec, config)
    return problems


def validate_job(obj: dict[str, Any], config: OperatorConfig | None = None) -> tuple[TrainingJob | None, list[Problem]]:
    """Parse and check a whole object. Returns (job or None, problems)."""
    try:
        job = parse_job(obj)
    except InvalidJob as exc:
        return None, exc.problems
    problems = _name_problems(job.metadata.name) + validate_spec(job.spec, config)
    return job, problems
