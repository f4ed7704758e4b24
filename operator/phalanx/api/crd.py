"""Generate the TrainingJob CustomResourceDefinition from the pydantic models (and, with
``custom_resource_definition`` and ``unchanged_checks``, the TrainingSweep's: api/sweep.py).

Pydantic's JSON schema is turned into a Kubernetes structural schema: references inlined,
``Optional[X]`` becomes ``X``, a union of scalars is bounded to scalars, titles dropped. The
core/v1 types inside (volume and env sources) carry Kubernetes' own schemas (api/kubeschemas.py).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.types import MAX_JOB_NAME, TrainingJobSpec, TrainingJobStatus

_DROP = {"title", "$defs", "discriminator"}
_KEEP_FORMATS = {"int32", "int64", "float", "double", "byte", "date-time"}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    if isinstance(schema, list):
        return [_inline(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = copy.deepcopy(defs[schema["$ref"].split("/")[-1]])
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        target.update(extra)
        return _inline(target, defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key in ("properties",):
            out[key] = {name: _inline(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _inline(value, defs)
    return out


def _structural(schema: Any) -> Any:
    """Rewrite JSON-schema idioms that a structural schema does not allow."""
    if isinstance(schema, list):
        return [_structural(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    # a "properties" map holds field names, not keywords: a field may be called format or type
    schema = {k: {name: _structural(sub) for name, sub in v.items()} if k == "properties" else _structural(v)
              for k, v in schema.items()}
    for combinator in ("anyOf", "oneOf"):
        options = schema.get(combinator)
        if options is None:
            continue
        non_null = [o for o in options if o.get("type") != "null"]
        if schema.get("x-kubernetes-int-or-string"):
            schema.pop(combinator)
            schema.pop("type", None)
        elif len(non_null) == 1:
            schema.pop(combinator)
            merged = dict(non_null[0])
            merged.update(schema)
            schema = merged
        else:
            schema.pop(combinator)
            schema.update(_any_scalar(non_null))
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(bound), int | float) and not isinstance(schema.get(bound), bool):
            schema[plain] = schema.pop(bound)  # OpenAPI v3.0: a number bound plus a boolean flag
            schema[bound] = True
    if schema.get("default", 0) is None:
        schema.pop("default")
    if schema.get("type") == "integer":
        schema.setdefault("format", "int64")
    if "format" in schema and schema["format"] not in _KEEP_FORMATS:
        schema.pop("format")
    _pattern_as_cel(schema)
    if schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" in schema:
        if schema["additionalProperties"] in (True, {}):
            schema.pop("additionalProperties")
    if schema.get("additionalProperties") is False:
        schema.pop("additionalProperties")
    return schema


_SCALARS = {"boolean", "integer", "number", "string"}


def _any_scalar(options: list[dict[str, Any]]) -> dict[str, Any]:
    """A union of scalar types (a sweep's bool | int | float | str values). A structural schema
    has no type for it and CEL cannot see an untyped node, so the value validations that apply
    by the value's kind bound it: no object or list, not even an empty one, can be stored; the
    longest string any option takes. The operator checks which scalar fits the field."""
    if not all(o.get("type") in _SCALARS for o in options):
        raise ValueError(f"no structural schema for a union of {options}")
    out: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True, "maxProperties": 0, "maxItems": 0,
                           "not": {"enum": [{}, []]}}
    lengths = [o.get("maxLength") for o in options if o["type"] == "string"]
    if lengths and None not in lengths:
        out["maxLength"] = max(lengths)
    return out


def _pattern_as_cel(schema: dict[str, Any]) -> None:
    """A known format becomes a CEL rule with words (the API server's own pattern error shows
    only the regex). Same regex, same verdict; `kubectl apply` then says what is expected."""
    pattern = schema.get("pattern")
    if pattern not in patterns.DESCRIPTIONS:
        return
    schema.pop("pattern")
    match = f"self.matches(r'{pattern}')"
    rule = f"type(self) != string || {match}" if schema.get("x-kubernetes-int-or-string") else match
    rules = schema.setdefault("x-kubernetes-validations", [])
    rules.insert(0, {"rule": rule, "message": f"must be {patterns.DESCRIPTIONS[pattern]}"})


def _default_nested_objects(model: type[BaseModel], schema: dict[str, Any]) -> None:
    """Sub-objects built by default_factory get their full default value, so the API server
    defaults them (and CEL rules see every field) even when the user leaves them out."""
    for name, info in model.model_fields.items():
        prop = schema.get("properties", {}).get(info.alias or name)
        target = info.annotation
        if prop is None or not (isinstance(target, type) and issubclass(target, BaseModel)):
            continue
        if info.default_factory is not None:
            prop["default"] = info.default_factory().model_dump(by_alias=True, mode="json", exclude_none=True)
        _default_nested_objects(target, prop)


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema = _structural(_inline(raw, defs))
    _default_nested_objects(model, schema)
    return schema


PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Nodes", "type": "string", "jsonPath": ".status.nodes", "description": "ready/total"},
    {"name": "Roles", "type": "string", "jsonPath": ".status.rolesReady", "description": "ready/total pods per role (jobs with spec.roles)"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.step"},
    {"name": "Loss", "type": "number", "jsonPath": ".status.loss", "priority": 1},
    {"name": "EvalLoss", "type": "number", "jsonPath": ".status.metrics.eval_loss", "priority": 1,
     "description": "the last eval_loss (training.eval)"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1,
     "description": "why the job is in its phase: the reason of the condition that decides it"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


# Fields that may change at any time; every other field only while the job is suspended.
MUTABLE_FIELDS = ("suspend", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "failurePolicy")


def unchanged_checks(spec_schema: dict[str, Any], skip: tuple[str, ...]) -> list[str]:
    """CEL, one a field of ``spec_schema`` but ``skip``: the field is as it was (``oldSelf``)."""
    checks = []
    for field in spec_schema["properties"]:
        if field in skip:
            continue
        if "default" in spec_schema["properties"][field] or field in spec_schema.get("required", []):
            checks.append(f"self.{field} == oldSelf.{field}")
        else:
            checks.append(f"(has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field}))")
    return checks


def immutability_rule(spec_schema: dict[str, Any]) -> dict[str, str]:
    """CEL transition rule: the API server refuses edits of a running job's immutable fields."""
    return {
        "rule": "oldSelf.suspend || (" + " && ".join(unchanged_checks(spec_schema, MUTABLE_FIELDS)) + ")",
        "message": "only " + ", ".join(MUTABLE_FIELDS) + " may change while a job is not suspended; "
        "suspend it first (spec.suspend: true) to change anything else",
        "reason": "FieldValueForbidden",
    }


# metadata.name (the only metadata CEL may read) becomes Service names and pod hostnames.
NAME_RULES = [
    {"rule": f"self.metadata.name.matches(r'{patterns.JOB_NAME}')",
     "message": f"metadata.name must be {patterns.DESCRIPTIONS[patterns.JOB_NAME]}"},
    {"rule": f"size(self.metadata.name) <= {MAX_JOB_NAME}",
     "message": f"metadata.name: at most {MAX_JOB_NAME} characters (pod hostnames '<name>-node-<rank>' must fit a DNS label)"},
]


def build_crd() -> dict[str, Any]:
    spec_schema = openapi_schema(TrainingJobSpec)
    spec_schema.setdefault("x-kubernetes-validations", []).append(immutability_rule(spec_schema))
    names = {"kind": constants.KIND, "plural": constants.PLURAL, "singular": constants.SINGULAR, "shortNames": constants.SHORT_NAMES}
    return custom_resource_definition(constants.CRD_NAME, names, spec_schema, TrainingJobStatus, NAME_RULES, PRINTER_COLUMNS)


def custom_resource_definition(name: str, names: dict[str, Any], spec_schema: dict[str, Any],
                               status_model: type[BaseModel], name_rules: list[dict[str, str]],
                               printer_columns: list[dict[str, Any]]) -> dict[str, Any]:
    """A namespaced CRD of our group, one served and stored version with a status subresource.
    ``names``: kind, plural, singular, shortNames (listKind and categories are added)."""
    status_schema = openapi_schema(status_model)
    status_schema.pop("required", None)
    root = {
        "type": "object",
        "required": ["spec"],
        "x-kubernetes-validations": name_rules,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    kind = names["kind"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {constants.LABEL_MANAGED_BY: constants.MANAGED_BY}},
        "spec": {
            "group": constants.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": names["plural"],
                "singular": names["singular"],
                "shortNames": names["shortNames"],
                "categories": constants.CATEGORIES,
            },
            "versions": [
                {
                    "name": constants.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": printer_columns,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# Generated from operator/phalanx/api by `make crds` (phalanx crd). Do not edit.\n"
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=100)
