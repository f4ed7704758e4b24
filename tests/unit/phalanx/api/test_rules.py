"""Cross-field rules: their CRD form, and which of them an object breaks (its own and its
children's), each by its field path."""

from __future__ import annotations

import pytest

from phalanx.api.rules import Rule, add_cel, broken, broken_rules, default_unless
from phalanx.api.types import TrainingJobSpec


@pytest.mark.parametrize(("rule", "crd"), [
    (Rule("self.a > 0", "a must be positive", bool, ".a"), {"rule": "self.a > 0", "message": "a must be positive", "fieldPath": ".a"}),
    (Rule("self.a > 0", "a must be positive", bool), {"rule": "self.a > 0", "message": "a must be positive"}),
])
def test_rule_in_the_crd(rule, crd):
    assert rule.crd() == crd


class Checked:
    checks = (
        Rule("cel-one", "one", lambda o: o > 0, ".one"),
        Rule(None, "operator only", lambda o: o < 10),
        Rule("cel-two", "two", lambda o: 1 / o > 0, ".two"),
    )


def test_add_cel_lists_only_rules_with_cel():
    schema: dict = {}
    add_cel(schema, Checked)
    assert schema["x-kubernetes-validations"] == [
        {"rule": "cel-one", "message": "one", "fieldPath": ".one"}, {"rule": "cel-two", "message": "two", "fieldPath": ".two"}]
    untouched: dict = {}
    add_cel(untouched, object)
    assert untouched == {}


@pytest.mark.parametrize(("value", "found"), [
    (5, []),
    (20, [("x", "operator only", False)]),
    (-1, [("x.one", "one", True), ("x.two", "two", True)]),
    (0, [("x.one", "one", True), ("x.two", "two", True)]),  # a predicate that raises counts as broken
    (None, [("x.one", "one", True), ("x", "operator only", False), ("x.two", "two", True)]),
])
def test_broken(value, found):
    assert list(broken(Checked.checks, value, "x")) == found


def test_broken_rules_walks_nested_models_and_lists():
    """Parsing does not run the rules (validate does): a parsed spec may break them anywhere."""
    spec = TrainingJobSpec.model_validate({
        "image": "img:1", "command": ["x"], "resources": {"extra": {"nvidia.com/gpu": 1}},
        "roles": [{"name": "ps"}, {"name": "worker"}]})
    found = [(field, enforced) for field, _, enforced in broken_rules(spec, "spec")]
    assert found == [("spec.resources.extra", True), ("spec.roles[1].name", True)]


def test_a_valid_spec_breaks_no_rule():
    spec = TrainingJobSpec.model_validate({"image": "img:1", "command": ["x"], "roles": [{"name": "ps"}]})
    assert list(broken_rules(spec, "spec")) == []


class Obj:
    def __init__(self, mode: bool, size: int):
        self.mode, self.size = mode, size


@pytest.mark.parametrize(("mode", "size", "holds"), [
    (True, 1, True),
    (True, 7, True),  # the mode honours the field
    (False, 1, True),  # left at its default
    (False, 7, False),
])
def test_default_unless(mode, size, holds):
    rule = default_unless("self.mode", lambda o: o.mode, "size", "size", 1, "size needs mode")
    assert rule.cel == "self.mode || !has(self.size) || self.size == 1"
    assert rule.field == ".size"
    assert rule.holds(Obj(mode, size)) is holds
