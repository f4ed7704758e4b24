"""The sweep's pure reconcile: trials created and owned, maxParallel, capacity, early stopping,
best trial, phase and conditions, replays."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from phalanx.api.sweep import EarlyStopping
from phalanx.sweep import earlystop
from phalanx.sweep.decide import decide, refused, trial_steps

NOW = datetime(2026, 1, 1, tzinfo=UTC)
UID = "sweep-uid"


def sweep(**spec) -> dict:
    base = {
        "template": {"spec": {"image": "phalanx/runtime:0.1.0", "model": {"preset": "debug"},
                              "training": {"steps": 100}}},
        "parameters": [{"path": "training.lr", "values": [0.003, 0.001, 0.0003, 0.0001]}],
        "maxParallel": 2,
    }
    base.update(spec)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep",
            "metadata": {"name": "lr", "namespace": "ns", "uid": UID, "generation": 1}, "spec": base}


class Cluster:
    """The trials as the API server would hold them; ``step`` plays the plan back."""

    def __init__(self, obj: dict):
        self.obj = obj
        self.jobs: dict[str, dict] = {}
        self.now = NOW
        self.events: list[tuple[str, str, str]] = []

    def step(self):
        plan = decide(self.obj, copy.deepcopy(self.jobs), self.now)
        for job in plan.create:
            self.jobs.setdefault(job["metadata"]["name"], {**copy.deepcopy(job), "status": {"phase": "Pending"}})
        for name in plan.suspend:
            self.jobs[name]["spec"]["suspend"] = True
        if plan.status is not None:
            self.obj = {**self.obj, "status": plan.status}
        self.events += plan.events
        self.now += timedelta(seconds=1)
        return plan

    def status(self) -> dict:
        return self.obj.get("status") or {}

    def set(self, name: str, **status):
        self.jobs[name]["status"] = {**self.jobs[name].get("status", {}), **status}

    def trial(self, name: str) -> dict:
        return next(t for t in self.status()["trials"] if t["name"] == name)


def test_first_pass_creates_max_parallel_owned_trials():
    c = Cluster(sweep())
    plan = c.step()
    assert [j["metadata"]["name"] for j in plan.create] == ["lr-0", "lr-1"]
    job = plan.create[0]
    assert job["kind"] == "TrainingJob" and job["metadata"]["namespace"] == "ns"
    assert job["metadata"]["labels"] == {"phalanx.dev/sweep": "lr", "phalanx.dev/trial": "0"}
    owner = job["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "TrainingSweep" and owner["uid"] == UID and owner["controller"] is True
    assert job["spec"]["training"]["lr"] == 0.003 and job["spec"]["training"]["steps"] == 100
    s = c.status()
    assert s["phase"] == "Running" and s["progress"] == "0/4" and s["totalTrials"] == 4
    assert [t["phase"] for t in s["trials"]] == ["Pending", "Pending", "Waiting", "Waiting"]
    assert s["trials"][2]["parameters"] == {"training.lr": 0.0003}
    assert ("Normal", "TrialCreated", "created lr-0 (training.lr=0.003)") in plan.events


def test_replay_creates_nothing_more_and_writes_nothing():
    c = Cluster(sweep())
    c.step()
    plan = c.step()
    assert plan.create == [] and plan.status is None and plan.events == []


def test_never_more_than_max_parallel_unfinished_and_sweep_finishes_with_best():
    c = Cluster(sweep())
    c.step()
    for name in ("lr-0", "lr-1"):
        c.set(name, phase="Running", step=10, loss=4.0)
    assert c.step().create == []
    c.set("lr-0", phase="Succeeded", step=100, loss=3.1)
    plan = c.step()
    assert [j["metadata"]["name"] for j in plan.create] == ["lr-2"]
    assert c.status()["bestTrial"] == {"name": "lr-0", "index": 0, "value": 3.1, "parameters": {"training.lr": 0.003}}
    assert any(e[1] == "NewBestTrial" for e in plan.events)
    c.set("lr-1", phase="Succeeded", step=100, loss=2.9)
    c.set("lr-2", phase="Failed", message="pods failed")
    plan = c.step()
    assert [j["metadata"]["name"] for j in plan.create] == ["lr-3"]
    assert ("Warning", "TrialFailed", "lr-2 failed: pods failed") in plan.events
    c.set("lr-3", phase="Succeeded", step=100, loss=3.5)
    plan = c.step()
    s = c.status()
    assert s["phase"] == "Succeeded" and s["progress"] == "4/4"
    assert s["bestTrial"]["name"] == "lr-1" and s["bestTrial"]["value"] == 2.9
    assert (s["succeededTrials"], s["failedTrials"], s["stoppedTrials"]) == (3, 1, 0)
    conds = {c["type"]: c for c in s["conditions"]}
    assert conds["Succeeded"]["status"] == "True" and conds["Succeeded"]["reason"] == "SweepComplete"
    assert conds["Running"]["status"] == "False" and conds["Valid"]["status"] == "True"
    assert all(c.get("lastTransitionTime") and c.get("observedGeneration") == 1 for c in s["conditions"])
    assert s["completionTime"] and "lr-1: finalLoss 2.9 (training.lr=0.001)" in s["message"]
    assert any(e[1] == "SweepComplete" for e in plan.events)
    assert c.step().status is None  # finished: stays put


def test_all_trials_failed_fails_the_sweep():
    c = Cluster(sweep(parameters=[{"path": "training.lr", "values": [0.1]}]))
    c.step()
    c.set("lr-0", phase="Failed")
    c.step()
    s = c.status()
    assert s["phase"] == "Failed" and s.get("bestTrial") is None
    assert {x["type"]: x["reason"] for x in s["conditions"]}["Failed"] == "NoTrialSucceeded"


def test_no_new_trial_while_a_gang_waits_for_capacity():
    c = Cluster(sweep(maxParallel=3))
    c.step()
    assert len(c.jobs) == 3
    c.set("lr-0", phase="Succeeded", loss=3.0, step=100)
    c.set("lr-1", conditions=[{"type": "Schedulable", "status": "False", "reason": "Unschedulable"}])
    assert c.step().create == []
    running = {x["type"]: x for x in c.status()["conditions"]}["Running"]
    assert running["reason"] == "WaitingForCapacity" and "lr-1" in running["message"]
    c.set("lr-1", conditions=[{"type": "Schedulable", "status": "True"}], phase="Running")
    assert [j["metadata"]["name"] for j in c.step().create] == ["lr-3"]


def test_a_missing_unfinished_trial_is_recreated_a_finished_one_is_not():
    c = Cluster(sweep())
    c.step()
    c.set("lr-0", phase="Succeeded", loss=3.0, step=100)
    c.step()
    del c.jobs["lr-1"]
    del c.jobs["lr-0"]  # e.g. ttlSecondsAfterFinished
    plan = c.step()
    assert [j["metadata"]["name"] for j in plan.create] == ["lr-1"]
    assert c.trial("lr-0")["phase"] == "Succeeded"


def test_a_job_of_the_trials_name_owned_by_another_is_left_alone():
    c = Cluster(sweep())
    c.jobs["lr-0"] = {"metadata": {"name": "lr-0", "ownerReferences": []}, "spec": {}, "status": {"phase": "Running"}}
    plan = c.step()
    assert [j["metadata"]["name"] for j in plan.create] == ["lr-1", "lr-2"]
    t = c.trial("lr-0")
    assert t["phase"] == "Conflict" and t["reason"] == "TrialNameTaken"
    assert any(e[0] == "Warning" and e[1] == "TrialNameTaken" for e in plan.events)


def test_median_rule_stops_the_lagging_trial_by_suspending_it():
    c = Cluster(sweep(maxParallel=4, earlyStopping={"rule": "median", "graceSteps": 10, "minTrials": 2}))
    c.step()
    for name, loss in (("lr-0", 3.0), ("lr-1", 3.2)):
        c.set(name, phase="Running", step=12, loss=loss)
    c.step()
    assert c.status()["trials"][0]["milestones"] == [{"step": 10, "value": 3.0, "at": 12}]
    c.set("lr-2", phase="Running", step=11, loss=3.1)  # better than the median 3.1? equal: continues
    c.set("lr-3", phase="Running", step=10, loss=4.5)
    plan = c.step()
    assert plan.suspend == ["lr-3"]
    t = c.trial("lr-3")
    assert t["phase"] == "Stopping" and t["reason"] == "EarlyStopped"
    assert "median" in t["message"] and "at step 10" in t["message"]
    assert any(e[1] == "EarlyStopped" and "lr-3" in e[2] for e in plan.events)
    assert c.trial("lr-2")["phase"] == "Running"
    # Stopping counts as running until its pods are gone (suspended): no new trial meanwhile.
    assert c.status()["runningTrials"] == 4
    assert c.step().suspend == []  # the suspend was applied
    c.set("lr-3", phase="Suspended")
    stopped = c.step()
    assert c.trial("lr-3")["phase"] == "Stopped"
    # The template has no checkpoint volume: the Event does not claim a checkpoint was kept.
    assert [e[2] for e in stopped.events if e[1] == "EarlyStopped"] == ["lr-3 stopped at step 10; no checkpoint volume"]
    assert c.status()["stoppedTrials"] == 1 and c.status()["progress"] == "1/4"
    for name in ("lr-0", "lr-1", "lr-2"):
        c.set(name, phase="Succeeded", step=100, loss=2.0)
    c.step()
    assert c.status()["phase"] == "Succeeded" and "1 stopped early" in c.status()["message"]


def test_trial_that_finishes_while_stopping_counts_as_succeeded():
    c = Cluster(sweep(maxParallel=4, earlyStopping={"rule": "median", "graceSteps": 10, "minTrials": 1}))
    c.step()
    c.set("lr-0", phase="Running", step=10, loss=3.0)
    c.step()
    c.set("lr-1", phase="Running", step=10, loss=5.0)
    assert c.step().suspend == ["lr-1"]
    c.set("lr-1", phase="Succeeded", step=100, loss=4.0)
    c.step()
    assert c.trial("lr-1")["phase"] == "Succeeded"


def test_diverged_trial_is_stopped():
    c = Cluster(sweep())
    c.step()
    c.set("lr-0", phase="Running", step=3, conditions=[{"type": "LossNotFinite", "status": "True"}])
    plan = c.step()
    assert plan.suspend == ["lr-0"] and c.trial("lr-0")["reason"] == "TrialDiverged"


def test_asha_keeps_the_top_third():
    rule = {"rule": "asha", "graceSteps": 10, "reductionFactor": 3}
    c = Cluster(sweep(maxParallel=4, earlyStopping=rule))
    c.step()
    c.set("lr-0", phase="Running", step=10, loss=3.0)
    assert c.step().suspend == []  # alone at the rung: continues
    c.set("lr-1", phase="Running", step=10, loss=2.0)
    assert c.step().suspend == []  # 2 at the rung, keep ceil(2/3)=1: it is the best
    c.set("lr-2", phase="Running", step=10, loss=2.5)
    assert c.step().suspend == ["lr-2"]  # 3 at the rung, keep ceil(3/3)=1: lr-1 is better


def test_asha_verdicts():
    from phalanx.sweep.earlystop import asha_verdict

    assert asha_verdict("minimize", 3.0, [3.0], 3) is None
    assert asha_verdict("minimize", 2.0, [3.0, 2.0], 3) is None
    assert asha_verdict("minimize", 3.0, [2.0, 3.0], 2) is not None
    assert asha_verdict("minimize", 2.5, [3.0, 2.0, 2.5], 3) is not None  # keep 1, 1 better
    assert asha_verdict("minimize", 2.5, [3.0, 2.0, 2.5, 4.0], 3) is None  # keep 2, 1 better
    assert asha_verdict("maximize", 900.0, [1000.0, 900.0], 2) is not None


def test_invalid_sweep_fails_naming_the_parameter_and_creates_nothing():
    obj = sweep(parameters=[{"path": "training.lrr", "values": [1.0]}])
    plan = decide(obj, {}, NOW)
    assert plan.create == []
    s = plan.status
    assert s["phase"] == "Failed"
    valid = {x["type"]: x for x in s["conditions"]}["Valid"]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.parameters[0].path: training.lrr: unknown field 'lrr'" in valid["message"]
    assert plan.events[0][:2] == ("Warning", "InvalidSpec")
    again = decide({**obj, "status": s}, {}, NOW + timedelta(seconds=5))
    assert again.status is None and again.events == []


def test_refused_trial_fails_and_the_sweep_goes_on():
    c = Cluster(sweep())
    c.step()
    s = refused(c.status(), "lr-0", "admission webhook denied", NOW)
    assert next(t for t in s["trials"] if t["name"] == "lr-0")["reason"] == "CreateRejected"
    c.obj["status"] = s
    del c.jobs["lr-0"]
    plan = c.step()
    assert [j["metadata"]["name"] for j in plan.create] == ["lr-2"]


@pytest.mark.parametrize("metric,goal,expected", [("bestLoss", "minimize", 2.5), ("tokensPerSecond", "maximize", 1200.0)])
def test_objective_metrics(metric, goal, expected):
    c = Cluster(sweep(parameters=[{"path": "training.lr", "values": [0.1]}], objective={"metric": metric, "goal": goal}))
    c.step()
    c.set("lr-0", phase="Running", step=5, loss=2.5, tokensPerSecond=1000.0)
    c.step()
    c.set("lr-0", phase="Succeeded", step=100, loss=2.8, tokensPerSecond=1200.0)
    c.step()
    assert c.status()["bestTrial"]["value"] == expected


# --- reported metrics and command-job trials -----------------------------------------------------

COMMAND = {"spec": {"image": "x", "command": ["python3", "train.py"]}}


def eval_sweep(**spec) -> dict:
    base = {"template": COMMAND, "objective": {"metric": "eval_loss"}, "maxParallel": 4,
            "parameters": [{"path": "env.LR", "values": [0.3, 0.1, 0.03, 3.0]}]}
    return sweep(**{**base, **spec})


def test_a_reported_metric_is_the_objective_and_a_trial_that_never_reported_it_has_no_value():
    c = Cluster(eval_sweep())
    c.step()
    assert [j["spec"]["env"] for j in c.jobs.values()][0] == [{"name": "LR", "value": "0.3"}]
    c.set("lr-0", phase="Succeeded", step=50, loss=1.0, metrics={"eval_loss": 2.2})  # lowest loss, not eval_loss
    c.set("lr-1", phase="Succeeded", step=50, loss=1.5, metrics={"eval_loss": 1.8, "eval_accuracy": 0.7})
    c.set("lr-2", phase="Succeeded", step=50, loss=1.2)  # never reported eval_loss
    c.set("lr-3", phase="Failed", message="diverged")
    plan = c.step()
    s = c.status()
    assert s["bestTrial"] == {"name": "lr-1", "index": 1, "value": 1.8, "parameters": {"env.LR": 0.1}}
    assert c.trial("lr-2").get("value") is None and c.trial("lr-2")["message"] == "never reported eval_loss"
    assert ("Normal", "TrialSucceeded", "lr-2 succeeded: never reported eval_loss") in plan.events
    assert ("Normal", "TrialSucceeded", "lr-1 succeeded: eval_loss 1.8") in plan.events
    assert s["phase"] == "Succeeded" and "best lr-1: eval_loss 1.8 (env.LR=0.1)" in s["message"]


def test_a_sweep_whose_succeeded_trials_never_reported_the_metric_fails_saying_so():
    c = Cluster(eval_sweep(parameters=[{"path": "env.LR", "values": [0.1]}]))
    c.step()
    c.set("lr-0", phase="Succeeded", step=50, loss=1.0)
    c.step()
    s = c.status()
    assert s["phase"] == "Failed" and s["message"].startswith("no trial that succeeded reported eval_loss (1 succeeded")


def test_best_of_a_reported_metric_is_over_what_the_sweep_saw():
    c = Cluster(eval_sweep(parameters=[{"path": "env.LR", "values": [0.1]}],
                           objective={"metric": "eval_accuracy", "aggregate": "best", "goal": "maximize"}))
    c.step()
    for step, accuracy in ((10, 0.6), (20, 0.9), (30, 0.8)):
        c.set("lr-0", phase="Running", step=step, metrics={"eval_accuracy": accuracy})
        c.step()
    c.set("lr-0", phase="Succeeded", step=40, metrics={"eval_accuracy": 0.85})
    plan = c.step()
    assert c.status()["bestTrial"]["value"] == 0.9
    assert ("Normal", "TrialSucceeded", "lr-0 succeeded: best eval_accuracy 0.9") in plan.events


def test_median_rule_on_a_reported_metric_a_milestone_waits_for_its_first_value():
    c = Cluster(eval_sweep(earlyStopping={"rule": "median", "graceSteps": 10, "minTrials": 2}))
    c.step()
    for name in ("lr-0", "lr-1", "lr-2"):  # equal to the median of the others: each continues
        c.set(name, phase="Running", step=10, loss=1.0, metrics={"eval_loss": 2.0})
    c.set("lr-3", phase="Running", step=12, loss=0.5)  # past the milestone, no eval_loss yet
    assert c.step().suspend == []
    assert c.trial("lr-3").get("milestones", []) == []
    c.set("lr-3", step=14, metrics={"eval_loss": 9.0})  # first reported: recorded and judged now
    plan = c.step()
    assert plan.suspend == ["lr-3"]
    assert c.trial("lr-3")["milestones"] == [{"step": 10, "value": 9.0, "at": 14}]
    assert c.trial("lr-3")["message"].startswith("median rule, eval_loss at step 10: 9 is worse than the median 2 of 3")


@pytest.mark.parametrize(("status", "milestones"), [
    ({}, 12),  # a command job that has not said how many steps it runs: MAX_MILESTONES
    ({"totalSteps": 35}, 3),  # milestones below its totalSteps: 10, 20, 30
    ({"totalSteps": 0}, 12),
    ({"totalSteps": "35"}, 12),
])
def test_a_command_trials_milestones_are_bounded_by_its_reported_total_steps(status, milestones):
    rule = EarlyStopping(rule="median", grace_steps=10)
    assert len(earlystop.milestones(rule, trial_steps(COMMAND["spec"], status))) == milestones
    # the built-in runtime runs training.steps, whatever the status says
    assert trial_steps({"model": {"preset": "debug"}, "training": {"steps": 100}}, {"totalSteps": 35}) == 100


@pytest.mark.parametrize("template", [
    {"model": {"preset": "debug", "lora": {}}},
    {"model": {"pretrained": {"path": "/models/llama"}}},
    {"model": {"preset": "debug"}, "training": {"steps": 100, "eval": {}}},
    {"model": {"preset": "debug"}, "data": {"source": "prepared", "path": "/d", "prepare": {"inputs": ["/r"], "tokenizer": "/t"}}},
    {"model": {"preset": "debug"}, "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}, "exportHuggingFace": True}},
    {"model": {"preset": "debug"}, "failurePolicy": {"preflight": True}},
    {"model": {"preset": "debug"}, "failurePolicy": {"preflightTimeoutSeconds": 30}},
])
def test_a_field_added_later_is_in_the_digest_once_set(template):
    """ADDED_OPTIONAL_FIELDS leave a field out of the digest only while it is unset."""
    unset = sweep(objective={"metric": "bestLoss", "goal": "minimize"}, earlyStopping={"rule": "median"})
    changed = copy.deepcopy(unset)
    changed["spec"]["template"]["spec"].update(copy.deepcopy(template))
    if "checkpoint" in template:  # the volume alone (present before) does not change what is compared
        unset["spec"]["template"]["spec"]["checkpoint"] = {"volume": template["checkpoint"]["volume"]}
    digest = decide(unset, {}, NOW).status["specHash"]
    assert decide(changed, {}, NOW).status["specHash"] not in (None, digest)


def test_a_sweep_without_aggregate_keeps_the_digest_it_was_started_with():
    """An operator without objective.aggregate wrote this digest for this spec: an upgrade must not
    refuse the running sweep as changed."""
    obj = sweep(objective={"metric": "bestLoss", "goal": "minimize"}, earlyStopping={"rule": "median"})
    plan = decide(obj, {}, NOW)
    assert plan.status["specHash"] == "3b50a03b3664f640"
    assert decide(sweep(objective={"metric": "eval_loss", "aggregate": "best"}), {}, NOW).status["specHash"] != "3b50a03b3664f640"
