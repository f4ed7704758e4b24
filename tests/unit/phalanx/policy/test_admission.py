"""The chart's ValidatingAdmissionPolicy is generated from policy/admission.py, and the chart
writes each policy entry's variables exactly as the operator reads the same values: a value the
entry leaves out takes the operator's default (the defaults the generated template carries)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from localcluster.binaries import default_bin_dir
from phalanx.api.policy import SAFE_BACKENDS, ClusterPolicy, PolicyRules
from phalanx.policy.admission import (
    DERIVED,
    VALIDATIONS,
    admission_policy,
    admission_policy_template,
    policy_values,
    policy_variables,
)

ROOT = Path(__file__).resolve().parents[4]
CHART = ROOT / "charts" / "phalanx"
TEMPLATE = CHART / "templates" / "admission-policy.yaml"


def test_chart_template_is_generated():
    assert TEMPLATE.read_text() == admission_policy_template()


def test_the_template_carries_the_operators_defaults_and_the_values_file_shows_them():
    defaults = re.search(r'define "phalanx.policyDefaults" }}(.*?){{ end }}', TEMPLATE.read_text()).group(1)
    assert json.loads(defaults) == policy_values(PolicyRules())
    values = yaml.safe_load((CHART / "values.yaml").read_text())["policy"]
    assert PolicyRules.model_validate(values["default"]) == PolicyRules()
    assert ClusterPolicy.model_validate(values) == ClusterPolicy()


def test_every_policy_variable_is_used():
    used = " ".join([e for _, e in DERIVED] + [v["expression"] + v["messageExpression"] for v in VALIDATIONS])
    for variable in policy_variables(PolicyRules()) + [{"name": n} for n, _ in DERIVED]:
        assert f"variables.{variable['name']}" in used, variable


def test_policy_matches_trainingjobs_and_trainingsweeps_and_only_spec_writes():
    spec = admission_policy()["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["trainingjobs", "trainingsweeps"]
    assert "object.spec != oldObject.spec" in spec["matchConditions"][0]["expression"]


def _helm_policies(*args: str) -> dict[str, dict]:
    helm = default_bin_dir() / "helm"
    if not helm.exists():
        pytest.skip("helm not built (hack/cluster/build.sh)")
    out = subprocess.run([str(helm), "template", "rel", str(CHART), "-n", "ns", *args], check=True, capture_output=True, text=True).stdout
    return {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(out) if d and d["kind"] == "ValidatingAdmissionPolicy"}


@pytest.mark.built_last
@pytest.mark.usefixtures("cluster_build")
def test_chart_policies_match_the_operator_policy():
    loose = PolicyRules(allow_secrets=True, max_nodes=None, allowed_network_profiles=["default", "ib"],
                        allowed_backends=[*SAFE_BACKENDS, "volcano"], allowed_scheduler_names=["volcano"])
    policies = _helm_policies(
        "--set", "policy.namespaces[0].matchLabels.team=ml",
        "--set-json", "policy.namespaces[0].rules=" + json.dumps(loose.model_dump(by_alias=True, mode="json", exclude_defaults=True)),
        "--set", "policy.namespaces[1].matchLabels.team=web", "--set", "policy.namespaces[1].rules.maxNodes=8")
    assert policies["rel-operator-policy-default"] == {**admission_policy(rules=PolicyRules())["spec"]}
    assert policies["rel-operator-policy-0"] == admission_policy(rules=loose)["spec"]
    assert policies["rel-operator-policy-1"] == admission_policy(rules=PolicyRules(max_nodes=8))["spec"]
