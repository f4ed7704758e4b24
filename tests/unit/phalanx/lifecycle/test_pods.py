"""lifecycle.pods: what the reconcile reads off a job's pods — attempt, gate, readiness,
liveness, ownership."""

from __future__ import annotations

import pytest

from phalanx.constants import GANG_SCHEDULING_GATE, LABEL_RESTART_ATTEMPT
from phalanx.lifecycle.pods import (
    alive_names,
    attempt_of,
    is_alive,
    is_gated,
    is_predecessor,
    is_ready,
    names,
    pod_phase,
    undeleted_names,
)


def pod(name="p", labels=None, owners=None, deleting=False, gates=None, phase=None, ready=None):
    meta = {"name": name, "labels": labels or {}}
    if owners is not None:
        meta["ownerReferences"] = owners
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj = {"metadata": meta, "spec": {} if gates is None else {"schedulingGates": gates}}
    if phase is not None:
        obj["status"] = {"phase": phase}
        if ready is not None:
            obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"},
                                           {"type": "Ready", "status": ready}]
    return obj


@pytest.mark.parametrize("labels,attempt", [
    ({LABEL_RESTART_ATTEMPT: "3"}, 3),
    ({LABEL_RESTART_ATTEMPT: "0"}, 0),
    ({}, -1),  # unlabelled
])
def test_attempt_of(labels, attempt):
    assert attempt_of(pod(labels=labels)) == attempt


@pytest.mark.parametrize("gates,gated", [
    ([{"name": GANG_SCHEDULING_GATE}], True),
    ([{"name": "other.io/gate"}, {"name": GANG_SCHEDULING_GATE}], True),
    ([{"name": "other.io/gate"}], False),  # another controller's gate is not the gang's
    ([], False),
    (None, False),
])
def test_is_gated(gates, gated):
    assert is_gated(pod(gates=gates)) is gated


@pytest.mark.parametrize("phase,ready,expected", [
    ("Running", "True", True),
    ("Running", "False", False),
    ("Running", None, False),  # no conditions yet
    ("Succeeded", "True", False),  # Ready only while running
    ("Pending", "True", False),
    (None, None, False),  # no status
])
def test_is_ready(phase, ready, expected):
    assert is_ready(pod(phase=phase, ready=ready)) is expected


@pytest.mark.parametrize("phase,deleting,alive", [
    ("Running", False, True),
    ("Pending", False, True),
    (None, False, True),
    ("Succeeded", False, False),
    ("Failed", False, False),
    ("Running", True, False),  # being deleted
])
def test_is_alive_and_pod_phase(phase, deleting, alive):
    p = pod(phase=phase, deleting=deleting)
    assert is_alive(p) is alive
    assert pod_phase(p) == phase


def owner(uid, controller=True):
    return {"uid": uid, "controller": controller, "kind": "TrainingJob", "name": "job"}


@pytest.mark.parametrize("owners,uid,predecessor", [
    ([owner("new")], "new", False),
    ([owner("old")], "new", True),  # the same name's earlier job
    ([owner("old", controller=False)], "new", False),  # only a controller reference counts
    ([], "new", False),  # nobody's pod: not an earlier job's
    (None, "new", False),
    ([owner("old")], None, False),  # the job's own uid unknown: nothing to tell apart
    ([owner("old"), owner("new")], "new", False),
])
def test_is_predecessor(owners, uid, predecessor):
    assert is_predecessor(pod(owners=owners), uid) is predecessor


def test_name_lists():
    pods = [pod("running", phase="Running"), pod("done", phase="Succeeded"),
            pod("going", phase="Running", deleting=True), pod("failed-going", phase="Failed", deleting=True)]
    assert names(pods) == ["running", "done", "going", "failed-going"]
    assert alive_names(pods) == ["running"]
    assert undeleted_names(pods) == ["running", "done"]
