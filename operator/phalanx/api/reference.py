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


def _bounds(node: dict[str, Any]) -> str:
    parts = []
    if "minimum" in node:
        parts.append((">" if node.get("exclusiveMinimum") else "≥") + f" {node['minimum']}")
    if "maximum" in node:
        parts.append(f"≤ {node['maximum']}")
    if "maxItems" in node:
        parts.append(f"≤ {node['maxItems']} items")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    for rule in node.get("x-kubernetes-validations", []):
        if rule["message"].startswith("must be "):
            parts.append(rule["message"])
    return ", ".join(parts)


def _rows(node: dict[str, Any], prefix: str, required: list[str], out: list[str]) -> None:
    for name, sub in node.get("properties", {}).items():
        key = f"{prefix}.{name}" if prefix else name
        if "default" in sub and isinstance(sub["default"], dict):
            default = "{…}"
        elif "default" in sub:
            default = f"`{json.dumps(sub['default'])}`"
        else:
            default = "required" if name in required else ""
        desc = " ".join(x for x in (sub.get("description", ""), _bounds(sub)) if x).replace("|", "\\|")
        out.append(f"| `{key}` | {_type(sub)} | {default} | {desc} |")
        if sub.get("type") == "object" and sub.get("properties"):
            _rows(sub, key, sub.get("required", []), out)


MODES = """\
## Two modes

| | built-in runtime (`model` set) | command job (`command`, no `model`) |
|---|---|---|
| what runs | `phalanx-runtime` trains `model` (preset or `entrypoint`) | your `command`/`args` (e.g. `torchrun train.py`) in `image` |
| `parallelism`, `training`, `data`, `model` | used, with the layout rules below | ignored: your script splits its world itself |
| layout rule | nodes × procsPerNode = data × tensor × pipeline, batch arithmetic, model shape | nodes × procsPerNode = world, nothing more |
| `checkpoint` | sharded DCP checkpoints, resume, interval, keepLast | `volume` mounted at `mountPath`, `PHALANX_CHECKPOINT_DIR` set; the rest is yours |
| `failurePolicy.hangTimeoutSeconds` | from the runtime's step progress | refused (no progress is reported) |
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


def api_reference() -> str:
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
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
    for title in ("spec", "status"):
        lines += ["", f"## {title}", "", "| field | type | default | description |", "|---|---|---|---|"]
        _rows(root[title], "", root[title].get("required", []), lines)
    from phalanx.api.sweep import sweep_reference  # the TrainingSweep section (docs/sweep.md)

    return "\n".join(lines) + "\n\n" + sweep_reference()


def _operator_only_rules() -> list[str]:
    from phalanx.api.base import all_rules

    return sorted({r.message for r in all_rules() if r.cel is None})
