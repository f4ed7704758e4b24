"""The types one reconcile pass shares with every layer: their defaults and the Schedulable
verdict."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from phalanx import decision
from phalanx.decision import GangDecision, Observed, Plan, Schedulable


@pytest.mark.parametrize(("status", "is_true"), [
    (True, True),
    ("True", True),
    (False, False),
    ("False", False),
    ("Unknown", False),
    ("true", False),  # a condition's status is spelled True
])
def test_schedulable_is_true(status, is_true):
    assert Schedulable(status, "R", "m").is_true is is_true


def test_a_gang_decision_is_placed_unless_said_otherwise():
    held = GangDecision(release=False)
    assert (held.pins, held.schedulable, held.reason, held.placement) == ({}, True, "Placed", None)


def test_an_empty_plan_does_nothing():
    plan = Plan()
    assert not (plan.create or plan.update or plan.delete_pods or plan.release or plan.pins or plan.events
                or plan.force_delete_pods or plan.delete_job or plan.dry_run)
    assert plan.status is None and plan.requeue_after is None
    other = Plan()
    plan.create.append({"kind": "Pod"})
    assert other.create == []  # no list shared between plans


def test_observed_assumes_the_children_exist():
    observed = Observed(pods=[])
    assert observed.service_exists and observed.config_map_exists and observed.network_policy_exists
    assert observed.lost_nodes == frozenset() and observed.quotas == ()
    assert observed.backend_schedulable is None and observed.backend_evicted is None


def test_decision_imports_nothing_of_phalanx():
    """Any layer may use it without pulling another one in."""
    tree = ast.parse(Path(decision.__file__).read_text())
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names]
    assert imported and not [name for name in imported if name and name.split(".")[0] == "phalanx"]
