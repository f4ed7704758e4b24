"""The CRD in crds/ is generated from the pydantic API; drift fails here."""

from __future__ import annotations

from pathlib import Path

import yaml

from phalanx.api.crd import build_crd, crd_yaml
from phalanx.api.reference import api_reference

CRD_FILE = Path(__file__).resolve().parents[4] / "crds" / "phalanx.dev_trainingjobs.yaml"


def _walk(schema, path="spec"):
    yield path, schema
    for name, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


CHART_CRD_FILE = CRD_FILE.parents[1] / "charts" / "phalanx" / "crds" / CRD_FILE.name


def test_crd_file_matches_models():
    assert CRD_FILE.read_text() == crd_yaml(), "crds/ drifted from the API models: run `make crds`"
    assert CHART_CRD_FILE.read_text() == crd_yaml(), "charts/phalanx/crds drifted: run `make crds`"
    assert (CRD_FILE.parents[1] / "docs" / "api.md").read_text() == api_reference(), "docs/api.md drifted: run `make crds`"


def test_crd_names_and_printer_columns():
    crd = build_crd()
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["tj"] and names["plural"] == "trainingjobs"
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    for needed in ("Phase", "Nodes", "Step", "Restarts", "Age"):
        assert needed in columns


def test_schema_is_structural():
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(spec):
        assert "$ref" not in node and "anyOf" not in node and "oneOf" not in node, path
        assert "title" not in node, path
        typed = "type" in node or node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        assert typed, f"{path} has no type"


def test_defaults_enums_bounds_and_cel():
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    par = spec["properties"]["parallelism"]
    assert par["properties"]["zero"] == {"default": 0, "description": par["properties"]["zero"]["description"], "maximum": 3, "minimum": 0, "type": "integer", "format": "int64"}
    assert par["properties"]["pipelineSchedule"]["enum"] == ["GPipe", "1F1B", "Interleaved1F1B", "ZBVZeroBubble"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("self.parallelism.data * self.parallelism.tensor * self.parallelism.pipeline" in r for r in rules)
    assert any("self.parallelism.microbatches >= self.parallelism.pipeline" in r for r in rules)
    # runtime-only, or framework deepspeed/tensorflow/horovod only (a plain command job's script splits its world itself)
    assert all(r.startswith(("!has(self.model) || ", "!has(self.framework) || self.framework != 'deepspeed' || ",
                             "!has(self.framework) || self.framework != 'tensorflow' || ",
                             "!has(self.framework) || self.framework != 'horovod' || ",
                             "!has(self.framework) || self.framework != 'horovod' || ",
                             "!has(self.parallelism.parameterServer) || "))
               for r in rules if "self.parallelism." in r)
    assert "required" not in spec  # image: the operator config's runtimeImage when left out
    assert spec["properties"]["checkpoint"]["properties"]["async"]["default"] is True


def test_generated_file_is_valid_yaml_with_header():
    text = CRD_FILE.read_text()
    assert text.startswith("# Generated")
    assert yaml.safe_load(text)["kind"] == "CustomResourceDefinition"


def _all_rules(node, out):
    if isinstance(node, dict):
        out += node.get("x-kubernetes-validations", [])
        for value in node.values():
            _all_rules(value, out)
    elif isinstance(node, list):
        for value in node:
            _all_rules(value, out)
    return out


def test_every_cel_rule_has_a_python_twin():
    """No CEL rule without the same rule in `phalanx validate`: a Rule object (one definition,
    both forms), a format (the same regex as the pydantic field's), or the fixed few below."""
    from phalanx.api import patterns
    from phalanx.api.base import QUANTITY_SCHEMA, all_rules
    from phalanx.api.crd import NAME_RULES

    twins = {r.cel for r in all_rules() if r.cel}
    formats = {f"must be {d}" for d in patterns.DESCRIPTIONS.values()}
    fixed = {r["rule"] for r in NAME_RULES + QUANTITY_SCHEMA["x-kubernetes-validations"]}
    rules = _all_rules(build_crd(), [])
    assert len(rules) > 40
    for rule in rules:
        if rule.get("reason") == "FieldValueForbidden":
            continue  # the immutability transition rule (tests/integration: edits of a running job)
        assert rule["rule"] in twins or rule["message"] in formats or rule["rule"] in fixed, rule
