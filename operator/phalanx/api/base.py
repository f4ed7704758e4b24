"""The base of every API model and the scalar types shared by the TrainingJob and operator config."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from phalanx.api import patterns
from phalanx.api.rules import Rule, add_cel

# Free-form Kubernetes content. No API field uses it: volume and env sources carry Kubernetes'
# own schemas (api/kubeschemas.py), and a free-form node would let a tenant store anything there.
KubeObject = Annotated[dict[str, Any], Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})]

QUANTITY_SCHEMA = {
    "x-kubernetes-int-or-string": True,
    "pattern": patterns.QUANTITY,
    "maxLength": 64,
    "x-kubernetes-validations": [{
        "rule": "type(self) != int || self >= 0",
        "message": "must be a non-negative quantity such as 8, 500m or 64Gi",
    }],
}


def _quantity(value: Any) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and len(value) <= 64 and re.fullmatch(patterns.QUANTITY, value):
        return value
    raise PydanticCustomError("quantity", "'{value}' must be " + patterns.DESCRIPTIONS[patterns.QUANTITY], {"value": value})


# A non-negative resource quantity: an integer or a Kubernetes quantity string.
Quantity = Annotated[int | str, PlainValidator(_quantity), WithJsonSchema(QUANTITY_SCHEMA)]


def unique_by(items: list[Any], key: str, what: str) -> list[Any]:
    """``items`` unchanged, or ValueError naming the first repeated ``key`` value (list validators)."""
    seen: set[Any] = set()
    for item in items:
        value = getattr(item, key)
        if value in seen:
            raise ValueError(f"duplicate {what} {value!r}")
        seen.add(value)
    return items


def keys_match(mapping: dict[str, Any], pattern: str, max_length: int) -> bool:
    """Every key of ``mapping`` matches ``pattern`` and is at most ``max_length`` long."""
    return all(re.fullmatch(pattern, k) and len(k) <= max_length for k in mapping)


def bounded_str(pattern: str | None = None, max_length: int = 253, **kw: Any) -> Any:
    """A string field with a format and a length bound (CEL cost estimates need the bound)."""
    return Field(pattern=pattern, max_length=max_length, **kw)


class Model(BaseModel):
    """camelCase on the wire, unknown fields refused, enums as their values.

    ``checks``: the class's cross-field rules (CEL in the CRD, Python in validate)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", use_enum_values=True,
        validate_default=True, allow_inf_nan=False, json_schema_extra=add_cel,
    )
    checks: ClassVar[tuple[Rule, ...]] = ()


def all_rules() -> list[Rule]:
    """Every cross-field rule of every API model (the CRD's CEL and validate's Python twins)."""
    def subclasses(cls: type) -> Any:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    return [rule for cls in subclasses(Model) for rule in cls.checks]
