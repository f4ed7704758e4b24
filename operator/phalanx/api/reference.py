"""Markdown API reference generated from the CRD schema (docs/api.md; `make crds` writes it)."""

from __future__ import annotations

import json
from typing import Any

from phalanx.api.crd import build_crd


def _type(node: dict[str, Any]) -> str:
    if node.get("enum"):
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = node.get("type", "any")
    if kind == "array":
        return f"[]{_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{_type(node['additionalProperties'])}"
    return kind


def _bounds(node: dict[str, Any]) -> list[str]:
    parts = []
    if "minimum" in node:
        parts.append((">" if node.get("exclusiveMinimum") else "≥") + f" {node['minimum']}")
    if "maximum" in node:
        parts.append(("<" if node.get("exclusiveMaximum") else "≤") + f" {node['maximum']}")
    if "maxItems" in node and node.get("type") == "array":
        parts.append(f"≤ {node['maxItems']} items")
    if "maxLength" in node and node.get("type") == "string":
        parts.append(f"≤ {node['maxLength']} characters")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    return parts + _rules(node)


def _rules(node: dict[str, Any]) -> list[str]:
    """The messages of the node's CEL rules, each once (x-kubernetes-validations)."""
    return list(dict.fromkeys(rule["message"] for rule in node.get("x-kubernetes-validations", [])))


def _inner(node: dict[str, Any], key: str) -> tuple[dict[str, Any] | None, str]:
    """The object whose fields are listed under ``key``: the node itself, an array's items
    (``key[]``) or a map's values (``key.<name>``); None when there are no fields below."""
    if node.get("properties"):
        return node, key
    items, values = node.get("items"), node.get("additionalProperties")
    if node.get("type") == "array" and isinstance(items, dict) and items.get("properties"):
        return items, f"{key}[]"
    if isinstance(values, dict) and values.get("properties"):
        return values, f"{key}.<name>"
    return None, key


def _member_rules(node: dict[str, Any]) -> list[str]:
    """Bounds and rules of each item (arrays) or value (maps), said on the collection's row."""
    out = []
    for what, sub in (("each item", node.get("items")), ("each value", node.get("additionalProperties"))):
        if isinstance(sub, dict) and (parts := _bounds(sub)):
            out.append(f"{what}: " + "; ".join(parts))
    return out


def _paths(node: dict[str, Any]) -> int:
    """Fields below ``node``, at any depth."""
    count = 0
    for sub in node.get("properties", {}).values():
        inner, _ = _inner(sub, "")
        count += 1 + (_paths(inner) if inner is not None else 0)
    return count


def _sentence(description: str, checks: list[str]) -> str:
    """The description, then the checks; on one line (a table cell)."""
    text = " ".join(description.split())
    if text and checks and not text.endswith("."):
        text += "."
    return " ".join([text, "; ".join(checks)]).strip().replace("|", "\\|")


# A field whose fields repeat another's (volume sources under volumes[] and checkpoint.volume, a
# role's env like the job's) says "fields as in `that`" instead of listing them again, when there
# are at least this many.
SAME_AS_MIN_FIELDS = 3


def _rows(node: dict[str, Any], prefix: str, required: list[str], out: list[str],
          seen: dict[str, str] | None = None) -> None:
    """One table row per field under ``node``, array items' (``roles[].name``) included."""
    seen = {} if seen is None else seen
    for name, sub in node.get("properties", {}).items():
        key = f"{prefix}.{name}" if prefix else name
        if "default" in sub and isinstance(sub["default"], dict):
            default = "{…}"
        elif "default" in sub:
            default = f"`{json.dumps(sub['default'])}`"
        else:
            default = "required" if name in required else ""
        inner, inner_key = _inner(sub, key)
        same_as = None
        if inner is not None:  # the same fields, reached the same way (object, items or values)
            fingerprint = json.dumps([inner_key[len(key):], inner["properties"]], sort_keys=True)
            same_as = seen.get(fingerprint) if _paths(inner) >= SAME_AS_MIN_FIELDS else None
            seen.setdefault(fingerprint, key)
        checks = _bounds(sub) + _member_rules(sub) + ([f"fields as in `{same_as}`"] if same_as else [])
        desc = _sentence(sub.get("description", ""), checks)
        out.append(f"| `{key}` | {_type(sub)} | {default} | {desc} |")
        if inner is not None and same_as is None:
            _rows(inner, inner_key, inner.get("required", []), out, seen)


MODES = """\
## Two modes

| | built-in runtime (`model` set) | command job (`command`, no `model`) |
|---|---|---|
| what runs | `phalanx-runtime` trains `model` (`preset`, `pretrained` or `entrypoint`) | your `command`/`args` (e.g. `torchrun train.py`) in `image` |
| `parallelism`, `training`, `data`, `model` | used, with the layout rules below | `model` and `data` unused; `framework: deepspeed` renders `parallelism` and `training` into its config, `tensorflow`, `horovod` and `deepspeed` refuse the fields they cannot honour (listed below); otherwise your script splits its world itself |
| layout rule | nodes × procsPerNode = data × tensor × pipeline, batch arithmetic, model shape | nodes × procsPerNode = world, nothing more |
| `checkpoint` | sharded DCP checkpoints, resume, interval, keepLast | `volume` mounted at `mountPath`, `PHALANX_CHECKPOINT_DIR` set; the rest is yours |
| `progress` | refused (the runtime reports its own progress) | how rank 0's progress is read: `client` (the script calls `phalanx_common.report`), a log collector wrapped around the workers' command, `regex` or `jsonl`; then step, loss, metrics, hang detection and sweeps work as for the built-in runtime |
| `failurePolicy.hangTimeoutSeconds` | from the runtime's step progress | from the step `progress` reports; refused without `progress` |
| everything else | gang, topology, network profile, env, volumes, restarts, elastic, suspend | the same |

A command that wraps the runtime (`command: [bash, -c, "... && phalanx-runtime"]` with `model`
set) is held to the built-in runtime's rules: the runtime reads the same spec.

## What is checked where

Every check below gives the same verdict in `phalanx validate|render|local` (offline) and in
the operator; `tests/integration/test_one_verdict.py` compares them with the real API server on
a corpus of good and bad manifests.

1. **At `kubectl apply`, by the API server** (the CRD): types (strict: `"4"` is not a number,
   snake_case names are unknown fields), bounds and enums of every field, the formats named in the
   table (names, label keys and values, quantities, image references, paths), unique env names,
   volume names and mountPaths, and the cross-field rules listed next (CEL).
2. **By the operator, before anything is created** (the job ends `Valid=False`, reason
   `InvalidSpec`, naming the field): the built-in runtime's layout (model shape vs tensor and
   pipeline degrees, batch arithmetic), the cluster's network profiles and topology levels,
   label keys of `nodeSelector`, extended-resource names and whole-number amounts, the size of the
   rendered runtime config (a ConfigMap holds 1 MiB), integers written as floats.
3. **By the API server at pod creation, before anything is created**: each new gang is first
   created with `dryRun=All` (one pod, the Service, the ConfigMap). A permanent refusal (invalid:
   400/422; forbidden by admission such as Pod Security: 403) ends the job `Failed`, reason
   `CreateRejected`, with the API server's message, and no pod is left. A retryable one (quota, a
   PriorityClass or ServiceAccount that does not exist yet, 409/429/5xx) keeps it waiting with
   `Created=False`, reason `CreateRefused`, retried with exponential backoff (2 s … 5 min); pods
   are created with a slow start (the first alone, then a window that doubles per round trip up
   to `podCreateConcurrency`), which stops at the first refusal.
4. **While it runs**: an error while deciding a job's fate sets `Reconciled=False`
   (`ReconcileError`) with the message and, after 3 in a row, ends the job `Failed`; a pod stuck
   terminating on a node that is gone or NotReady is deleted with grace period 0 after
   `forceDeleteAfterSeconds` (operator config, default 60) and an Event `ForceDeleted`.

Cross-field rules (API server CEL and operator alike):
"""


FIELDS = """\
In the field tables, `roles[].name` is the field `name` of each item of the list `roles`, and
`x.<name>` a field of each value of the map `x`; the description ends with the field's bounds and
the words of each rule the API server checks on it ("each item:" for a rule on every item of a
list). A field whose fields repeat another's says "fields as in" that one."""


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _names(title: str, crd: dict[str, Any]) -> list[str]:
    """The rules on metadata.name (the only metadata CEL may read)."""
    return ["", f"## {title}", "", *[f"- {m}" for m in _rules(_schema(crd))]]


def api_reference() -> str:
    # the TrainingSweep section (docs/sweep.md)
    from phalanx.api.sweep import build_sweep_crd, sweep_reference

    crd = build_crd()
    root = _schema(crd)["properties"]
    lines = [
        "# TrainingJob API reference (phalanx.dev/v1alpha1)",
        "",
        "Generated from the pydantic models in `operator/phalanx/api/` by `make crds`; do not edit.",
        "Short name `tj`.",
        "",
        MODES,
    ]
    lines += [f"- {r['message']}" for r in root["spec"].get("x-kubernetes-validations", [])]
    lines += ["", "Operator-only rules (CEL cannot afford them; refused before anything is created):", ""]
    lines += [f"- {m}" for m in _operator_only_rules()]
    lines += _names("metadata.name", crd) + ["", FIELDS]
    for title in ("spec", "status"):
        lines += ["", f"## {title}", "", "| field | type | default | description |", "|---|---|---|---|"]
        _rows(root[title], "", root[title].get("required", []), lines)
    sweep = sweep_reference().rstrip("\n").split("\n") + _names("TrainingSweep metadata.name", build_sweep_crd())
    return "\n".join(lines) + "\n\n" + "\n".join(sweep) + "\n"


def _operator_only_rules() -> list[str]:
    from phalanx.api.base import all_rules

    return sorted({r.message for r in all_rules() if r.cel is None})
