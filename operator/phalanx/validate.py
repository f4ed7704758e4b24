"""Semantic rules beyond the CRD schema (pure). Every problem names the field and the rule."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from phalanx.api.config import OperatorConfig
from phalanx.api.layout import check_layout
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
    """The runtime's own layout rules (shared in phalanx.api.layout), with spec. field paths."""
    problems = []
    for error in check_layout(spec):
        field, _, message = error.partition(": ")
        problems.append(Problem(f"spec.{field}", message))
    return problems


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
    if fp.hang_timeout_seconds and spec.command:
        out.append(Problem("spec.failurePolicy.hangTimeoutSeconds", "hang detection reads the built-in runtime's progress endpoint; a user command reports no progress"))
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
    problems = _layout_problems(spec) + _cluster_problems(spec, config)
    return problems


def validate_job(obj: dict[str, Any], config: OperatorConfig | None = None) -> tuple[TrainingJob | None, list[Problem]]:
    """Parse and check a whole object. Returns (job or None, problems)."""
    try:
        job = parse_job(obj)
    except InvalidJob as exc:
        return None, exc.problems
    problems = _name_problems(job.metadata.name) + validate_spec(job.spec, config)
    return job, problems
