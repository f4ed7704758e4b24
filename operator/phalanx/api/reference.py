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


def api_reference() -> str:
    root = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    lines = [
        "# TrainingJob API reference (phalanx.dev/v1alpha1)",
        "",
        "Generated from the pydantic models in `operator/phalanx/api/` by `make crds`; do not edit.",
        "Short name `tj`. Cross-field rules (checked by the API server with CEL, and by the operator):",
        "",
    ]
    for section in ("spec", "spec.parallelism"):
        node = root["spec"] if section == "spec" else root["spec"]["properties"]["parallelism"]
        lines += [f"- {r['message']}" for r in node.get("x-kubernetes-validations", [])]
    for title in ("spec", "status"):
        lines += ["", f"## {title}", "", "| field | type | default | description |", "|---|---|---|---|"]
        _rows(root[title], "", root[title].get("required", []), lines)
    return "\n".join(lines) + "\n"
