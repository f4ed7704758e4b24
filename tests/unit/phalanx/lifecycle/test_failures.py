"""lifecycle.failures: failed pods classified by the ExitCode policy, lost pods and nodes, hangs,
pods stuck terminating, a released gang left unbound, the restart backoff."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from phalanx.api.types import FailurePolicy, TrainingJobSpec
from phalanx.constants import (
    CONTAINER_NAME,
    GANG_SCHEDULING_GATE,
    LABEL_NODE_RANK,
    FailureCategory,
    Reason,
)
from phalanx.lifecycle.failure_cause import Cause
from phalanx.lifecycle.failures import (
    Failure,
    backoff_seconds,
    classify_pod,
    created_at,
    exit_code_retryable,
    first_failure,
    stuck_terminating,
    unbound_too_long,
)
from phalanx.lifecycle.status import StatusView


def test_backoff_doubles_and_caps():
    policy = FailurePolicy(backoff_seconds=10, max_backoff_seconds=60)
    assert [backoff_seconds(n, policy) for n in range(0, 6)] == [0, 10, 20, 40, 60, 60]


@pytest.mark.parametrize("code,retryable,permanent,expected", [
    (1, [], [], False),  # the program's own exit: permanent by default
    (0, [], [], False),
    (127, [], [], False),
    (128, [], [], True),  # killed by a signal: the infrastructure's doing
    (137, [], [], True),
    (143, [], [], True),
    (3, [3], [], True),  # listed retryable
    (137, [], [137], False),  # listed permanent, even a signal
    (255, [], [255], False),
])
def test_exit_code_retryable(code, retryable, permanent, expected):
    policy = FailurePolicy(retryable_exit_codes=retryable, permanent_exit_codes=permanent)
    assert exit_code_retryable(code, policy) is expected


@pytest.mark.parametrize("restarts,base,cap,delay", [
    (1, 0, 300, 0),  # backoff off
    (-1, 10, 300, 0),
    (1, 10, 5, 5),  # the cap applies from the first restart
    (30, 10, 300, 300),  # a large count stays capped
])
def test_backoff_edges(restarts, base, cap, delay):
    assert backoff_seconds(restarts, FailurePolicy(backoff_seconds=base, max_backoff_seconds=cap)) == delay


def failed_pod(name="job-node-1-0", rank=1, reason=None, message=None, exit_code=None, phase="Failed", node="n1"):
    status = {"phase": phase}
    if reason is not None:
        status["reason"] = reason
    if message is not None:
        status["message"] = message
    if exit_code is not None:
        status["containerStatuses"] = [{"name": CONTAINER_NAME, "state": {"terminated": {"exitCode": exit_code}}}]
    labels = {LABEL_NODE_RANK: str(rank)} if rank is not None else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}, "status": status}


@pytest.mark.parametrize("pod,expected", [
    (failed_pod(phase="Running"), None),
    (failed_pod(phase="Succeeded", exit_code=0), None),
    (failed_pod(reason="Evicted", message="low on memory"), ("Evicted", None, True, FailureCategory.INFRASTRUCTURE)),
    (failed_pod(reason="Preempting", exit_code=1), ("Preempting", None, True, FailureCategory.INFRASTRUCTURE)),
    (failed_pod(), (Reason.POD_FAILED, None, True, FailureCategory.INFRASTRUCTURE)),  # no exit code recorded
    (failed_pod(exit_code=1), (Reason.EXITED, 1, False, FailureCategory.UNKNOWN)),
    (failed_pod(exit_code=137), (Reason.EXITED, 137, True, FailureCategory.OUT_OF_MEMORY)),
])
def test_classify_pod(pod, expected):
    failure = classify_pod(pod, FailurePolicy())
    if expected is None:
        assert failure is None
        return
    assert (failure.reason, failure.exit_code, failure.retryable, failure.cause.category) == expected
    assert (failure.pod, failure.rank) == ("job-node-1-0", 1)


def test_a_failure_without_an_exit_code_says_so():
    failure = classify_pod(failed_pod(), FailurePolicy())
    assert failure.message == "no exit code recorded"


@pytest.mark.parametrize("failure,text", [
    (Failure("job-node-1-0", 1, "Exited", "", 1, False), "pod job-node-1-0 (node-rank 1) Exited with code 1 (permanent)"),
    (Failure("job-ps-0-0", -1, "Evicted", "low on memory", None, True),
     "pod job-ps-0-0 Evicted (retryable): low on memory"),  # a role pod: no node-rank
    (Failure("p", 0, "Exited", "", 1, False, Cause(FailureCategory.USER_CODE, "ValueError: x", 3)),
     "pod p (node-rank 0) Exited with code 1 (permanent); cause: UserCodeError in rank 3: ValueError: x"),
    (Failure("p", 0, "Exited", "", 1, False, Cause(FailureCategory.USER_CODE)), "pod p (node-rank 0) Exited with code 1 (permanent)"),
])
def test_describe(failure, text):
    assert failure.describe() == text


def test_record_is_the_last_failure_status():
    cause = Cause(FailureCategory.COMMUNICATION, "NCCL error", 5)
    record = Failure("job-node-1-0", 1, "Exited", "raw", 1, False, cause).record("2026-01-01T00:00:00Z")
    assert (record.pod, record.node_rank, record.rank, record.exit_code, record.reason, record.category, record.message, record.time) == \
        ("job-node-1-0", 1, 5, 1, "Exited", FailureCategory.COMMUNICATION, "NCCL error", "2026-01-01T00:00:00Z")
    bare = Failure("job-ps-0-0", -1, "Evicted", "low\non   memory", None, True).record("t")
    assert (bare.node_rank, bare.rank, bare.category, bare.message) == (None, None, FailureCategory.UNKNOWN, "low on memory")


NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def view_of(status):
    return StatusView(status, 1, NOW)


def spec(**over):
    return TrainingJobSpec.model_validate({"image": "x", "command": ["train"], "nodes": 2} | over)


def running_pod(rank, node="n1"):
    return failed_pod(f"job-node-{rank}-0", rank, phase="Running", node=node)


def test_first_failure_prefers_the_pod_the_infrastructure_ended():
    """Its peers' errors follow from it: the evicted pod names the failure, though a lower rank failed too."""
    pods = [failed_pod("job-node-0-0", 0, exit_code=1), failed_pod("job-node-1-0", 1, reason="Evicted")]
    failure = first_failure(view_of({}), pods, spec(), NOW, frozenset(), None)
    assert (failure.pod, failure.reason) == ("job-node-1-0", "Evicted")
    same = [failed_pod("job-node-1-0", 1, exit_code=1), failed_pod("job-node-0-0", 0, exit_code=1)]
    assert first_failure(view_of({}), same, spec(), NOW, frozenset(), None).pod == "job-node-0-0"  # then rank order


def test_first_failure_finds_a_pod_on_a_lost_node():
    pods = [running_pod(0, node="n0"), running_pod(1, node="n1")]
    failure = first_failure(view_of({}), pods, spec(), NOW, frozenset({"n1"}), None)
    assert (failure.pod, failure.reason, failure.retryable) == ("job-node-1-0", Reason.NODE_LOST, True)
    assert first_failure(view_of({}), pods, spec(), NOW, frozenset({"elsewhere"}), None) is None


def test_first_failure_finds_a_lost_pod_only_once_the_gang_was_created():
    pods = [running_pod(0)]
    assert first_failure(view_of({}), pods, spec(), NOW, frozenset(), None) is None  # still being created
    failure = first_failure(view_of({"attemptCreated": True}), pods, spec(), NOW, frozenset(), None)
    assert (failure.reason, failure.rank) == (Reason.POD_LOST, 1)


HANG = {"phase": "Running", "lastProgressTime": "2026-01-01T11:50:00Z"}  # 600 s before NOW


@pytest.mark.parametrize("status,timeout,progress,hang", [
    (HANG, 599, None, True),
    (HANG, 600, None, False),  # exactly the timeout: not yet
    (HANG, 0, None, False),  # hang detection off
    (HANG | {"phase": "Scheduling"}, 60, None, False),  # only a running gang hangs
    (HANG | {"step": 7}, 60, {"step": 8}, False),  # a step reported in this pass is progress
    (HANG | {"step": 7}, 60, {"step": 7}, True),  # the same step again is not
    ({"phase": "Running", "startTime": "2026-01-01T11:50:00Z"}, 60, None, True),  # no progress yet: from the start
    (HANG | {"step": 0}, 60, {"phase": "Preparing", "step": 0}, False),  # data.prepare makes no steps
    (HANG | {"step": 40}, 60, {"phase": "Exporting", "step": 40}, False),  # nor does the in-job export
    (HANG | {"step": 40}, 60, {"phase": "Succeeded", "step": 40}, True),  # any other phase: the clock runs
    (HANG | {"step": 40}, 60, {"phase": "Running", "step": 40}, True),
])
def test_hang(status, timeout, progress, hang):
    pods = [running_pod(0), running_pod(1)]
    failure = first_failure(view_of(status), pods, spec(failurePolicy={"hangTimeoutSeconds": timeout}), NOW, frozenset(), progress)
    assert (failure is not None and failure.reason == Reason.HANG) is hang


def terminating(name, node, deleted):
    return {"metadata": {"name": name, "deletionTimestamp": deleted}, "spec": {"nodeName": node}}


def test_stuck_terminating():
    pods = [terminating("old-on-lost", "lost", "2026-01-01T11:50:00Z"),
            terminating("recent-on-lost", "lost", "2026-01-01T11:59:00Z"),
            terminating("old-on-live", "live", "2026-01-01T11:50:00Z"),
            terminating("not-deleting", "lost", None),
            terminating("bad-timestamp", "lost", "not a time")]
    assert stuck_terminating(pods, frozenset({"lost"}), NOW, 300) == ["old-on-lost"]


@pytest.mark.parametrize("stamp,moment", [
    ("2026-01-01T12:00:00Z", NOW),
    (None, None),  # a rendered pod
    ("garbage", None),
])
def test_created_at(stamp, moment):
    pod = {"metadata": {"name": "p"} | ({"creationTimestamp": stamp} if stamp else {})}
    assert created_at(pod) == moment


SCHEDULED = {"conditions": [{"type": "Schedulable", "status": "True", "lastTransitionTime": "2026-01-01T11:50:00Z"}]}


def released(name, node=None, created="2026-01-01T11:50:00Z", gated=False, phase="Pending"):
    pod = {"metadata": {"name": name, "creationTimestamp": created}, "spec": {}, "status": {"phase": phase}}
    if node:
        pod["spec"]["nodeName"] = node
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": GANG_SCHEDULING_GATE}]
    return pod


@pytest.mark.parametrize("status,pods,count", [
    (SCHEDULED, [released("a"), released("b", node="n1")], 1),
    (SCHEDULED, [released("a"), released("b")], 2),
    (SCHEDULED, [released("a"), released("b", created="2026-01-01T11:58:00Z")], 0),  # the clock runs from the newest pod
    (SCHEDULED, [released("a")], 0),  # not every pod exists
    (SCHEDULED, [released("a", gated=True), released("b", phase="Failed")], 0),  # gated or finished: not waiting to bind
    ({}, [released("a"), released("b")], 0),  # never placed
    ({"conditions": [SCHEDULED["conditions"][0] | {"status": "False"}]}, [released("a"), released("b")], 0),
])
def test_unbound_too_long(status, pods, count):
    assert unbound_too_long(view_of(status), pods, 2, NOW, 300) == count
