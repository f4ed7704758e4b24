"""TrainingSweeps on the real control plane: trials created and owned, maxParallel honoured, early
stopping by suspending a trial, the best trial, deletion cascading to the trials, bad sweeps
refused (by the API server, or by the operator before any trial exists).

kwok pods do not train: a trial's progress is fed as the runtime's would arrive — mid-run step and
loss into the trial's status (what the operator writes from rank 0's progress endpoint), the end
as rank 0's termination message (what the runtime writes at exit; the operator reads it)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from tests.integration.harness import Jobs, wait_for

ROOT = Path(__file__).resolve().parents[2]
SWEEP_CRD = ROOT / "crds" / "phalanx.dev_trainingsweeps.yaml"
GROUP, VERSION, SWEEPS = "phalanx.dev", "v1alpha1", "trainingsweeps"


@pytest.fixture(scope="module")
def sweep_operator(operator):
    """The session operator serves TrainingSweeps too (harness.install_crd installs both CRDs)."""
    return operator


class Sweeps(Jobs):
    def create_sweep(self, obj):
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": self.ns}}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, SWEEPS, obj)

    def sweep(self, name):
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, SWEEPS, name)

    def sweep_status(self, name):
        return self.sweep(name).get("status") or {}

    def trials(self, name):
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.ns, "trainingjobs",
                                                         label_selector=f"phalanx.dev/sweep={name}")["items"]
        return {t["metadata"]["name"]: t for t in items}

    def jobs_running(self, name):
        return self.status(name).get("phase") == "Running"

    def record(self, sweep, trial):
        return next((t for t in self.sweep_status(sweep).get("trials", []) if t["name"] == trial), {})

    def report(self, trial, step, loss):
        """Mid-run progress, as the operator writes it from rank 0's endpoint."""
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, self.ns, "trainingjobs", trial,
                                                          {"status": {"step": step, "loss": loss}})

    def finish(self, trial, step, loss):
        """Rank 0 exits 0 with its final progress as the termination message."""
        pods = wait_for(lambda: [p for p in self.pods(trial) if p.status.phase == "Running"], 90, f"{trial} pods Running")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        message = json.dumps({"step": step, "totalSteps": step, "loss": loss, "tokensPerSecond": 1000.0})
        for pod in pods:
            term = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now, "message": message}
            body = {"status": {"phase": "Succeeded", "containerStatuses": [
                {"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0, "started": False,
                 "state": {"terminated": term}} for c in pod.spec.containers]}}
            self.core.patch_namespaced_pod_status(pod.metadata.name, self.ns, body)


@pytest.fixture
def sweeps(api, namespace, sweep_operator):
    return Sweeps(api, namespace)


def sweep_manifest(name, values, max_parallel=2, **spec):
    base = {
        "template": {"spec": {"image": "phalanx/runtime:test", "nodes": 1, "procsPerNode": 1,
                              "resources": {"gpus": 1, "cpu": "1", "memory": "1Gi"},
                              "model": {"preset": "debug"}, "training": {"steps": 100, "globalBatchSize": 1},
                              "failurePolicy": {"backoffSeconds": 1}}},
        "parameters": [{"path": "training.lr", "values": values}],
        "maxParallel": max_parallel,
        "earlyStopping": {"rule": "median", "graceSteps": 10, "minTrials": 2},
    }
    base.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingSweep", "metadata": {"name": name}, "spec": base}


def test_trials_owned_max_parallel_early_stop_and_best(cluster, sweeps):
    created = sweeps.create_sweep(sweep_manifest("lr", [0.003, 0.01, 0.001, 0.0003]))
    uid = created["metadata"]["uid"]
    trials = wait_for(lambda: len(t := sweeps.trials("lr")) == 2 and t, 60, "two trials")
    assert set(trials) == {"lr-0", "lr-1"}
    for t in trials.values():
        owner = t["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("TrainingSweep", "lr", uid, True)
        assert t["metadata"]["labels"]["phalanx.dev/sweep"] == "lr"
    assert trials["lr-1"]["spec"]["training"]["lr"] == 0.01
    status = wait_for(lambda: (s := sweeps.sweep_status("lr")).get("runningTrials") == 2 and s, 30, "status")
    assert status["progress"] == "0/4" and status["phase"] == "Running"
    out = cluster.kubectl("get", "tsw", "-n", sweeps.ns).stdout
    assert out.splitlines()[0].split() == ["NAME", "PHASE", "DONE", "RUNNING", "BEST", "VALUE", "AGE"], out
    time.sleep(3)
    assert len(sweeps.trials("lr")) == 2, "never more than maxParallel trials exist unfinished"

    # lr-0 ends: its place goes to lr-2.
    sweeps.finish("lr-0", 100, 3.0)
    wait_for(lambda: "lr-2" in sweeps.trials("lr"), 60, "lr-2 created after lr-0 finished")
    assert len(sweeps.trials("lr")) == 3
    # the sweep creates lr-2 before it writes its status (the best trial): wait for the write
    best = wait_for(lambda: sweeps.sweep_status("lr").get("bestTrial"), 30, "the best trial in status")
    assert best["name"] == "lr-0"

    # lr-2 ahead at step 10, then lr-1 far behind: the median rule stops lr-1 (suspended).
    wait_for(lambda: sweeps.jobs_running("lr-2"), 60, "lr-2 Running")
    sweeps.report("lr-2", 12, 2.5)
    wait_for(lambda: sweeps.record("lr", "lr-2").get("milestones"), 30, "lr-2's milestone recorded")
    wait_for(lambda: sweeps.jobs_running("lr-1"), 60, "lr-1 Running")
    sweeps.report("lr-1", 12, 5.0)
    wait_for(lambda: sweeps.get("lr-1")["spec"].get("suspend") is True, 30, "lr-1 suspended by the sweep")
    rec = wait_for(lambda: (r := sweeps.record("lr", "lr-1")).get("phase") == "Stopped" and r, 60, "lr-1 Stopped")
    assert rec["reason"] == "EarlyStopped" and "median" in rec["message"], rec
    assert sweeps.status("lr-1")["phase"] == "Suspended"
    wait_for(lambda: not sweeps.pods("lr-1"), 60, "lr-1's pods gone (checkpoint kept on SIGTERM)")
    wait_for(lambda: "lr-3" in sweeps.trials("lr"), 60, "lr-3 created in lr-1's place")

    sweeps.finish("lr-2", 100, 2.5)
    sweeps.finish("lr-3", 100, 2.8)
    final = wait_for(lambda: (s := sweeps.sweep_status("lr")).get("phase") == "Succeeded" and s, 90, "sweep Succeeded")
    assert final["progress"] == "4/4" and final["stoppedTrials"] == 1 and final["succeededTrials"] == 3
    assert final["bestTrial"]["name"] == "lr-2" and final["bestTrial"]["value"] == 2.5
    assert final["bestTrial"]["parameters"] == {"training.lr": 0.001}
    conds = {c["type"]: c for c in final["conditions"]}
    assert conds["Succeeded"]["status"] == "True" and conds["Succeeded"]["reason"] == "SweepComplete"
    assert conds["Succeeded"]["observedGeneration"] == 1 and conds["Succeeded"]["lastTransitionTime"]
    reasons = wait_for(lambda: {"TrialCreated", "EarlyStopped", "SweepComplete"} <= (r := {e.reason for e in sweeps.events("lr")}) and r,
                       30, "sweep events")
    assert "NewBestTrial" in reasons


def test_deleting_the_sweep_deletes_its_trials(sweeps):
    sweeps.create_sweep(sweep_manifest("gone", [0.1, 0.2, 0.3], earlyStopping={"rule": "none"}))
    wait_for(lambda: len(sweeps.trials("gone")) == 2, 60, "two trials")
    wait_for(lambda: sweeps.pods("gone-0"), 60, "gone-0 pods")
    sweeps.custom.delete_namespaced_custom_object(GROUP, VERSION, sweeps.ns, SWEEPS, "gone",
                                                  body={"propagationPolicy": "Background"})
    wait_for(lambda: not sweeps.trials("gone"), 90, "trials garbage-collected")
    wait_for(lambda: not sweeps.pods("gone-0") and not sweeps.pods("gone-1"), 90, "their pods garbage-collected")


@pytest.mark.parametrize(("patch", "words"), [
    ({"maxParallel": 0}, "maxParallel"),
    ({"parameters": [{"path": "training.lr", "range": {"min": 1, "max": 0}}], "algorithm": "random", "maxTrials": 2},
     "range.min must be less than range.max"),
    ({"algorithm": "random"}, "algorithm random needs maxTrials"),
    ({"earlyStopping": {"rule": "hyperband"}}, "Unsupported value"),
])
def test_api_server_refuses_bad_sweeps(sweeps, patch, words):
    obj = sweep_manifest("bad", [0.1])
    obj["spec"].update(patch)
    with pytest.raises(ApiException) as err:
        sweeps.create_sweep(obj)
    assert err.value.status == 422 and words in err.value.body, err.value.body


@pytest.mark.parametrize(("parameters", "words"), [
    ([{"path": "training.lrr", "values": [0.1]}], "spec.parameters[0].path: training.lrr: unknown field 'lrr'"),
    ([{"path": "training.lr", "values": [0.1, "fast"]}], "spec.parameters[0].values[1]: training.lr=\"fast\""),
    ([{"path": "parallelism.tensor", "values": [1, 2]}], "spec.parameters[0].values[1]: parallelism.tensor=2"),
])
def test_operator_refuses_sweeps_with_invalid_trials_before_creating_any(sweeps, parameters, words):
    sweeps.create_sweep(sweep_manifest("refused", None, parameters=parameters))
    status = wait_for(lambda: (s := sweeps.sweep_status("refused")).get("phase") == "Failed" and s, 60, "sweep Failed")
    valid = {c["type"]: c for c in status["conditions"]}["Valid"]
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec" and words in valid["message"], valid
    assert not sweeps.trials("refused")
    wait_for(lambda: any(e.reason == "InvalidSpec" and e.type == "Warning" for e in sweeps.events("refused")), 30, "event")


def test_spec_edits_other_than_max_parallel_are_refused(sweeps):
    sweeps.create_sweep(sweep_manifest("frozen", [0.1, 0.2], max_parallel=1, earlyStopping={"rule": "none"}))
    wait_for(lambda: sweeps.trials("frozen"), 60, "a trial")
    with pytest.raises(ApiException) as err:
        sweeps.custom.patch_namespaced_custom_object(GROUP, VERSION, sweeps.ns, SWEEPS, "frozen",
                                                     {"spec": {"objective": {"goal": "maximize"}}})
    assert err.value.status == 422 and "only maxParallel may change" in err.value.body
    sweeps.custom.patch_namespaced_custom_object(GROUP, VERSION, sweeps.ns, SWEEPS, "frozen", {"spec": {"maxParallel": 2}})
    wait_for(lambda: len(sweeps.trials("frozen")) == 2, 60, "maxParallel raised: the second trial")

