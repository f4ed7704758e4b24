"""A problem reads as its field and the rule."""

from __future__ import annotations

import dataclasses

import pytest

from phalanx.problems import Problem


@pytest.mark.parametrize(("problem", "text"), [
    (Problem("spec.nodes", "must be at least 1"), "spec.nodes: must be at least 1"),
    (Problem("metadata.name", "is required", "operator"), "metadata.name: is required"),
])
def test_a_problem_reads_as_field_and_message(problem, text):
    assert str(problem) == text


def test_the_api_server_refuses_it_too_unless_said_otherwise():
    assert Problem("spec.nodes", "x").source == "api"
    assert Problem("spec.nodes", "x", "operator").source == "operator"


def test_problems_are_values():
    assert Problem("a", "b") == Problem("a", "b") and len({Problem("a", "b"), Problem("a", "b")}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        Problem("a", "b").field = "c"
