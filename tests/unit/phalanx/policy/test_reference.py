"""policy.reference: docs/policy.md, generated from the models the operator reads — a row per
policy rule and limit with its default, and the fixed limits."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from phalanx.api.config import Limits
from phalanx.api.policy import PolicyRules
from phalanx.policy.reference import FIXED, _table, policy_reference


def test_the_policy_reference_is_current():
    """docs/policy.md lists every policy value and limit with its default (make crds writes it)."""
    from pathlib import Path

    from phalanx.policy.reference import policy_reference

    text = policy_reference()
    assert (Path(__file__).resolve().parents[4] / "docs" / "policy.md").read_text() == text, "run `make crds`"
    for key in ("allowedVolumeTypes", "allowedProjectedSources", "allowedSchedulerNames", "maxNodes", "maxSpecBytes", "maxSweepCheckBytes"):
        assert f".{key}`" in text


@pytest.mark.parametrize("model,where", [(PolicyRules, "policy.default"), (Limits, "limits")])
def test_every_field_has_a_row_with_its_default(model, where):
    text = policy_reference()
    for name, field in model.model_fields.items():
        default = field.default_factory() if field.default_factory is not None else field.default
        shown = "`null`" if default is None else f"`{json.dumps(default)}`"
        assert f"| `{where}.{field.alias or name}` | {shown} |" in text, name


def test_the_fixed_limits_are_listed():
    text = policy_reference()
    for what, value, _ in FIXED:
        assert f"| {what} | {value} |" in text


class Example(BaseModel):
    plain: int = Field(3, description="a | b")
    listed: list[str] = Field(default_factory=lambda: ["x"], alias="listedValues")
    unset: str | None = None


def test_rows_quote_defaults_and_escape_pipes():
    assert _table(Example, "values") == [
        "| value | default | what it allows |", "|---|---|---|",
        "| `values.plain` | `3` | a \\| b |",  # a pipe would end the cell
        '| `values.listedValues` | `["x"]` |  |',
        "| `values.unset` | `null` |  |",
    ]
