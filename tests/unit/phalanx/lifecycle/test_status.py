"""lifecycle.status: timestamps, the StatusView that records transitions (conditions, phase
Events, the final phase), ready counts, the success message of spec.successPolicy's roles, and the
phase the current gang's pods put the job in (Pending → Scheduling → Running), and the reason
every status write carries (the condition that decides the phase)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from phalanx.api.crd import PRINTER_COLUMNS, build_crd
from phalanx.api.types import Phase, TrainingJobSpec, TrainingJobStatus
from phalanx.constants import LABEL_NODE_RANK, LABEL_ROLE, LABEL_ROLE_INDEX, ConditionType
from phalanx.lifecycle.conditions import get_condition
from phalanx.lifecycle.status import (
    DECIDING,
    StatusView,
    count_ready,
    current_reason,
    iso,
    parse_iso,
    phase_from_pods,
    succeeded_roles,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
STAMP = "2026-01-01T12:00:00Z"


@pytest.mark.parametrize("text,moment", [
    ("2026-01-01T12:00:00Z", NOW),
    ("2026-01-01T13:00:00+01:00", NOW),  # the same instant in another zone
    ("2026-01-01T12:00:00", NOW),  # no zone: UTC
    ("2026-01-01T12:00:00.250000Z", NOW + timedelta(milliseconds=250)),
    (None, None),
    ("", None),
])
def test_parse_iso(text, moment):
    parsed = parse_iso(text)
    assert parsed == moment
    assert parsed is None or parsed.tzinfo is not None


def test_parse_iso_refuses_what_is_not_a_timestamp():
    with pytest.raises(ValueError):
        parse_iso("yesterday")


@pytest.mark.parametrize("moment", [NOW, NOW.astimezone(timezone(timedelta(hours=-5))), NOW + timedelta(microseconds=999)])
def test_iso_writes_utc_seconds(moment):
    assert iso(moment) == STAMP


def test_a_phase_change_is_an_event_and_a_repeat_is_not():
    view = StatusView({"phase": "Pending"}, 1, NOW)
    view.phase(Phase.PENDING, "Pending", "0/2 pods created")
    view.phase(Phase.RUNNING, "Running", "all 2 nodes running")
    view.phase(Phase.RUNNING, "Running", "")
    view.phase(Phase.RESTARTING, "Exited", "", warning=True)
    assert view.events == [("Normal", "Running", "all 2 nodes running"), ("Warning", "Exited", "phase Restarting")]
    assert view.status.phase == Phase.RESTARTING and view.status.message is None


@pytest.mark.parametrize("phase,succeeded,failed,event", [
    (Phase.SUCCEEDED, "True", "False", "Normal"),
    (Phase.FAILED, "False", "True", "Warning"),
])
def test_finish_sets_every_final_condition(phase, succeeded, failed, event):
    view = StatusView({"phase": "Running", "conditions": [{"type": "Running", "status": "True", "reason": "Running"}]}, 2, NOW)
    view.finish(phase, "Why", "what happened")
    conditions = view.status.conditions
    assert {c.type: c.status for c in conditions} == {"Running": "False", "Succeeded": succeeded, "Failed": failed, "Restarting": "False"}
    assert all(c.observed_generation == 2 and c.last_transition_time == STAMP for c in conditions)
    assert get_condition(conditions, ConditionType.FAILED).message == "what happened"
    assert view.events == [(event, "Why", "what happened")]
    assert view.status.completion_time == STAMP


def test_finish_keeps_the_first_completion_time():
    view = StatusView({"phase": "Failed", "completionTime": "2025-12-31T00:00:00Z"}, 1, NOW)
    view.finish(Phase.FAILED, "Why", "again")
    assert view.status.completion_time == "2025-12-31T00:00:00Z" and view.events == []


def test_dump_is_none_when_nothing_changed():
    raw = {"phase": "Running", "reason": "Running", "observedGeneration": 3, "restarts": 1}
    assert StatusView(raw, 3, NOW).dump() is None
    assert StatusView(raw, 4, NOW).dump()["observedGeneration"] == 4  # a new generation is a change
    view = StatusView(raw, 3, NOW)
    view.cond(ConditionType.RUNNING, True, "Running")
    assert view.dump()["conditions"][0]["status"] == "True"


def spec(**over) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"image": "x", "command": ["train"], "nodes": 2} | over)


def worker_pod(rank, phase="Running", ready=True, node="n"):
    return {"metadata": {"name": f"job-node-{rank}-0", "labels": {LABEL_NODE_RANK: str(rank)}},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def role_pod(role, index, phase="Running", ready=True):
    pod = worker_pod(0, phase, ready)
    pod["metadata"] = {"name": f"job-{role}-{index}-0", "labels": {LABEL_ROLE: role, LABEL_ROLE_INDEX: str(index)}}
    return pod


def test_count_ready_per_role():
    view = StatusView({"totalNodes": 2}, 1, NOW)
    view.role_totals = {"worker": 2, "ps": 2}
    count_ready(view, [worker_pod(0), worker_pod(1, ready=False), role_pod("ps", 0), role_pod("ps", 1, phase="Pending")])
    assert (view.status.ready_nodes, view.status.nodes) == (1, "1/2")
    assert view.status.roles_ready == "worker:1/2 ps:1/2"
    assert [(r.name, r.replicas, r.ready) for r in view.status.roles] == [("worker", 2, 1), ("ps", 2, 1)]


def test_count_ready_clears_the_roles_of_a_job_without_them():
    view = StatusView({"totalNodes": 2, "roles": [{"name": "ps", "replicas": 1, "ready": 1}], "rolesReady": "ps:1/1"}, 1, NOW)
    count_ready(view, [worker_pod(0), worker_pod(1)])
    assert view.status.nodes == "2/2" and view.status.roles is None and view.status.roles_ready is None


ROLES = [{"name": "ps", "replicas": 1}]


@pytest.mark.parametrize("over,pods,message", [
    ({}, [worker_pod(0, "Succeeded"), worker_pod(1, "Succeeded")], "all 2 nodes completed"),
    ({}, [worker_pod(0, "Succeeded"), worker_pod(1)], None),
    ({}, [], None),  # no pods: nothing has completed
    ({"roles": ROLES}, [worker_pod(0, "Succeeded"), worker_pod(1, "Succeeded"), role_pod("ps", 0, "Succeeded")], "all 3 pods completed"),
    ({"roles": ROLES}, [worker_pod(0, "Succeeded"), worker_pod(1, "Succeeded"), role_pod("ps", 0)], None),
    ({"roles": ROLES, "successPolicy": {"roles": ["worker"]}}, [worker_pod(0, "Succeeded"), worker_pod(1, "Succeeded"), role_pod("ps", 0)],
     "every pod of worker completed"),
])
def test_succeeded_roles(over, pods, message):
    assert succeeded_roles(spec(**over), pods) == message


def test_phase_follows_the_pods_from_pending_to_running():
    view = StatusView({"totalNodes": 2}, 1, NOW)
    phase_from_pods(view, [worker_pod(0, "Pending", node=None)], 2)
    assert (view.status.phase, view.status.message) == (Phase.PENDING, "1/2 pods created")
    view.status.attempt_created = True
    phase_from_pods(view, [worker_pod(0, "Pending"), worker_pod(1, "Pending", node=None)], 2)
    assert (view.status.phase, view.status.message) == (Phase.SCHEDULING, "1/2 pods bound to nodes")
    assert view.status.start_time is None
    phase_from_pods(view, [worker_pod(0), worker_pod(1)], 2)
    assert (view.status.phase, view.status.message) == (Phase.RUNNING, "all 2 nodes running")
    assert view.status.start_time == view.status.last_progress_time == STAMP
    running = get_condition(view.status.conditions, ConditionType.RUNNING)
    assert (running.status, running.message) == ("True", "2/2 nodes running")
    assert [e[1] for e in view.events] == ["Scheduling", "Running"]


def test_a_gang_with_a_finished_pod_is_still_running():
    view = StatusView({"phase": "Running", "startTime": "2025-12-31T00:00:00Z"}, 1, NOW)
    phase_from_pods(view, [worker_pod(0, "Succeeded"), worker_pod(1)], 2)
    assert view.status.phase == Phase.RUNNING and view.status.start_time == "2025-12-31T00:00:00Z"
    phase_from_pods(view, [worker_pod(0, "Succeeded"), worker_pod(1, "Succeeded")], 2)  # none running: not Running
    assert view.status.phase != Phase.RUNNING


@pytest.mark.parametrize("pods", [[], [worker_pod(0, "Pending", node=None)]])
def test_restarting_stays_restarting_until_the_new_gang_runs(pods):
    view = StatusView({"phase": "Restarting", "message": "backing off"}, 1, NOW)
    phase_from_pods(view, pods, 2)
    assert view.status.phase == Phase.RESTARTING and view.events == []


def c(type_, status, reason):
    return {"type": type_, "status": status, "reason": reason}


VALID = c("Valid", "True", "Validated")  # true for a job's whole life: never its reason


@pytest.mark.parametrize("phase,conditions,reason", [
    ("Pending", [], "Pending"),
    ("Pending", [VALID], "Pending"),  # e.g. waiting for an earlier job's pods
    ("Pending", [VALID, c("Created", "False", "CreatingPods"), c("Schedulable", "Unknown", "GangIncomplete")], "CreatingPods"),
    ("Pending", [VALID, c("Created", "False", "WaitingForOldPods"), c("Schedulable", "True", "Placed")], "WaitingForOldPods"),
    ("Pending", [VALID, c("Created", "False", "CreateRefused")], "CreateRefused"),
    ("Pending", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "False", "Insufficient")], "Insufficient"),
    ("Pending", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "False", "Inadmissible")], "Inadmissible"),
    ("Pending", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "Unknown", "WaitingForKueue")], "WaitingForKueue"),
    ("Pending", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "True", "Admitted"),
                 c("Suspended", "True", "Evicted")], "Evicted"),
    ("Pending", [VALID, c("Reconciled", "False", "ReconcileError"), c("Created", "False", "CreatingPods")], "ReconcileError"),
    ("Pending", [VALID, c("Reconciled", "True", "Reconciled"), c("Created", "False", "CreatingPods")], "CreatingPods"),
    ("Scheduling", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "True", "Placed")], "Placed"),
    ("Scheduling", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "True", "GatesLifted")], "GatesLifted"),
    ("Running", [VALID, c("Created", "True", "PodsCreated"), c("Schedulable", "True", "Placed"),
                 c("Restarting", "False", "Running"), c("Running", "True", "AllNodesRunning")], "AllNodesRunning"),
    ("Running", [VALID, c("Running", "True", "AllNodesRunning"), c("Restarting", "True", "RestartedInPlace")], "RestartedInPlace"),
    ("Running", [VALID, c("Running", "True", "AllNodesRunning"), c("Restarting", "True", "NodeReplaced")], "NodeReplaced"),
    ("Running", [VALID, c("Running", "True", "AllNodesRunning"), c("LossNotFinite", "True", "LossNotFinite")], "AllNodesRunning"),
    ("Restarting", [VALID, c("Running", "False", "Restarting"), c("Restarting", "True", "NodeLost")], "NodeLost"),
    ("Restarting", [VALID, c("Running", "False", "Restarting"), c("Restarting", "True", "exited")], "exited"),
    ("Suspended", [VALID, c("Running", "False", "Suspended"), c("Suspended", "True", "Suspended")], "Suspended"),
    ("Succeeded", [VALID, c("Running", "False", "Succeeded"), c("Succeeded", "True", "Succeeded"), c("Failed", "False", "Succeeded")],
     "Succeeded"),
    ("Failed", [VALID, c("Succeeded", "False", "PermanentFailure"), c("Failed", "True", "PermanentFailure")], "PermanentFailure"),
    ("Failed", [c("Valid", "False", "InvalidSpec"), c("Failed", "True", "InvalidSpec")], "InvalidSpec"),
    ("Failed", [VALID, c("Reconciled", "False", "ReconcileError"), c("Failed", "True", "ReconcileError")], "ReconcileError"),
    ("Failed", [VALID, c("Created", "False", "CreateRejected"), c("Failed", "True", "CreateRejected")], "CreateRejected"),
])
def test_current_reason_is_the_condition_that_decides_the_phase(phase, conditions, reason):
    status = TrainingJobStatus.model_validate({"phase": phase, "conditions": conditions})
    assert current_reason(status) == reason


def test_every_phase_has_its_deciding_conditions():
    assert set(DECIDING) == set(Phase)


def test_every_status_write_carries_the_reason():
    view = StatusView({"phase": "Pending"}, 1, NOW)
    view.cond(ConditionType.CREATED, True, "PodsCreated")
    view.cond(ConditionType.SCHEDULABLE, False, "Insufficient", "needs 2 nodes; 1 fits")
    assert view.dump()["reason"] == "Insufficient"
    view.finish(Phase.FAILED, "GangTimeout", "gang not placed within 60s")
    assert view.body()["reason"] == "GangTimeout"


def test_the_reason_column_shows_status_reason():
    (column,) = [col for col in PRINTER_COLUMNS if col["name"] == "Reason"]
    assert column["jsonPath"] == ".status.reason"
    status = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["reason"]["type"] == "string"
