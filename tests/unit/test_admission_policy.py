"""The chart's ValidatingAdmissionPolicy is generated from policy/admission.py, and the chart
writes each policy entry's params exactly as the operator reads the same values."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster.binaries import default_bin_dir
from phalanx.api.policy import PolicyRules
from phalanx.policy.admission import admission_policy, admission_policy_template, policy_variables

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "phalanx"


def test_chart_template_is_generated():
    assert (CHART / "templates" / "admission-policy.yaml").read_text() == admission_policy_template()


def test_every_policy_variable_is_used():
    expressions = " ".join(v["expression"] + v.get("messageExpression", "") for v in admission_policy()["spec"]["validations"])
    for variable in policy_variables(PolicyRules()):
        assert f"variables.{variable['name']}" in expressions, variable


def _helm_policies(*sets: str) -> dict[str, list[dict[str, str]]]:
    helm = default_bin_dir() / "helm"
    if not helm.exists():
        pytest.skip("helm not built (hack/cluster/build.sh)")
    args = [str(helm), "template", "rel", str(CHART), "-n", "ns"]
    for s in sets:
        args += ["--set", s]
    docs = [d for d in yaml.safe_load_all(subprocess.run(args, check=True, capture_output=True, text=True).stdout) if d]
    return {d["metadata"]["name"]: d["spec"]["variables"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}


def test_chart_policies_match_the_operator_policy():
    policies = _helm_policies("policy.namespaces[0].matchLabels.team=ml", "policy.namespaces[0].rules.allowSecrets=true",
                              "policy.namespaces[0].rules.maxNodes=8", "policy.namespaces[0].rules.allowedNetworkProfiles={default,ib}")
    values = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    assert policies["rel-operator-policy-default"] == policy_variables(PolicyRules.model_validate(values["default"]))
    entry = PolicyRules(allow_secrets=True, max_nodes=8, allowed_network_profiles=["default", "ib"])
    assert policies["rel-operator-policy-0"] == policy_variables(entry)
    assert admission_policy()["spec"]["validations"] == yaml.safe_load(
        (CHART / "templates" / "admission-policy.yaml").read_text().split("\n", 2)[2].rsplit("{{- end }}", 1)[0]
        .replace("{{ .name }}", "x").replace('{{- include "phalanx.policyVariables" .rules | nindent 2 }}', "[]"))["spec"]["validations"]


def test_values_schema_is_generated():
    from phalanx.api.chartschema import values_schema_json

    assert (CHART / "values.schema.json").read_text() == values_schema_json()
