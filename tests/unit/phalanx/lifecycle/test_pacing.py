import pytest

from phalanx.lifecycle.pacing import (
    FIRST_STEP_POLL_SECONDS,
    FIRST_STEP_WATCH_SECONDS,
    PROGRESS_POLL_SECONDS,
    WAKE_COALESCE_MAX_SECONDS,
    WAKE_COALESCE_MIN_SECONDS,
    first_step_seen,
    progress_poll_seconds,
    wake_coalesce_seconds,
)


@pytest.mark.parametrize("pods", [0, 1, 8, 51])
def test_small_gangs_coalesce_briefly(pods):
    assert wake_coalesce_seconds(pods) == WAKE_COALESCE_MIN_SECONDS


@pytest.mark.parametrize("pods, seconds", [(64, 0.25), (128, 0.5), (256, 1.0), (384, 1.5)])
def test_the_wait_grows_with_the_gang(pods, seconds):
    assert wake_coalesce_seconds(pods) == pytest.approx(seconds)


@pytest.mark.parametrize("pods", [512, 4096, 16384])
def test_big_gangs_wait_at_most_the_cap(pods):
    assert wake_coalesce_seconds(pods) == WAKE_COALESCE_MAX_SECONDS


def test_monotonic():
    waits = [wake_coalesce_seconds(n) for n in range(0, 2048, 7)]
    assert waits == sorted(waits)


# --- holding back status writes that only move ready counts

from phalanx.api.types import TrainingJobStatus  # noqa: E402
from phalanx.decision import Plan  # noqa: E402
from phalanx.lifecycle.pacing import (  # noqa: E402
    COUNT_FIELDS,
    COUNT_WRITE_INTERVAL_SECONDS,
    hold_ready_counts,
)

BEFORE = {"phase": "Scheduling", "readyNodes": 2, "nodes": "2/8", "totalNodes": 8, "conditions": []}
COUNTS = {**BEFORE, "readyNodes": 3, "nodes": "3/8"}


def test_the_count_fields_are_the_status_models_wire_names():
    names = {f.alias for f in TrainingJobStatus.model_fields.values()}
    assert COUNT_FIELDS <= names


def test_a_count_only_change_waits_out_the_interval_after_the_last_write():
    assert hold_ready_counts(BEFORE, Plan(status=COUNTS), 0.3) == pytest.approx(COUNT_WRITE_INTERVAL_SECONDS - 0.3)
    assert hold_ready_counts(BEFORE, Plan(status={**BEFORE, "rolesReady": "worker:3/8 ps:1/1"}), 0.0) > 0
    assert hold_ready_counts(BEFORE, Plan(status={**BEFORE, "message": "3/8 pods bound to nodes"}), 0.0) > 0


@pytest.mark.parametrize("since", [COUNT_WRITE_INTERVAL_SECONDS, 5.0, float("inf")])
def test_a_count_only_change_is_written_once_the_interval_is_over(since):
    assert hold_ready_counts(BEFORE, Plan(status=COUNTS), since) == 0.0


@pytest.mark.parametrize("status", [
    {**COUNTS, "phase": "Running"},                                          # a phase change
    {**COUNTS, "conditions": [{"type": "Running", "status": "True"}]},      # a condition
    {**BEFORE, "step": 10},                                                  # progress
    dict(BEFORE),                                                            # no change at all
])
def test_anything_but_ready_counts_is_written_at_once(status):
    assert hold_ready_counts(BEFORE, Plan(status=status), 0.1) == 0.0


@pytest.mark.parametrize("acts", [
    {"create": [{"kind": "Pod"}]}, {"update": [{}]}, {"delete_pods": ["p"]}, {"force_delete_pods": ["p"]},
    {"release": ["p"]}, {"events": [("Normal", "R", "m")]}, {"delete_job": True},
])
def test_a_plan_that_acts_writes_its_status_with_it(acts):
    assert hold_ready_counts(BEFORE, Plan(status=COUNTS, **acts), 0.1) == 0.0


def test_no_status_no_hold():
    assert hold_ready_counts(BEFORE, Plan(), 0.1) == 0.0


# --- reading rank 0's progress


BUILDING = {"phase": "Running", "step": 0, "startup": {"launcher": 0.9, "metrics": 20.1}}
RESUMED_BUILDING = {"phase": "Running", "step": 20, "startup": {"launcher": 0.9, "metrics": 20.1}}
FIRST_STEP = {"phase": "Running", "step": 1, "startup": {"launcher": 0.9, "metrics": 20.1, "firstStep": 24.0}}


@pytest.mark.parametrize(("progress", "seen"), [
    (None, False),
    ({}, False),
    (BUILDING, False),
    (RESUMED_BUILDING, False),  # resumed at step 20: its first step here is not done yet
    (FIRST_STEP, True),
    ({"step": 0}, False),  # a command job's report: any step past 0
    ({"step": 3}, True),
])
def test_the_first_step_shows_in_the_timeline_or_else_in_the_step(progress, seen):
    assert first_step_seen(progress) is seen


@pytest.mark.parametrize(("progress", "running_for", "seconds"), [
    (None, 0.0, FIRST_STEP_POLL_SECONDS),  # rank 0 not serving yet
    (BUILDING, 30.0, FIRST_STEP_POLL_SECONDS),
    (BUILDING, FIRST_STEP_WATCH_SECONDS - 0.1, FIRST_STEP_POLL_SECONDS),
    (BUILDING, FIRST_STEP_WATCH_SECONDS, PROGRESS_POLL_SECONDS),  # bounded: a long start costs no more
    (None, 3600.0, PROGRESS_POLL_SECONDS),
    (FIRST_STEP, 5.0, PROGRESS_POLL_SECONDS),  # seen: the running job's pace
])
def test_progress_is_read_every_second_only_while_the_first_step_is_awaited(progress, running_for, seconds):
    assert progress_poll_seconds(progress, running_for) == seconds
    assert FIRST_STEP_POLL_SECONDS < PROGRESS_POLL_SECONDS
