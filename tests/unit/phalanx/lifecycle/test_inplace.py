"""lifecycle/inplace.py: a gang whose trainer restarts in place is counted, followed and bounded."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.api.config import OperatorConfig
from phalanx.constants import ANNOTATION_RESTART_REQUEST, FEATURE_RESTART_ALL_CONTAINERS
from phalanx.lifecycle import inplace
from phalanx.lifecycle.restart import failed
from tests.lifecycle_pass import ago, conditions, job, pod, prepared

RUNNING = {"phase": "Running", "restartAttempt": 0, "attemptCreated": True, "startTime": ago(100),
           "lastProgressTime": ago(5)}
POLICY = {"failurePolicy": {"maxRestarts": 2, "backoffSeconds": 10}}
REPORT_KILLED = '{"phase": "Failed", "error": {"type": "WorkerFailed", "message": "worker rank 1 was killed by SIGKILL", "rank": 1}}'
REPORT_PEER = '{"phase": "Failed", "error": {"type": "RuntimeError", "message": "Connection closed by peer", "rank": 0}}'
IN_PLACE = OperatorConfig().with_restart_all_containers(True)


def trainer(rank: int, restarts: int = 0, *, running: bool = True, exit_code: int = 75, message: str = "",
            asked: int = 0, rules: bool = True, phase: str = "Running") -> dict[str, Any]:
    """A worker pod with the restart rule whose trainer restarted ``restarts`` times."""
    p = pod(rank, phase=phase)
    p["spec"]["containers"] = [{"name": "trainer", **({"restartPolicyRules": [{"action": "RestartAllContainers"}]}
                                                      if rules else {})}]
    state = {"running": {"startedAt": ago(1)}} if running else {"waiting": {"reason": "RestartingAllContainers"}}
    status: dict[str, Any] = {"name": "trainer", "restartCount": restarts, "state": state}
    if restarts:
        status["lastState"] = {"terminated": {"exitCode": exit_code, "message": message}}
    p["status"]["containerStatuses"] = [status]
    if asked:
        p["metadata"]["annotations"] = {ANNOTATION_RESTART_REQUEST: str(asked)}
    return p


@pytest.mark.parametrize(("pods", "restarts", "counted", "expect_restarts", "expect_counted", "asked", "named"), [
    pytest.param([trainer(0), trainer(1)], 0, 0, 0, 0, {}, None, id="nothing-restarted"),
    pytest.param([trainer(0), trainer(1, 1, message=REPORT_KILLED)], 0, 0, 1, 1, {"job-node-0-0": "1"}, "job-node-1-0",
                 id="one-pod-restarted-the-other-is-asked"),
    pytest.param([trainer(0, 1, message=REPORT_PEER), trainer(1, 1, message=REPORT_KILLED)], 0, 0, 1, 1, {},
                 "job-node-1-0", id="both-restarted-the-killed-one-is-named"),
    pytest.param([trainer(0, 1, message=REPORT_PEER), trainer(1, 1)], 1, 1, 1, 1, {}, None, id="already-counted"),
    pytest.param([trainer(0, asked=1), trainer(1, 1)], 1, 1, 1, 1, {}, None, id="already-asked"),
    pytest.param([trainer(0), trainer(1, 1)], 1, 1, 1, 1, {"job-node-0-0": "1"}, None, id="a-lost-request-is-repeated"),
    pytest.param([trainer(0, 2), trainer(1, 1)], 1, 1, 2, 2, {"job-node-1-0": "2"}, "job-node-0-0",
                 id="a-second-restart"),
    pytest.param([trainer(0, 1), trainer(1, 0, phase="Failed")], 0, 0, 0, 0, {}, None, id="a-failed-pod-recreates"),
])
def test_restarted_in_place_counts_and_asks(pods, restarts, counted, expect_restarts, expect_counted, asked, named):
    ctx = prepared(job(POLICY, {**RUNNING, "restarts": restarts, "inPlaceRestarts": counted}), pods, config=IN_PLACE)
    assert inplace.restarted_in_place(ctx) is None
    status = ctx.view.status
    assert (status.restarts, status.in_place_restarts) == (expect_restarts, expect_counted)
    assert ctx.plan.annotate_pods == {name: {ANNOTATION_RESTART_REQUEST: value} for name, value in asked.items()}
    assert ctx.plan.delete_pods == [] and status.restart_attempt == 0  # the pods stay: no new attempt
    if named is None:
        assert all(e[1] != "RestartedInPlace" for e in ctx.view.events)
        return
    assert status.last_failure.pod == named and status.last_restart_mode == "InPlace"
    assert conditions(ctx)["Restarting"] == ("True", "RestartedInPlace")
    assert [e[1] for e in ctx.view.events] == ["RestartedInPlace"]


def test_in_place_restarts_past_max_restarts_fail_the_job():
    ctx = prepared(job(POLICY, {**RUNNING, "restarts": 2, "inPlaceRestarts": 2}),
                   [trainer(0, 2), trainer(1, 3, exit_code=75)], config=IN_PLACE)
    plan = inplace.restarted_in_place(ctx)
    assert plan is not None and ctx.view.status.phase == "Failed"
    assert conditions(ctx)["Failed"] == ("True", "MaxRestartsExceeded")
    assert sorted(ctx.plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]


@pytest.mark.parametrize(("pods", "ends"), [
    pytest.param([trainer(0, 1), trainer(1, 1)], True, id="every-pod-caught-up-and-running"),
    pytest.param([trainer(0, 1), trainer(1, 0)], False, id="one-pod-still-to-restart"),
    pytest.param([trainer(0, 1), trainer(1, 1, running=False)], False, id="one-pod-restarting"),
])
def test_the_restarting_condition_ends_once_the_gang_caught_up(pods, ends):
    restarting = {"type": "Restarting", "status": "True", "reason": "RestartedInPlace", "message": "",
                  "lastTransitionTime": ago(10)}
    ctx = prepared(job(POLICY, {**RUNNING, "restarts": 1, "inPlaceRestarts": 1, "conditions": [restarting]}), pods,
                   config=IN_PLACE)
    inplace.restarted_in_place(ctx)
    assert conditions(ctx)["Restarting"][0] == ("False" if ends else "True")
    # the hang clock starts afresh once the gang runs again (RUNNING's lastProgressTime: 5 s ago)
    assert (ctx.view.status.last_progress_time == ctx.view.now) == ends


def test_a_node_replacement_ends_restarting_once_the_new_pod_and_the_others_run():
    """The replacement pod counts from the gang's restarts (PHALANX_RESTART_BASE), the others
    restarted in place on request: Restarting=NodeReplaced ends, the hang clock starts afresh."""
    restarting = {"type": "Restarting", "status": "True", "reason": "NodeReplaced", "message": "",
                  "lastTransitionTime": ago(10)}
    replacement = trainer(1)
    replacement["spec"]["containers"][0]["env"] = [{"name": "PHALANX_RESTART_BASE", "value": "1"}]
    ctx = prepared(job(POLICY, {**RUNNING, "restarts": 1, "inPlaceRestarts": 1, "lastRestartMode": "ReplaceNode",
                                "conditions": [restarting]}), [trainer(0, 1), replacement], config=IN_PLACE)
    assert inplace.restarted_in_place(ctx) is None
    assert conditions(ctx)["Restarting"] == ("False", "Running") and ctx.view.status.last_progress_time == ctx.view.now
    assert ctx.view.status.restarts == 1  # caught up: nothing counted again


@pytest.mark.parametrize(("config", "rules", "mode"), [
    pytest.param(IN_PLACE, True, "InPlace", id="in-place"),
    pytest.param(OperatorConfig(restart_in_place=False).with_restart_all_containers(True), True, "Recreate",
                 id="turned-off"),
    pytest.param(OperatorConfig(), True, "Recreate", id="not-discovered"),
    pytest.param(IN_PLACE, False, "Recreate", id="pods-without-the-rule"),
])
def test_a_hang_restarts_in_place_when_the_gang_can(config, rules, mode):
    spec = {"failurePolicy": {"maxRestarts": 2, "hangTimeoutSeconds": 60}}
    status = {**RUNNING, "lastProgressTime": ago(120), "step": 7}
    ctx = prepared(job(spec, status), [trainer(0, rules=rules), trainer(1, rules=rules)], config=config)
    assert failed(ctx) is not None
    status = ctx.view.status
    assert status.restarts == 1 and status.last_restart_mode == mode and status.last_failure.reason == "Hang"
    if mode == "InPlace":
        assert status.restart_attempt == 0 and ctx.plan.delete_pods == [] and status.in_place_restarts == 1
        assert ctx.plan.annotate_pods == {n: {ANNOTATION_RESTART_REQUEST: "1"} for n in ("job-node-0-0", "job-node-1-0")}
        assert conditions(ctx)["Restarting"] == ("True", "RestartRequested") and status.phase == "Running"
    else:
        assert status.restart_attempt == 1 and ctx.plan.annotate_pods == {} and status.phase == "Restarting"


@pytest.mark.parametrize(("reason", "mode"), [
    pytest.param("RestartRequested", "Recreate", id="a-request-not-taken-recreates"),
    pytest.param("RestartedInPlace", "Recreate", id="a-restart-not-caught-up-recreates"),
    pytest.param("Running", "InPlace", id="after-a-restart-that-caught-up-in-place-again"),
])
def test_a_hang_during_a_restart_in_place_recreates_the_gang(reason, mode):
    """The pods did not take the restart asked within hangTimeoutSeconds: asking again may never
    end, recreating does."""
    spec = {"failurePolicy": {"maxRestarts": 3, "hangTimeoutSeconds": 60}}
    restarting = {"type": "Restarting", "status": "True" if reason != "Running" else "False", "reason": reason,
                  "message": "", "lastTransitionTime": ago(120)}
    status = {**RUNNING, "lastProgressTime": ago(120), "step": 7, "restarts": 1, "inPlaceRestarts": 1,
              "conditions": [restarting]}
    ctx = prepared(job(spec, status), [trainer(0, asked=1), trainer(1, asked=1)], config=IN_PLACE)
    assert inplace.restarted_in_place(ctx) is None and failed(ctx) is not None
    assert ctx.view.status.restarts == 2 and ctx.view.status.last_restart_mode == mode
    assert ctx.view.status.restart_attempt == (1 if mode == "Recreate" else 0)


@pytest.mark.parametrize(("since_caught_up", "mode", "hang"), [
    pytest.param(True, "InPlace", False, id="no-step-since-the-restart-the-launchers-backoff-is-allowed"),
    pytest.param(False, "InPlace", True, id="a-step-came-after-it-the-plain-timeout"),
    pytest.param(True, "ReplaceNode", False, id="after-a-node-replacement-too"),
    pytest.param(True, "Recreate", True, id="a-recreated-gang-waited-its-backoff-before-creation"),
])
def test_the_hang_clock_allows_the_backoff_launchers_wait_after_a_restart_in_place(since_caught_up, mode, hang):
    """The launchers wait backoffSeconds × 2^(n-1) (here 10 × 2 = 20 s) before training after
    the n-th restart in place; 70 s without a step is no hang with a 60 s timeout then."""
    spec = {"failurePolicy": {"maxRestarts": 5, "hangTimeoutSeconds": 60, "backoffSeconds": 10}}
    caught_up = ago(70)
    restarting = {"type": "Restarting", "status": "False", "reason": "Running", "message": "",
                  "lastTransitionTime": caught_up}
    status = {**RUNNING, "lastProgressTime": caught_up if since_caught_up else ago(69), "step": 7, "restarts": 2,
              "inPlaceRestarts": 2, "lastRestartMode": mode, "conditions": [restarting]}
    ctx = prepared(job(spec, status), [trainer(0, 2), trainer(1, 2)], config=IN_PLACE)
    assert inplace.restarted_in_place(ctx) is None
    assert (failed(ctx) is not None) == hang


@pytest.mark.parametrize(("answer", "kept"), [
    pytest.param(inplace.probe_pod("ns"), True, id="kept"),
    pytest.param({"spec": {"containers": [{"name": "trainer", "restartPolicy": "Never"}]}}, False, id="dropped"),
    pytest.param({}, False, id="empty"),
])
def test_rules_kept(answer, kept):
    assert inplace.rules_kept(answer) is kept


def test_nodes_lacking_the_feature():
    nodes = [{"metadata": {"name": "new"}, "status": {"declaredFeatures": [FEATURE_RESTART_ALL_CONTAINERS]}},
             {"metadata": {"name": "old"}, "status": {}},
             {"metadata": {"name": "other"}, "status": {"declaredFeatures": ["Something"]}}]
    assert inplace.nodes_lacking(nodes) == ["old", "other"]


def test_a_restart_whose_exit_the_kubelet_did_not_keep_is_unknown():
    removed = trainer(1, 1)
    removed["status"]["containerStatuses"][0]["lastState"] = {"terminated": {
        "exitCode": 137, "reason": "RestartingAllContainers",
        "message": "The container is removed because RestartAllContainers in place"}}
    failure = inplace.in_place_failure(removed)
    assert failure.exit_code is None and failure.cause.category == "Unknown" and failure.retryable
    assert inplace.in_place_failure(trainer(1, 1, message=REPORT_KILLED)).exit_code == 75


def test_the_restarted_run_says_where_it_resumed():
    """A restart in place clears status.resumedStep (the run before's); the restarted trainer's
    first report sets it again, with its Event."""
    ctx = prepared(job(POLICY, {**RUNNING, "restarts": 0, "resumedStep": 10}),
                   [trainer(0), trainer(1, 1, message=REPORT_KILLED)], config=IN_PLACE)
    inplace.restarted_in_place(ctx)
    counted = ctx.done().status
    assert "resumedStep" not in counted and counted["lastRestartMode"] == "InPlace"
    ctx = prepared(job(POLICY, counted), [trainer(0, 1), trainer(1, 1)], config=IN_PLACE)
    ctx.reports.append({"step": 21, "resumedStep": 20})
    inplace.restarted_in_place(ctx)
    plan = ctx.done()
    assert plan.status["resumedStep"] == 20 and plan.status["step"] == 21
    assert ("Normal", "ResumedFromCheckpoint", "resumed from step 20") in plan.events


def test_a_node_lost_under_the_gang_is_one_restart_not_two():
    """Its peers restart in place (a broken collective) while its pod sits on the lost node: the
    node loss (replace_node or restart.failed) counts the incident, the echo is not counted."""
    pods = [trainer(0, 1, message=REPORT_PEER), trainer(1)]
    pods[1]["spec"]["nodeName"] = "n1"
    ctx = prepared(job(POLICY, {**RUNNING, "restarts": 0, "inPlaceRestarts": 0}), pods, config=IN_PLACE,
                   lost_nodes=frozenset({"n1"}))
    assert inplace.restarted_in_place(ctx) is None
    assert ctx.view.status.restarts == 0 and ctx.plan.annotate_pods == {}
    failed(ctx)
    assert ctx.view.status.restarts == 1 and ctx.view.status.last_restart_mode == "Recreate"
    missing = prepared(job(POLICY, {**RUNNING, "restarts": 0, "inPlaceRestarts": 0}),
                       [trainer(0, 1, message=REPORT_PEER)], config=IN_PLACE)  # a created gang's pod is gone
    assert inplace.restarted_in_place(missing) is None and missing.view.status.restarts == 0


@pytest.mark.parametrize(("value", "count"), [
    ("3", 3), ("", 0), ("²", 0), ("٣", 0), ("1" * 10, 0), ("-1", 0), (" 2", 0), (None, 0), (7, 0), ("9" * 5000, 0),
])
def test_a_restart_count_a_pod_carries_is_a_plain_decimal_or_nothing(value, count):
    p = trainer(0)
    p["metadata"]["annotations"] = {ANNOTATION_RESTART_REQUEST: value}
    p["spec"]["containers"][0]["env"] = [{"name": "PHALANX_RESTART_BASE", "value": value}]
    assert inplace.requested(p) == count and inplace.restart_base(p) == count
