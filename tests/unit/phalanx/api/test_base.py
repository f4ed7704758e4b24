"""The base of the API models: quantities, list uniqueness, key formats, the wire conventions
and the collection of every cross-field rule."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import TypeAdapter, ValidationError

from phalanx.api import patterns
from phalanx.api.base import Model, Quantity, all_rules, keys_match, unique_by
from phalanx.api.kubetypes import EnvVar, Toleration
from phalanx.api.resources import Resources
from phalanx.api.roles import Role
from phalanx.api.types import TrainingJobSpec

QUANTITY = TypeAdapter(Quantity)


@pytest.mark.parametrize("value", [0, 8, "8", "500m", "64Gi", "1e3", "1" * 64])
def test_quantities_accepted_as_given(value):
    assert QUANTITY.validate_python(value) == value


@pytest.mark.parametrize("value", [-1, True, False, 1.5, "64GB", "-1", "", "1" * 65, None, [8]])
def test_quantities_refused(value):
    with pytest.raises(ValidationError, match="must be a non-negative quantity"):
        QUANTITY.validate_python(value)


@dataclass
class Item:
    name: str


@pytest.mark.parametrize(("names", "error"), [
    ([], None),
    (["a", "b", "c"], None),
    (["a", "b", "a", "b"], "duplicate env name 'a'"),  # the first repeated one
    (["b", "a", "a"], "duplicate env name 'a'"),
])
def test_unique_by(names, error):
    items = [Item(n) for n in names]
    if error is None:
        assert unique_by(items, "name", "env name") is items
    else:
        with pytest.raises(ValueError, match=error):
            unique_by(items, "name", "env name")


@pytest.mark.parametrize(("keys", "max_length", "ok"), [
    ([], 10, True),
    (["a", "b-c"], 10, True),
    (["a", "B"], 10, False),
    (["abcde"], 5, True),
    (["abcdef"], 5, False),  # matches the pattern, too long
])
def test_keys_match(keys, max_length, ok):
    assert keys_match(dict.fromkeys(keys, 1), patterns.DNS_LABEL, max_length) is ok


class Example(Model):
    max_nodes: int = 1


def test_models_speak_camel_case_and_refuse_unknown_fields():
    assert Example.model_validate({"maxNodes": 3}).max_nodes == 3
    assert Example(max_nodes=4).model_dump(by_alias=True) == {"maxNodes": 4}
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Example.model_validate({"maxNodes": 3, "minNodes": 1})


def test_models_refuse_infinity_and_nan():
    with pytest.raises(ValidationError):
        TrainingJobSpec.model_validate({"image": "img:1", "model": {"preset": "debug"}, "training": {"lr": float("inf")}})


def test_all_rules_collects_every_models_checks():
    rules = all_rules()
    assert all(rule in rules for model in (Resources, Role, TrainingJobSpec) for rule in model.checks)
    assert all(rule in rules for model in (EnvVar, Toleration) for rule in model.checks)  # nested models' too
