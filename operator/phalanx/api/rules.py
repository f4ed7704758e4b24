"""Cross-field rules, each written once and enforced twice: as a CEL rule in the CRD (the API
server refuses the object at `kubectl apply`) and as a Python predicate (`phalanx validate`,
`render`, `local` and the operator give the same verdict offline and for objects stored before
a rule existed). tests/unit/test_rules.py checks every rule both ways on the same inputs.

A rule belongs to the model class it is declared on (``checks`` ClassVar); ``self`` in the CEL
is that object, and ``holds`` gets the pydantic instance. Fields that are absent in the object
are ``None`` in Python and ``!has(...)`` in CEL (the API server prunes nulls, as parsing does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


def add_cel(schema: dict[str, Any], cls: type) -> None:
    """pydantic ``json_schema_extra`` hook: the class's rules become x-kubernetes-validations."""
    rules = [r for r in getattr(cls, "checks", ()) if r.cel is not None]
    if rules:
        schema["x-kubernetes-validations"] = [r.crd() for r in rules]


def broken_rules(obj: BaseModel, path: str) -> Iterator[tuple[str, str, bool]]:
    """(field path, message, enforced by the API server too) for every rule that does not hold
    anywhere in ``obj``'s tree.

    A rule's predicate that raises counts as broken (it met a value its CEL twin would refuse)."""
    for rule in getattr(type(obj), "checks", ()):
        try:
            ok = rule.holds(obj)
        except (ArithmeticError, TypeError, ValueError, AttributeError):
            ok = False
        if not ok:
            yield path + (rule.field or ""), rule.message, rule.cel is not None
    for name, info in type(obj).model_fields.items():
        value = getattr(obj, name)
        child = f"{path}.{info.alias or name}"
        if isinstance(value, BaseModel):
            yield from broken_rules(value, child)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    yield from broken_rules(item, f"{child}[{i}]")
