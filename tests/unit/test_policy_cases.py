"""The policy cases (tests/policy_cases.py) against the operator: every hostile job or sweep is
refused with the field and the rule, every harmless one passes. The same table runs against the
API server in tests/integration/test_policy_admission.py; here, each case names the one admission
rule (or CRD rule) whose words the API server must answer with, and every rule has a case."""

from __future__ import annotations

import re

import pytest

from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.api.kubetypes import EnvVar
from phalanx.api.policy import ClusterPolicy
from phalanx.policy.admission import VALIDATIONS
from phalanx.sweep.check import check_sweep
from phalanx.validate import validate_job
from tests.policy_cases import ENTRIES, HARMLESS, HOSTILE, Case, manifest

PROFILES = {"default": NetworkProfile(), "ib": NetworkProfile(fabric="infiniband")}


def problems(case: Case):
    obj = manifest(case)
    obj["metadata"]["namespace"] = "team"
    config = OperatorConfig(policy=ClusterPolicy(default=ENTRIES[case.entry]), network_profiles=PROFILES)
    if case.sweep is None:
        return validate_job(obj, config)[1]
    return check_sweep(obj, config).problems


@pytest.mark.parametrize("case", HOSTILE, ids=[c.name for c in HOSTILE])
def test_hostile_refused_with_the_field_and_the_rule(case):
    found = problems(case)
    hits = [p for p in found if p.field == case.field]
    assert hits, [str(p) for p in found]
    if case.source == "policy":
        assert any("(cluster policy)" in p.message for p in hits), [str(p) for p in hits]
    elif case.source == "crd":
        assert any(p.source == "api" for p in hits), [str(p) for p in hits]


@pytest.mark.parametrize("case", HARMLESS, ids=[c.name for c in HARMLESS])
def test_harmless_accepted(case):
    assert [str(p) for p in problems(case)] == []


def _first_literal(message_expression: str) -> str:
    return re.search(r"'((?:[^'\\]|\\.)*)'", message_expression).group(1)


def _matches(words: str, literal: str) -> bool:
    for prefix in ("spec.template.spec.", "spec.", ""):
        if words.startswith(prefix):
            w = words[len(prefix):]
            if w.startswith(literal) or literal.startswith(w) or (prefix == "" and w in literal):
                return True
    return False


def _rules_of(case: Case) -> list[str]:
    if case.source == "crd":
        return [r.message for r in EnvVar.checks if case.words in r.message]
    return [lit for v in VALIDATIONS if _matches(case.words, lit := _first_literal(v["messageExpression"]))]


@pytest.mark.parametrize("case", HOSTILE, ids=[c.name for c in HOSTILE])
def test_each_case_names_one_rule(case):
    assert len(_rules_of(case)) == 1, _rules_of(case)


def test_every_admission_rule_and_reserved_env_rule_has_a_hostile_case():
    named = {r for case in HOSTILE for r in _rules_of(case)}
    assert [lit for v in VALIDATIONS if (lit := _first_literal(v["messageExpression"])) not in named] == []
    reserved = [r.message for r in EnvVar.checks if r.field == ".name"]
    assert [m for m in reserved if m not in named] == []
