"""docs/api.md (phalanx crd --reference) is complete: every field path of both CRDs, array items'
and status arrays' included, and every message of every CEL rule the CRDs carry."""

from __future__ import annotations

import re
from typing import Any

import pytest

from phalanx.api.crd import build_crd
from phalanx.api.reference import _rows, api_reference
from phalanx.api.sweep import build_sweep_crd

SWEEP_TITLE = "# TrainingSweep API reference"


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def _messages(node: Any) -> list[str]:
    """Every x-kubernetes-validations message, at any depth (items, maps, nested objects)."""
    if isinstance(node, list):
        return [m for sub in node for m in _messages(sub)]
    if not isinstance(node, dict):
        return []
    out = [rule["message"] for rule in node.get("x-kubernetes-validations", [])]
    return out + [m for key, sub in node.items() if key != "x-kubernetes-validations" for m in _messages(sub)]


def _paths(node: dict[str, Any], prefix: str = "") -> list[str]:
    """Field paths as the reference writes them: ``roles[].name``, ``x.<name>.y``."""
    out = []
    for name, sub in node.get("properties", {}).items():
        key = f"{prefix}.{name}" if prefix else name
        out.append(key)
        out += _paths(sub, key)
        if isinstance(sub.get("items"), dict):
            out += _paths(sub["items"], f"{key}[]")
        if isinstance(sub.get("additionalProperties"), dict):
            out += _paths(sub["additionalProperties"], f"{key}.<name>")
    return out


def _table(text: str) -> dict[str, str]:
    """field → its row, for every field row of ``text``."""
    return {m.group(1): line for line in text.splitlines() if (m := re.match(r"^\| `([^`]+)` \|", line))}


def _documented(path: str, rows: dict[str, str], depth: int = 0) -> bool:
    """The path has its row, or an ancestor's row says "fields as in `other`" and other's has it."""
    if path in rows:
        return True
    for cut in (m.start() for m in re.finditer(r"\.|\[\]", path)):
        same = re.search(r"fields as in `([^`]+)`", rows.get(path[:cut], ""))
        if same and depth < 8:
            return _documented(same.group(1) + path[cut:], rows, depth + 1)
    return False


@pytest.fixture(scope="module")
def reference() -> tuple[str, str]:
    job, sweep = api_reference().split(SWEEP_TITLE)
    return job, SWEEP_TITLE + sweep


def test_every_rule_message_of_both_crds_is_in_the_reference(reference):
    text = "".join(reference)
    for crd in (build_crd(), build_sweep_crd()):
        messages = _messages(_schema(crd))
        assert len(messages) > 100 or crd["spec"]["names"]["kind"] == "TrainingSweep"
        missing = sorted({m for m in messages if m not in text})
        assert not missing, "messages the CRD carries but docs/api.md leaves out:\n" + "\n".join(missing)


@pytest.mark.parametrize("part", ["spec", "status"])
def test_every_field_path_of_the_job_is_in_the_reference(reference, part):
    job = reference[0]
    section = job.split(f"\n## {part}\n")[1].split("\n## ")[0]
    rows = _table(section)
    paths = _paths(_schema(build_crd())["properties"][part])
    assert {"roles[].name", "roles[].replicas", "env[].valueFrom", "conditions[].reason", "roles[].ready"} & set(paths)
    missing = [p for p in paths if not _documented(p, rows)]
    assert not missing, f"{part} fields docs/api.md leaves out: {missing}"


def test_every_field_path_of_the_sweep_is_in_the_reference(reference):
    sweep = reference[1]
    for part in ("spec", "status"):
        section = sweep.split(f"\n## TrainingSweep {part}\n")[1].split("\n## ")[0]
        rows = _table(section)
        paths = [p for p in _paths(_schema(build_sweep_crd())["properties"][part]) if not p.startswith("template.")]
        missing = [p for p in paths if not _documented(p, rows)]
        assert not missing, f"sweep {part} fields docs/api.md leaves out: {missing}"
    assert "| `trials[].reason` |" in sweep and "| `parameters[].range.min` |" in sweep


def test_status_arrays_and_role_items_have_rows(reference):
    spec, status = reference[0].split("\n## status\n")
    rows = _table(spec)
    for path in ("roles[].name", "roles[].replicas", "roles[].env", "env[].name", "volumes[].name", "tolerations[].key"):
        assert path in rows, path
    assert "each item: role names worker and node are reserved" in rows["roles"]  # a rule on every item of a list
    assert "fields as in `env`" in rows["roles[].env"] and "fields as in `checkpoint.volume.nfs`" in rows["volumes[].nfs"]
    assert {"conditions[].reason", "conditions[].status", "roles[].ready"} <= set(_table(status))


def test_rows_list_items_rules_and_repeats_once():
    item = {"type": "object", "required": ["a"], "properties": {"a": {"type": "string", "description": "A."},
                                                                 "b": {"type": "integer"}, "c": {"type": "boolean"}},
            "x-kubernetes-validations": [{"rule": "x", "message": "say a or b"}]}
    node = {"properties": {"one": {"type": "array", "items": item}, "two": {"type": "array", "items": item}}}
    out: list[str] = []
    _rows(node, "", [], out)
    assert out[0] == "| `one` | []object |  | each item: say a or b |"
    assert out[1] == "| `one[].a` | string | required | A. |"
    assert out[4] == "| `two` | []object |  | each item: say a or b; fields as in `one` |" and len(out) == 5
