"""Cross-field rules, each written once and enforced twice: as a CEL rule in the CRD (the API
server refuses the object at `kubectl apply`) and as a Python predicate (`phalanx validate`,
`render`, `local` and the operator give the same verdict offline and for objects stored before
a rule existed). tests/unit/phalanx/api/test_crd.py checks that every CEL rule has its Python twin;
tests/integration/test_one_verdict.py that the API server and `phalanx validate` agree on the same inputs.

A rule belongs to the model class it is declared on (``checks`` ClassVar); ``self`` in the CEL
is that object, and ``holds`` gets the pydantic instance. Fields that are absent in the object
are ``None`` in Python and ``!has(...)`` in CEL (the API server prunes nulls, as parsing does).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Rule:
    """``cel`` None: the operator's rule only. CEL cannot afford it (a regex over map keys, whose
    length the schema cannot bound, exceeds the API server's cost budget); the operator refuses
    the job before creating anything, and the pod's dry-run would too."""

    cel: str | None
    message: str
    holds: Callable[[Any], bool]
    field: str | None = None  # relative field path of the culprit, e.g. ".parallelism.tensor"

    def crd(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.field:
            out["fieldPath"] = self.field
        return out


def script_framework_rules(name: str, script: str, example: str, model_why: str) -> tuple[Rule, Rule]:
    """``framework: <name>`` runs the user's own script: spec.command set, spec.model unset."""
    guard = f"!has(self.framework) || self.framework != '{name}' || "
    return (
        Rule(guard + "has(self.command)", f"framework {name} runs your own {script} script: set spec.command (e.g. {example})",
             lambda s: s.framework != name or s.command is not None, ".command"),
        Rule(guard + "!has(self.model)",
             f"framework {name}: spec.model must not be set (the built-in runtime is {model_why}; the job runs spec.command)",
             lambda s: s.framework != name or s.model is None, ".model"),
    )


def parallelism_default(guard: str, applies: Callable[[Any], bool], who: str, field: str, attr: str,
                        default: Any, cel_default: str, why: str) -> Rule:
    """``spec.parallelism.<field>`` must keep its default where a mode does not honour it: ``guard``
    is the mode's CEL prefix (``!<mode> || ``), ``applies`` its Python twin, ``who`` names it."""
    return Rule(guard + f"self.parallelism.{field} == {cel_default}",
                f"{who}: spec.parallelism.{field} must be {cel_default} ({why})",
                lambda s: not applies(s) or getattr(s.parallelism, attr) == default, f".parallelism.{field}")


def default_unless(guard: str, applies: Callable[[Any], bool], field: str, attr: str, default: Any,
                   message: str) -> Rule:
    """``self.<field>`` keeps its default unless ``guard`` (CEL) / ``applies`` (its Python twin)
    holds. "Set" means "differs from its default": the CRD's defaults fill an absent field before
    the API server runs CEL, so ``has()`` cannot tell a field the user wrote from one left out, and
    writing the default value changes nothing. ``default`` is a JSON scalar (its CEL literal)."""
    return Rule(f"{guard} || !has(self.{field}) || self.{field} == {json.dumps(default)}", message,
                lambda o: applies(o) or getattr(o, attr) == default, f".{field}")


def full_replica_rules(default: Callable[..., Rule], why: str) -> tuple[Rule, ...]:
    """The parallelism fields left at their defaults by a mode where every rank holds a full
    replica (MWMS, Horovod): ``default`` is the mode's :func:`parallelism_default` partial, ``why``
    says so in the messages of the sharding fields."""
    pipeline = "no pipeline parallelism"
    return (
        default("zero", "zero", 0, "0", f"no ZeRO sharding: {why}"),
        default("replicate", "replicate", 1, "1", "no HSDP replica groups"),
        default("cpuOffload", "cpu_offload", False, "false", f"no CPU offload: {why}"),
        default("tensor", "tensor", 1, "1", f"no tensor parallelism: {why}"),
        default("sequenceParallel", "sequence_parallel", False, "false", "no tensor parallelism"),
        default("pipeline", "pipeline", 1, "1", pipeline),
        default("pipelineSchedule", "pipeline_schedule", "1F1B", "'1F1B'", pipeline),  # PipelineSchedule is a StrEnum
        default("microbatches", "microbatches", 1, "1", pipeline),
        default("virtualStages", "virtual_stages", 1, "1", pipeline),
    )


def add_cel(schema: dict[str, Any], cls: type) -> None:
    """pydantic ``json_schema_extra`` hook: the class's rules become x-kubernetes-validations."""
    rules = [r for r in getattr(cls, "checks", ()) if r.cel is not None]
    if rules:
        schema["x-kubernetes-validations"] = [r.crd() for r in rules]


def broken(rules: Iterable[Rule], obj: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """(field path, message, enforced by the API server too) for every rule of ``rules`` that
    does not hold for ``obj`` itself (not its children).

    A rule's predicate that raises counts as broken (it met a value its CEL twin would refuse)."""
    for rule in rules:
        try:
            ok = rule.holds(obj)
        except (ArithmeticError, TypeError, ValueError, AttributeError):
            ok = False
        if not ok:
            yield path + (rule.field or ""), rule.message, rule.cel is not None


def broken_rules(obj: BaseModel, path: str) -> Iterator[tuple[str, str, bool]]:
    """:func:`broken` for every rule anywhere in ``obj``'s tree."""
    yield from broken(getattr(type(obj), "checks", ()), obj, path)
    for name, info in type(obj).model_fields.items():
        value = getattr(obj, name)
        child = f"{path}.{info.alias or name}"
        if isinstance(value, BaseModel):
            yield from broken_rules(value, child)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from broken_rules(item, f"{child}[{i}]")
