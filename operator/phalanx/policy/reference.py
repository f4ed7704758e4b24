"""docs/policy.md, generated (`make crds`): every policy rule and operator limit with its default
and how an admin changes it, from the same pydantic models the operator reads — no hand copy."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from phalanx.api.config import Limits
from phalanx.api.policy import PolicyRules
from phalanx.api.sweep import MAX_TRIALS
from phalanx.policy.limits import MAX_SPEC_DEPTH
from phalanx.safejson import MAX_DEPTH

HEADER = """\
# Policy and limits reference

Generated from `operator/phalanx/api/policy.py` and `api/config.py` (policy/reference.py) by `make crds`. Do not edit.
The defaults are for tenants who do not trust each other; [security.md](security.md) says why.

"""


def _default(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    value = field.default_factory() if field.default_factory is not None else field.default
    return "`null`" if value is None else f"`{json.dumps(value)}`"


def _table(model: type[BaseModel], where: str) -> list[str]:
    rows = ["| value | default | what it allows |", "|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        desc = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{where}.{key}` | {_default(model, name)} | {desc} |")
    return rows


FIXED: list[tuple[str, Any, str]] = [
    ("nesting of a spec", MAX_SPEC_DEPTH, "levels; no field of the API nests deeper (refused before anything is parsed)"),
    ("nesting the operator decodes", MAX_DEPTH, "levels; deeper values of any object it reads are cut, the object refused by name, its watch unharmed"),
    ("trials of a sweep", MAX_TRIALS, "trial names are `<sweep>-<index>`"),
]


def policy_reference() -> str:
    lines = [HEADER.rstrip("\n"), "",
             "## Cluster policy", "",
             "Chart values `policy.default` (every namespace) and `policy.namespaces[]` (`matchLabels` → "
             "`rules`, first match wins). The chart's ValidatingAdmissionPolicy and the operator apply the "
             "same rules; a value left out of a namespace entry takes its default below.", "",
             *_table(PolicyRules, "policy.default"), "",
             "## What one object may cost the operator", "",
             "Chart values `limits`; a larger object is refused with the limit's name. Every check runs off "
             "the operator's event loop; these bound how long.", "",
             *_table(Limits, "limits"), "",
             "Fixed:", "",
             "| what | at most | why |", "|---|---|---|",
             *[f"| {what} | {value} | {why} |" for what, value, why in FIXED], ""]
    return "\n".join(lines)
