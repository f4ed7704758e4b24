"""lifecycle.conditions: Kubernetes-style conditions; lastTransitionTime moves only when the
status flips, every other field follows the latest write."""

from __future__ import annotations

import pytest

from phalanx.api.types import Condition
from phalanx.lifecycle.conditions import get_condition, is_true, reason_of, set_condition

EARLIER, NOW = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def running(status: str, transition: str | None = EARLIER) -> list[Condition]:
    return [Condition(type="Ready", status="True", reason="Up", last_transition_time=EARLIER),
            Condition(type="Running", status=status, reason="Before", message="old", last_transition_time=transition,
                      observed_generation=1)]


# (before, status written, lastTransitionTime after)
TRANSITIONS = [
    (running("False"), True, NOW),  # flips: the clock moves
    (running("True"), True, EARLIER),  # same status: the clock stays
    (running("True"), False, NOW),
    (running("Unknown"), "Unknown", EARLIER),  # a string status is written as given
    (running("Unknown"), False, NOW),
    (running("True", transition=None), True, NOW),  # never stamped: stamped now
    ([], True, NOW),  # new condition
]


@pytest.mark.parametrize("before,status,transition", TRANSITIONS)
def test_last_transition_time_moves_only_when_the_status_flips(before, status, transition):
    after = set_condition(before, "Running", status, "Now", "new", NOW, 2)
    cond = get_condition(after, "Running")
    expected = status if isinstance(status, str) else str(status)
    assert (cond.status, cond.reason, cond.message, cond.observed_generation) == (expected, "Now", "new", 2)
    assert cond.last_transition_time == transition


def test_set_condition_returns_a_new_list_and_keeps_the_others_in_place():
    before = running("False")
    after = set_condition(before, "Running", True, "Now", "", NOW, 2)
    assert [c.type for c in after] == ["Ready", "Running"]
    assert after[0] is before[0]  # untouched conditions are carried as they are
    assert before[1].status == "False" and before[1].reason == "Before"  # the input is not changed
    appended = set_condition(before, "Failed", False, "No", "", NOW, 2)
    assert [c.type for c in appended] == ["Ready", "Running", "Failed"]


@pytest.mark.parametrize("type_,true,reason", [
    ("Ready", True, "Up"),
    ("Running", False, "Before"),  # set, but not True
    ("Missing", False, None),
])
def test_readers(type_, true, reason):
    conditions = running("Unknown")
    assert is_true(conditions, type_) is true
    assert reason_of(conditions, type_) == reason
    assert (get_condition(conditions, type_) is None) is (reason is None)
