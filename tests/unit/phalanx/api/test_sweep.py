"""The TrainingSweep CRD generated from the pydantic API (and its drift)."""

from __future__ import annotations

from pathlib import Path

from phalanx.api.sweep import (
    OPERATOR_RULES,
    Objective,
    ParameterRange,
    TrainingSweepSpec,
    build_sweep_crd,
    sweep_crd_yaml,
    sweep_reference,
)
from tests.unit.phalanx.api.test_crd import _walk  # the CRD schema, node by node

ROOT = Path(__file__).resolve().parents[4]
CRD_FILE = ROOT / "crds" / "phalanx.dev_trainingsweeps.yaml"


def test_crd_files_match_models():
    assert CRD_FILE.read_text() == sweep_crd_yaml(), "crds/ drifted from the API models: run `make crds`"
    chart = ROOT / "charts" / "phalanx" / "crds" / CRD_FILE.name
    assert chart.read_text() == sweep_crd_yaml(), "charts/phalanx/crds drifted: run `make crds`"
    assert sweep_reference() in (ROOT / "docs" / "api.md").read_text(), "docs/api.md drifted: run `make crds`"


def test_names_printer_columns_and_status_subresource():
    crd = build_sweep_crd()
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("TrainingSweep", "trainingsweeps", ["tsw"])
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["Phase", "Done", "Running", "Stopped", "Best", "Value", "Age"]


def test_schema_is_structural_and_template_is_the_trainingjob_spec():
    root = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(root):
        assert "$ref" not in node and "anyOf" not in node and "propertyNames" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"), path
    template = root["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    assert "required" not in template and "image" in template["properties"] and "parallelism" in template["properties"]
    spec = root["properties"]["spec"]
    assert spec["properties"]["maxParallel"]["minimum"] == 1
    rules = spec["x-kubernetes-validations"]
    immutable = [r for r in rules if r.get("reason") == "FieldValueForbidden"]
    assert len(immutable) == 1 and "maxParallel" not in immutable[0]["rule"] and "self.template == oldSelf.template" in immutable[0]["rule"]


def test_every_cel_rule_has_a_python_twin():
    twins = {r.cel for cls in (TrainingSweepSpec, ParameterRange, Objective) for r in cls.checks}
    spec = build_sweep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    found = []

    def walk(node, in_template=False):
        if isinstance(node, dict):
            if not in_template:
                found.extend(node.get("x-kubernetes-validations", []))
            for key, value in node.items():
                walk(value, in_template or key == "template")
        elif isinstance(node, list):
            for value in node:
                walk(value, in_template)

    walk(spec)
    for rule in found:
        if rule.get("reason") == "FieldValueForbidden" or rule["message"].startswith("must be "):
            continue
        assert rule["rule"] in twins, rule
    assert all(r.cel is None for r in OPERATOR_RULES)
