"""The pure reconcile: every lifecycle branch, idempotency and crash-replay."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.api.types import FailurePolicy
from phalanx.decision import GangDecision, Observed
from phalanx.gang.pins import pin_affinity, pin_pod, pinned_node
from phalanx.gang.quota import quota_entry
from phalanx.lifecycle.failures import exit_code_retryable
from phalanx.lifecycle.pods import is_gated
from phalanx.lifecycle.reconcile import decide
from phalanx.lifecycle.replacement import INTERRUPTED_AFTER_SECONDS, REFUSED_GRACE_SECONDS

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class Sim:
    """A tiny in-memory 'cluster' that applies plans, so we can replay decide() like the operator."""

    def __init__(self, obj):
        self.obj = copy.deepcopy(obj)
        self.pods: dict[str, dict] = {}
        self.svc = self.cm = self.np = False
        self.now = T0
        self.events: list[tuple[str, str, str]] = []
        self.creates = 0

    cm_hash = None

    def step(self, gang=None, progress=None, apply_status=True, lost_nodes=frozenset(), fits=None):
        observed = Observed(pods=copy.deepcopy(list(self.pods.values())), service_exists=self.svc,
                            config_map_exists=self.cm, network_policy_exists=self.np, progress=progress, lost_nodes=lost_nodes,
                            config_map_hash=self.cm_hash)
        kwargs = {"gang": gang} if gang else {}
        kwargs["fits"] = fits
        plan = decide(copy.deepcopy(self.obj), observed, self.now, **kwargs)
        for name in plan.delete_pods:
            self.pods.pop(name, None)
        for child in plan.create:
            self.creates += 1
            if child["kind"] == "Service":
                self.svc = True
            elif child["kind"] == "ConfigMap":
                self.cm = True
            elif child["kind"] == "NetworkPolicy":
                self.np = True
            else:
                assert child["metadata"]["name"] not in self.pods, "duplicate create"
                self.pods[child["metadata"]["name"]] = copy.deepcopy(child)
        for name in plan.release:
            self.pods[name]["spec"]["schedulingGates"] = []
            if name in plan.pins:
                self.pods[name]["spec"]["affinity"] = pin_affinity(plan.pins[name])
        if plan.status is not None and apply_status:
            self.obj["status"] = plan.status
        self.events += plan.events
        return plan

    @property
    def status(self):
        return self.obj.get("status", {})

    def set_pods(self, phase, ready=True, exit_code=None, reason=None, only=None):
        for pod in self.pods.values():
            if only is not None and pod["metadata"]["labels"][constants.LABEL_NODE_RANK] != str(only):
                continue
            pod["spec"]["nodeName"] = "n-" + pod["metadata"]["labels"][constants.LABEL_NODE_RANK]
            pod["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
            if reason:
                pod["status"]["reason"] = reason
            if exit_code is not None:
                pod["status"]["containerStatuses"] = [{"name": "trainer", "state": {"terminated": {"exitCode": exit_code}}}]

    def run_until_running(self):
        self.step()  # create
        self.step()  # release gates
        self.set_pods("Running")
        self.step()
        assert self.status["phase"] == "Running"


def cond(status, type_):
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_fresh_job_creates_service_configmap_and_all_pods_at_once(job_obj):
    sim = Sim(job_obj)
    plan = sim.step()
    assert [c["kind"] for c in plan.create] == ["Service", "ConfigMap", "Pod", "Pod", "NetworkPolicy"]
    assert sim.status["phase"] == "Pending"
    assert cond(sim.status, "Valid")["status"] == "True"
    assert cond(sim.status, "Created")["reason"] == "CreatingPods"
    assert sim.status["observedGeneration"] == 1
    assert sim.status["nodes"] == "0/2"
    sim.step()
    assert cond(sim.status, "Created")["status"] == "True" and sim.status["attemptCreated"] is True


def test_gates_are_lifted_together_only_when_all_pods_exist(job_obj):
    sim = Sim(job_obj)
    sim.step()
    first = sorted(sim.pods)[0]
    del sim.pods[first]  # as if the operator died after creating one pod
    sim.obj["status"]["attemptCreated"] = False
    plan = sim.step()
    assert plan.release == []  # one pod missing: nobody is released
    assert [c["metadata"]["name"] for c in plan.create] == [first]
    plan = sim.step()
    assert sorted(plan.release) == sorted(sim.pods)
    assert all(not p["spec"]["schedulingGates"] for p in sim.pods.values())
    assert cond(sim.status, "Schedulable")["status"] == "True"


def test_phases_scheduling_running_succeeded(job_obj):
    sim = Sim(job_obj)
    sim.step()
    sim.step()
    assert sim.status["phase"] == "Scheduling"
    sim.set_pods("Running")
    sim.step()
    assert sim.status["phase"] == "Running" and sim.status["nodes"] == "2/2"
    assert sim.status["startTime"] == "2026-11-30T12:00:00Z"
    sim.set_pods("Succeeded", ready=False, exit_code=0)
    sim.now += timedelta(minutes=5)
    sim.step()
    assert sim.status["phase"] == "Succeeded"
    assert cond(sim.status, "Succeeded")["status"] == "True"
    assert sim.status["completionTime"] == "2026-11-30T12:05:00Z"
    assert [e[1] for e in sim.events].count("Running") == 1 and ("Normal", "Succeeded", "all 2 nodes completed") in sim.events


def test_replay_is_idempotent_no_duplicates(job_obj):
    sim = Sim(job_obj)
    for _ in range(5):
        sim.step()
    assert len(sim.pods) == 2 and sim.creates == 5  # Service, ConfigMap, NetworkPolicy, 2 pods


def test_crash_before_status_write_converges(job_obj):
    """Operator dies after creating pods but before writing status: the replay creates nothing twice."""
    sim = Sim(job_obj)
    sim.step(apply_status=False)
    plan = sim.step()
    assert [c["kind"] for c in plan.create] == []  # pods and children already exist (seen via observe)


def test_retryable_failure_restarts_whole_gang_with_backoff(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", exit_code=137, only=1)
    plan = sim.step()
    assert sim.status["phase"] == "Restarting"
    assert sim.status["restarts"] == 1 and sim.status["restartAttempt"] == 1
    assert sorted(plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]
    assert "exited with code 137 (retryable)" in cond(sim.status, "Restarting")["message"]
    assert sim.status["nextRestartTime"] == "2026-11-30T12:00:10Z"
    plan = sim.step()  # within backoff: nothing created
    assert plan.create == [] and plan.requeue_after == pytest.approx(10)
    sim.now += timedelta(seconds=11)
    plan = sim.step()
    assert [c["metadata"]["name"] for c in plan.create] == ["job-node-0-1", "job-node-1-1"]
    assert all(c["metadata"]["labels"][constants.LABEL_RESTART_ATTEMPT] == "1" for c in plan.create)
    sim.step()
    sim.set_pods("Running")
    sim.step()
    assert sim.status["phase"] == "Running"
    assert cond(sim.status, "Restarting")["status"] == "False"


def test_new_gang_waits_for_old_pods_to_go(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", exit_code=143, only=0)
    plan = sim.step()
    # Deletion is in flight: the old pods linger with a deletionTimestamp.
    for name in plan.delete_pods:
        sim.pods[name] = {"metadata": {"name": name, "labels": {constants.LABEL_RESTART_ATTEMPT: "0", constants.LABEL_NODE_RANK: "0"}, "deletionTimestamp": "x"}, "spec": {}, "status": {"phase": "Running"}}
    sim.now += timedelta(seconds=30)
    plan = sim.step()
    assert not [c for c in plan.create if c["kind"] == "Pod"]
    assert cond(sim.status, "Created")["reason"] == "WaitingForOldPods"


def test_permanent_exit_code_fails_without_retry(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", exit_code=1, only=0)
    plan = sim.step()
    assert sim.status["phase"] == "Failed" and sim.status["restarts"] == 0
    assert cond(sim.status, "Failed")["reason"] == "PermanentFailure"
    assert "exited with code 1 (permanent)" in cond(sim.status, "Failed")["message"]
    assert plan.delete_pods == ["job-node-1-0"]  # the survivor is stopped


def test_exit_code_lists_override_the_default_classification(job_obj):
    job_obj["spec"]["failurePolicy"] = {"retryableExitCodes": [3], "permanentExitCodes": [137]}
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", exit_code=3, only=0)
    sim.step()
    assert sim.status["phase"] == "Restarting"
    policy = FailurePolicy(permanent_exit_codes=[137])
    assert not exit_code_retryable(137, policy) and exit_code_retryable(143, policy) and not exit_code_retryable(2, policy)


def test_max_restarts_exceeded_fails_with_message(job_obj):
    job_obj["spec"]["failurePolicy"] = {"maxRestarts": 1, "backoffSeconds": 0}
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", exit_code=137)
    sim.step()
    assert sim.status["phase"] == "Restarting"
    sim.run_until_running()
    sim.set_pods("Failed", exit_code=137)
    sim.step()
    assert sim.status["phase"] == "Failed"
    msg = cond(sim.status, "Failed")["message"]
    assert cond(sim.status, "Failed")["reason"] == "MaxRestartsExceeded"
    assert msg.startswith("restarted 1 times (maxRestarts 1); last failure: pod job-node-0-1 (node-rank 0) exited with code 137")


def test_evicted_and_lost_pods_are_retryable(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", reason="Evicted", only=1)
    sim.step()
    assert cond(sim.status, "Restarting")["reason"] == "Evicted"
    sim2 = Sim(job_obj)
    sim2.run_until_running()
    del sim2.pods["job-node-1-0"]  # node gone, pod garbage-collected
    sim2.step()
    assert sim2.status["phase"] == "Restarting"
    assert cond(sim2.status, "Restarting")["reason"] == "PodLost"


def test_hang_detection_restarts(job_obj):
    job_obj["spec"]["failurePolicy"] = {"hangTimeoutSeconds": 60}
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 5, "loss": 3.2})
    sim.now += timedelta(seconds=30)
    sim.step(progress={"step": 5, "loss": 3.2})
    assert sim.status["phase"] == "Running"
    sim.now += timedelta(seconds=61)
    sim.step(progress={"step": 5, "loss": 3.2})
    assert sim.status["phase"] == "Restarting"
    assert cond(sim.status, "Restarting")["reason"] == "Hang"
    # The new gang gets a fresh hang clock.
    sim.now += timedelta(seconds=11)
    sim.run_until_running()
    sim.now += timedelta(seconds=30)
    sim.step()
    assert sim.status["phase"] == "Running"


def test_progress_is_reported(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 25, "loss": 2.5, "tokensPerSecond": 1234.56, "stepTimeSeconds": 0.5,
                       "lastCheckpoint": {"step": 20, "path": "/ckpt/step-20"}})
    s = sim.status
    assert (s["step"], s["loss"], s["tokensPerSecond"], s["progressPercentage"]) == (25, 2.5, 1234.6, 25)
    assert s["estimatedRemainingSeconds"] == 37 and s["lastCheckpoint"]["step"] == 20


def test_suspend_deletes_pods_and_resume_makes_a_new_gang(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.obj["spec"]["suspend"] = True
    plan = sim.step()
    assert sorted(plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]
    assert sim.status["phase"] == "Suspended" and cond(sim.status, "Suspended")["status"] == "True"
    assert sim.step().create == []
    sim.obj["spec"]["suspend"] = False
    plan = sim.step()
    assert sim.status["restartAttempt"] == 1 and sim.status["restarts"] == 0
    assert [c["metadata"]["name"] for c in plan.create if c["kind"] == "Pod"] == ["job-node-0-1", "job-node-1-1"]


def test_suspended_at_creation_creates_no_pods(job_obj):
    job_obj["spec"]["suspend"] = True
    sim = Sim(job_obj)
    plan = sim.step()
    assert not [c for c in plan.create if c["kind"] == "Pod"] and sim.status["phase"] == "Suspended"


def test_active_deadline(job_obj):
    job_obj["spec"]["activeDeadlineSeconds"] = 60
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.now += timedelta(seconds=59)
    assert sim.step().requeue_after == pytest.approx(1)
    sim.now += timedelta(seconds=2)
    plan = sim.step()
    assert sim.status["phase"] == "Failed" and cond(sim.status, "Failed")["reason"] == "DeadlineExceeded"
    assert len(plan.delete_pods) == 2


def test_ttl_after_finished_deletes_the_job(job_obj):
    job_obj["spec"]["ttlSecondsAfterFinished"] = 30
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Succeeded", exit_code=0)
    sim.step()
    assert sim.step().delete_job is False
    sim.now += timedelta(seconds=31)
    assert sim.step().delete_job is True


def test_invalid_spec_fails_creates_nothing(job_obj):
    job_obj["spec"]["parallelism"] = {"tensor": 3}
    sim = Sim(job_obj)
    plan = sim.step()
    assert plan.create == [] and sim.status["phase"] == "Failed"
    valid = cond(sim.status, "Valid")
    assert valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.parallelism" in valid["message"]
    assert any(e[0] == "Warning" and e[1] == "InvalidSpec" for e in sim.events)
    again = sim.step()
    assert again.status is None and again.events == []  # stable: no churn, no event storm


def test_unschedulable_gang_waits_then_times_out(job_obj):
    job_obj["spec"]["scheduling"] = {"gangTimeoutSeconds": 60, "onGangTimeout": "Fail"}
    sim = Sim(job_obj)
    sim.step()
    no = GangDecision(release=False, schedulable=False, reason="InsufficientCapacity", message="needs 2 nodes with 8 free nvidia.com/gpu; 1 fits")
    sim.step(gang=lambda job, pods: no)
    assert cond(sim.status, "Schedulable")["status"] == "False"
    assert cond(sim.status, "Schedulable")["message"] == "needs 2 nodes with 8 free nvidia.com/gpu; 1 fits"
    sim.now += timedelta(seconds=61)
    sim.step(gang=lambda job, pods: no)
    assert sim.status["phase"] == "Failed" and cond(sim.status, "Failed")["reason"] == "GangTimeout"


def test_gang_pins_pods_to_planned_nodes(job_obj):
    sim = Sim(job_obj)
    sim.step()
    pins = {"job-node-0-0": "node-a", "job-node-1-0": "node-b"}
    plan = sim.step(gang=lambda job, pods: GangDecision(release=True, pins=pins, placement={"nodes": ["node-a", "node-b"], "span": {"block": 1}}))
    assert plan.pins == pins
    assert pinned_node(sim.pods["job-node-1-0"]["spec"]) == "node-b"
    assert sim.status["placement"]["nodes"] == ["node-a", "node-b"]


def test_stale_attempt_pods_are_deleted(job_obj):
    sim = Sim(job_obj)
    sim.step()
    sim.obj["status"]["restartAttempt"] = 2
    plan = sim.step()
    assert sorted(plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]


def test_node_lost_restarts_gang(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    plan = sim.step(lost_nodes=frozenset({"n-1"}))
    assert sim.status["phase"] == "Restarting"
    restarting = cond(sim.status, "Restarting")
    assert restarting["reason"] == "NodeLost" and "node n-1 is gone or NotReady" in restarting["message"]
    assert sorted(plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]


def test_released_gang_not_bound_in_time_is_replanned(job_obj):
    sim = Sim(job_obj)
    sim.step()
    sim.step(gang=lambda job, pods: GangDecision(release=True, pins={"job-node-0-0": "a", "job-node-1-0": "b"}))
    sim.now += timedelta(seconds=119)
    assert sim.step().delete_pods == []
    sim.now += timedelta(seconds=2)
    plan = sim.step()
    assert sorted(plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]
    assert sim.status["restartAttempt"] == 1 and sim.status["restarts"] == 0
    assert cond(sim.status, "Schedulable")["reason"] == "Replanning"
    plan = sim.step()
    assert [c["metadata"]["name"] for c in plan.create if c["kind"] == "Pod"] == ["job-node-0-1", "job-node-1-1"]
    assert cond(sim.status, "Schedulable")["status"] == "Unknown"
    sim.step(gang=lambda job, pods: GangDecision(release=True))
    sim.now += timedelta(seconds=60)
    assert sim.step().delete_pods == []  # the new gang has its own bind clock


def _elastic_job(job_obj):
    job_obj["spec"].update(nodes=4, procsPerNode=4, elastic={"minNodes": 2, "maxNodes": 4, "replaceTimeoutSeconds": 30},
                           training={"globalBatchSize": 48})
    return job_obj


def test_elastic_shrinks_when_the_gang_cannot_be_placed(job_obj):
    sim = Sim(_elastic_job(job_obj))
    sim.step()
    no_room = GangDecision(release=False, schedulable=False, reason="Insufficient", message="needs 4 nodes; 3 fit")
    def fits(job):
        return job.spec.nodes <= 3
    plan = sim.step(gang=lambda job, pods: no_room, fits=fits)
    assert plan.delete_pods == [] and sim.status["activeNodes"] == 4
    sim.now += timedelta(seconds=31)
    plan = sim.step(gang=lambda job, pods: no_room, fits=fits)
    assert sorted(plan.delete_pods) == [f"job-node-{r}-0" for r in range(4)]
    assert sim.status["activeNodes"] == 3 and sim.status["restartAttempt"] == 1 and sim.status["restarts"] == 0
    assert "resizing the gang from 4 to 3 nodes" in sim.status["message"]
    sim.cm_hash = "stale"
    plan = sim.step(fits=fits)
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["job-node-0-1", "job-node-1-1", "job-node-2-1"]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["NNODES"] == "3" and env["WORLD_SIZE"] == "12"
    import json
    (cm,) = plan.update
    assert json.loads(cm["data"]["config.json"])["spec"]["nodes"] == 3
    assert sim.status["nodes"] == "0/3"


def test_elastic_grows_back_when_capacity_returns(job_obj):
    job_obj = _elastic_job(job_obj)
    job_obj["status"] = {"activeNodes": 2}
    sim = Sim(job_obj)
    sim.run_until_running()
    assert len(sim.pods) == 2
    grow = sim.step(fits=lambda job: True)
    assert grow.delete_pods == []  # not before replaceTimeoutSeconds at this size
    sim.now += timedelta(seconds=31)
    plan = sim.step(fits=lambda job: job.spec.nodes <= 3)
    assert sorted(plan.delete_pods) == ["job-node-0-0", "job-node-1-0"]
    assert sim.status["activeNodes"] == 3 and "capacity returned" in sim.status["message"]


def test_recreated_job_never_adopts_its_predecessors_pods(job_obj):
    """Delete a running job and create one with the same name: the old pods (same names, still
    terminating with their checkpoint save) are another controller's; nothing is created or
    counted until they are gone, then a fresh gang starts at attempt 0."""
    old = Sim(job_obj)
    old.run_until_running()
    sim = Sim({**job_obj, "metadata": {**job_obj["metadata"], "uid": "uid-2"}})
    sim.pods = copy.deepcopy(old.pods)
    for pod in sim.pods.values():
        pod["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    sim.svc = sim.cm = True
    plan = sim.step(progress={"step": 7, "loss": 3.0})
    assert [c for c in plan.create if c["kind"] == "Pod"] == [] and plan.delete_pods == [] and plan.release == []
    assert "waiting for 2 pods of an earlier job" in sim.status["message"]
    assert sim.status.get("step") is None and sim.status["phase"] != "Running"
    sim.pods.clear()
    plan = sim.step()
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    assert len(pods) == 2 and all(p["metadata"]["ownerReferences"][0]["uid"] == "uid-2" for p in pods)


def test_final_progress_comes_from_rank0_termination_message(job_obj):
    """The last poll may miss the last steps; rank 0's termination message has the final ones."""
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 27, "loss": 2.9})
    sim.set_pods("Succeeded", ready=False, exit_code=0)
    final = '{"step": 30, "totalSteps": 30, "loss": 2.5, "tokensPerSecond": 900.0, "lastCheckpoint": {"step": 30, "path": "/c/step-30"}}'
    for pod in sim.pods.values():
        if pod["metadata"]["labels"][constants.LABEL_NODE_RANK] == "0":
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = final
    sim.step()
    assert sim.status["phase"] == "Succeeded"
    assert (sim.status["step"], sim.status["loss"], sim.status["lastCheckpoint"]["step"]) == (30, 2.5, 30)
    assert sim.status["progressPercentage"] == min(100, 100 * 30 // sim.status["totalSteps"])


def test_unparseable_termination_message_is_ignored(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 5, "loss": 4.0})
    sim.set_pods("Failed", ready=False, exit_code=137)
    for pod in sim.pods.values():
        pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = "Killed\n"
    sim.step()
    assert sim.status["step"] == 5


# --- Untrusted progress and checkpoint provenance ---------------------------------------------


def _finish_rank0(sim, message):
    sim.set_pods("Succeeded", ready=False, exit_code=0)
    for pod in sim.pods.values():
        if pod["metadata"]["labels"][constants.LABEL_NODE_RANK] == "0":
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message


def test_nan_loss_is_reported_not_written(job_obj):
    """A diverged run: the status patch stays valid JSON (a NaN made every later patch fail, so the
    status froze), LossNotFinite says why, one Warning Event; a finite loss clears the condition."""
    import json

    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 4, "loss": 3.0})
    for step in (5, 6):
        plan = sim.step(progress=b'{"step": %d, "loss": NaN}' % step)
        json.dumps(plan.status, allow_nan=False)
    assert sim.status["step"] == 6 and "loss" not in sim.status
    c = cond(sim.status, constants.COND_LOSS_NOT_FINITE)
    assert (c["status"], c["reason"]) == ("True", "LossNotFinite") and "nan" in c["message"] and "step 6" in c["message"]
    assert [e for e in sim.events if e[1] == "LossNotFinite"] == [("Warning", "LossNotFinite", c["message"].replace("6", "5"))]
    sim.step(progress={"step": 7, "loss": 2.0})
    assert sim.status["loss"] == 2.0 and cond(sim.status, constants.COND_LOSS_NOT_FINITE)["status"] == "False"


def test_nan_final_loss_still_writes_the_final_phase(job_obj):
    import json

    sim = Sim(job_obj)
    sim.run_until_running()
    _finish_rank0(sim, '{"step": 30, "loss": NaN, "lastCheckpoint": {"step": 30, "path": "/c/step-30"}}')
    plan = sim.step()
    json.dumps(plan.status, allow_nan=False)
    assert sim.status["phase"] == "Succeeded" and sim.status["step"] == 30 and "loss" not in sim.status
    assert cond(sim.status, constants.COND_LOSS_NOT_FINITE)["status"] == "True"
    assert sim.step().status is None  # converged: nothing more to write (NaN != NaN rewrote it forever)


def test_hostile_termination_message_never_stops_the_reconcile(job_obj):
    """json.loads recursed on '[[[…' and raised RecursionError out of decide() on every pass."""
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 5})
    _finish_rank0(sim, "[" * 100_000)
    sim.step()
    assert sim.status["phase"] == "Succeeded" and sim.status["step"] == 5


def test_failure_and_deadline_checks_do_not_depend_on_progress(job_obj):
    job_obj["spec"]["activeDeadlineSeconds"] = 60
    hostile = {"step": 5, "loss": "x", "lastCheckpoint": {"step": [], "path": {}}, "stepTimeSeconds": 1e308}
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.now += timedelta(seconds=61)
    sim.step(progress=hostile)
    assert cond(sim.status, "Failed")["reason"] == "DeadlineExceeded" and sim.status["step"] == 5
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.set_pods("Failed", ready=False, exit_code=137, only=1)
    sim.step(progress=hostile)
    assert sim.status["phase"] == "Restarting" and sim.status["step"] == 5


def test_a_step_reported_in_the_same_pass_is_not_a_hang(job_obj):
    """Progress is applied after the failure checks; a step that just advanced still counts."""
    job_obj["spec"]["failurePolicy"] = {"hangTimeoutSeconds": 60}
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 5})
    sim.now += timedelta(seconds=90)  # no report got through for a while (polls failed)
    sim.step(progress={"step": 40})
    assert sim.status["phase"] == "Running" and sim.status["step"] == 40


def test_resuming_a_predecessors_checkpoint_is_said(job_obj):
    """A job re-created under the same name resumed the checkpoint its predecessor (another uid)
    wrote: a condition, the status message and one Event say so; its own uid is not news."""
    job_obj["metadata"]["uid"] = "uid-new"
    sim = Sim(job_obj)
    sim.run_until_running()
    sim.step(progress={"step": 20, "resumedFrom": {"uid": "uid-new", "step": 10}})
    assert not [e for e in sim.events if e[1] == "ResumedFromPredecessor"]
    for _ in range(2):
        sim.step(progress={"step": 21, "resumedFrom": {"uid": "uid-old", "step": 20}})
    c = cond(sim.status, constants.COND_RESUMED_FROM_PREDECESSOR)
    assert c["status"] == "True" and "uid-old" in c["message"] and "step 20" in c["message"]
    assert "uid-old" in sim.status["message"] and sim.status["message"].count("uid-old") == 1
    assert [e[0] for e in sim.events if e[1] == "ResumedFromPredecessor"] == ["Normal"]


# -------------------------------------------------------------------------------------------------
# Create-pinned: a new native gang placed before any pod exists is created already pinned and
# ungated (one request per pod, no release pass); whatever goes wrong on the way falls back to
# the gated path, and a part-created pinned gang never starts without its peers.


PINS = {"job-node-0-0": "node-a", "job-node-1-0": "node-b"}
PLACED = GangDecision(release=True, pins=PINS, message="placed on 2 nodes (block=1)",
                      placement={"nodes": ["node-a", "node-b"], "span": {"block": 1}})
NO_ROOM = GangDecision(release=False, schedulable=False, reason="Insufficient", message="needs 2 nodes; 1 fits")


class Step:
    """A gang step that records what it was asked."""

    def __init__(self, answer: GangDecision):
        self.answer, self.calls = answer, []

    def __call__(self, job, pods):
        self.calls.append(sorted(p["metadata"]["name"] for p in pods))
        return self.answer


def pods_of(plan):
    return [c for c in plan.create if c["kind"] == "Pod"]


def test_pin_pod_is_what_a_release_patch_makes_of_a_gated_pod():
    pod = {"spec": {"schedulingGates": [{"name": constants.GANG_SCHEDULING_GATE}]}}
    pin_pod(pod, "node-a")
    assert pod["spec"] == {"affinity": pin_affinity("node-a")} and pinned_node(pod["spec"]) == "node-a"
    other = {"spec": {"schedulingGates": [{"name": "example.com/other"}, {"name": constants.GANG_SCHEDULING_GATE}]}}
    pin_pod(other, "n")
    assert other["spec"]["schedulingGates"] == [{"name": "example.com/other"}]  # someone else's gate stays


def test_a_placed_gang_is_created_pinned_and_ungated(job_obj):
    sim, step = Sim(job_obj), Step(PLACED)
    plan = sim.step(gang=step)
    assert step.calls == [["job-node-0-0", "job-node-1-0"]]  # planned once, with every pod, before any exists
    assert {p["metadata"]["name"]: pinned_node(p["spec"]) for p in pods_of(plan)} == PINS
    assert not any(is_gated(p) for p in pods_of(plan)) and plan.release == []
    assert plan.pins == PINS and plan.dry_run  # bad input is still refused before anything exists
    schedulable = cond(sim.status, "Schedulable")
    assert (schedulable["status"], schedulable["reason"], schedulable["message"]) == ("True", "Placed", PLACED.message)
    assert sim.status["placement"]["nodes"] == ["node-a", "node-b"]
    assert any("pinned to their nodes" in e[2] for e in sim.events if e[1] == "Creating")
    # the next pass sees every pod: created, nothing to release, no second plan
    again = sim.step(gang=step)
    assert again.release == [] and again.create == [] and len(step.calls) == 1
    assert sim.status["attemptCreated"] is True and cond(sim.status, "Schedulable")["reason"] == "Placed"


def test_a_gang_that_does_not_fit_now_is_created_gated_and_placed_later(job_obj):
    sim, step = Sim(job_obj), Step(NO_ROOM)
    plan = sim.step(gang=step)
    assert len(step.calls) == 1 and all(is_gated(p) and pinned_node(p["spec"]) is None for p in pods_of(plan))
    assert plan.pins == {} and cond(sim.status, "Schedulable")["status"] == "Unknown"
    step.answer = PLACED  # capacity freed: the ordinary release path pins and releases
    release = sim.step(gang=step)
    assert sorted(release.release) == sorted(PINS) and release.pins == PINS


def test_create_pinned_off_keeps_the_gated_path(job_obj):
    step = Step(PLACED)
    observed = Observed(pods=[], service_exists=False, config_map_exists=False)
    plan = decide(job_obj, observed, Sim(job_obj).now, OperatorConfig(create_pinned=False), gang=step)
    assert step.calls == [] and all(is_gated(p) for p in pods_of(plan)) and plan.pins == {}


def test_other_backends_are_never_planned_at_create(job_obj):
    for backend in ("volcano", "coscheduling", "kueue"):
        obj = {**job_obj, "spec": {**job_obj["spec"], "scheduling": {"backend": backend}}}
        step = Step(PLACED)
        plan = Sim(obj).step(gang=step)
        assert step.calls == [] and all(pinned_node(p["spec"]) is None for p in pods_of(plan)), backend


def test_only_a_whole_new_gang_is_created_pinned(job_obj):
    """Pods missing from a gated gang (one was deleted before release) are created gated: the
    gang is placed as a whole once every pod exists."""
    sim, step = Sim(job_obj), Step(PLACED)
    sim.step()  # gated (default gang step)
    del sim.pods["job-node-1-0"]
    plan = sim.step(gang=step)
    assert step.calls == [] and [p["metadata"]["name"] for p in pods_of(plan)] == ["job-node-1-0"]
    assert is_gated(pods_of(plan)[0])


def _part_created(job_obj, refused: bool):
    """A pinned gang of which only the first pod was created."""
    sim = Sim(job_obj)
    sim.step(gang=Step(PLACED))
    del sim.pods["job-node-1-0"]
    sim.obj["status"]["attemptCreated"] = False
    if refused:  # what refused_status writes after a retryable refusal
        for c in sim.obj["status"]["conditions"]:
            if c["type"] == "Created":
                c["reason"] = constants.Reason.CREATE_REFUSED
    return sim


def test_a_refused_pinned_creation_is_recreated_behind_the_gate(job_obj):
    sim = _part_created(job_obj, refused=True)
    sim.pods["job-node-0-0"]["metadata"]["creationTimestamp"] = sim.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    step = Step(PLACED)
    sim.now += timedelta(seconds=5)  # the refusal on record: only a short grace for the index
    assert sim.step(gang=step).delete_pods == []
    sim.now += timedelta(seconds=REFUSED_GRACE_SECONDS)
    plan = sim.step(gang=step)
    assert plan.delete_pods == ["job-node-0-0"] and plan.create == [] and step.calls == []
    assert sim.status["restartAttempt"] == 1 and sim.status.get("restarts", 0) == 0  # not a failure
    assert cond(sim.status, "Schedulable")["reason"] == "PinnedCreateInterrupted" and sim.status["phase"] == "Pending"
    assert any(e[0] == "Warning" and e[1] == "PinnedCreateInterrupted" for e in sim.events)
    plan = sim.step(gang=step)  # the new attempt: gated, not planned until every pod exists
    assert step.calls == [] and [p["metadata"]["name"] for p in pods_of(plan)] == ["job-node-0-1", "job-node-1-1"]
    assert all(is_gated(p) for p in pods_of(plan))
    release = sim.step(gang=step)
    assert sorted(release.release) == ["job-node-0-1", "job-node-1-1"]


def test_a_part_created_pinned_gang_gets_time_for_the_index_to_catch_up(job_obj):
    """No refusal on record (an API error, an operator restart, or a watch that lags): wait
    INTERRUPTED_AFTER_SECONDS from the newest pod, creating nothing, then recreate."""
    sim = _part_created(job_obj, refused=False)
    sim.pods["job-node-0-0"]["metadata"]["creationTimestamp"] = sim.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    sim.now += timedelta(seconds=10)
    plan = sim.step(gang=Step(PLACED))
    assert plan.delete_pods == [] and plan.create == []
    assert plan.requeue_after == INTERRUPTED_AFTER_SECONDS - 10
    sim.now += timedelta(seconds=INTERRUPTED_AFTER_SECONDS)
    plan = sim.step(gang=Step(PLACED))
    assert plan.delete_pods == ["job-node-0-0"] and cond(sim.status, "Schedulable")["reason"] == "PinnedCreateInterrupted"


def test_a_gated_gang_part_created_is_left_to_the_gated_path(job_obj):
    sim = Sim(job_obj)
    sim.step()
    del sim.pods["job-node-1-0"]
    sim.now += timedelta(seconds=INTERRUPTED_AFTER_SECONDS * 2)
    plan = sim.step(gang=Step(PLACED))
    assert plan.delete_pods == [] and [p["metadata"]["name"] for p in pods_of(plan)] == ["job-node-1-0"]


def test_a_pinned_gang_not_bound_in_time_is_replanned(job_obj):
    """The bind clock of a pinned creation starts at its placement, as a release's does."""
    sim = Sim(job_obj)
    sim.step(gang=Step(PLACED))
    sim.now += timedelta(seconds=OperatorConfig().bind_timeout_seconds + 1)
    plan = sim.step()
    assert sorted(plan.delete_pods) == sorted(PINS) and cond(sim.status, "Schedulable")["reason"] == "Replanning"


def _execute(plan, refuse_after: int | None):
    """Kube.execute against a fake core API that refuses (403 quota) every pod after the first
    ``refuse_after``; returns (refusals, released calls, pods created)."""
    import asyncio

    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from phalanx.kube import Kube

    created, calls = [], []

    class Response:
        data = b"{}"

        def release_conn(self):
            pass

    class Core:
        def create_namespaced_pod(self, namespace, body, _preload_content, **_):
            if refuse_after is not None and len(created) >= refuse_after:
                raise ApiException(status=403, reason='pods "x" is forbidden: exceeded quota: q')
            created.append(body["metadata"]["name"])
            return Response()

        create_namespaced_service = create_namespaced_config_map = None  # only pods are created here

    async def main():
        kube = Kube(client.ApiClient(), concurrency=4)
        kube.core = Core()
        return await kube.execute("team", plan, None, "job", released=calls.append)

    return asyncio.run(main()), calls, created


def test_a_pinned_creation_books_its_pins_as_written_or_void(job_obj):
    plan = Sim(job_obj).step(gang=Step(PLACED))
    plan.create, plan.status, plan.dry_run = pods_of(plan), None, False
    refusals, calls, created = _execute(plan, refuse_after=None)
    assert refusals == [] and calls == [True] and sorted(created) == sorted(PINS)
    refusals, calls, created = _execute(plan, refuse_after=1)
    assert [r.code for r in refusals] == [403] and calls == [False] and created == ["job-node-0-0"]
    gated = Sim(job_obj).step()  # a gated creation books nothing
    gated.create, gated.status, gated.dry_run = pods_of(gated), None, False
    assert _execute(gated, refuse_after=None)[1] == []


def test_a_gang_the_namespace_quota_might_refuse_part_way_is_created_gated(job_obj):
    tight = quota_entry({"metadata": {"name": "q"}, "status": {"hard": {"pods": "3"}, "used": {"pods": "2"}}})
    roomy = quota_entry({"metadata": {"name": "q"}, "status": {"hard": {"pods": "3"}, "used": {"pods": "1"}}})
    for quotas, pinned in (((tight,), False), ((roomy,), True)):
        step = Step(PLACED)
        observed = Observed(pods=[], service_exists=False, config_map_exists=False, quotas=quotas)
        plan = decide(job_obj, observed, Sim(job_obj).now, gang=step)
        assert (plan.pins == PINS) is pinned and all(is_gated(p) is not pinned for p in pods_of(plan))
        assert step.calls == ([["job-node-0-0", "job-node-1-0"]] if pinned else [])


def test_a_pinned_creation_stopped_by_its_dry_run_or_an_api_error_books_nothing(job_obj):
    import asyncio

    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from phalanx.kube import Kube

    plan = Sim(job_obj).step(gang=Step(PLACED))
    calls = []

    class Core:
        def __init__(self, error):
            self.error = error

        def create_namespaced_service(self, *a, **kw):
            raise self.error

        create_namespaced_config_map = create_namespaced_pod = create_namespaced_network_policy = create_namespaced_service

    for error, raised in ((ApiException(status=403, reason="exceeded quota"), False), (ApiException(status=500), True)):
        async def main(error=error):
            kube = Kube(client.ApiClient(), concurrency=4)
            kube.core = kube.networking = Core(error)
            return await kube.execute("team", plan, None, "job", released=calls.append)

        try:
            assert {r.code for r in asyncio.run(main())} == {403}  # the dry run of each kind
        except ApiException:
            assert raised
        assert calls.pop() is False and calls == []


def test_a_gang_step_that_pins_only_some_pods_creates_the_gang_gated(job_obj):
    partial = GangDecision(release=True, pins={"job-node-0-0": "node-a"})
    plan = Sim(job_obj).step(gang=Step(partial))
    assert plan.pins == {} and all(is_gated(p) for p in pods_of(plan))


def _stamp(sim):
    """Creation timestamps, as the API server sets them, on the pods the Sim created."""
    for pod in sim.pods.values():
        pod["metadata"].setdefault("creationTimestamp", sim.now.strftime("%Y-%m-%dT%H:%M:%SZ"))


@pytest.mark.parametrize("how", ["restart", "resume"])
def test_a_new_pinned_gang_gets_its_own_bind_clock(job_obj, how):
    """Schedulable stays True across a restart or a resume (no flip, no new transition time): the
    bind clock of a gang created pinned runs from its newest pod, not from an earlier placement."""
    sim = Sim(job_obj)
    sim.step(gang=Step(PLACED))
    _stamp(sim)
    sim.set_pods("Running")
    sim.step()
    sim.now += timedelta(hours=1)
    if how == "restart":
        sim.set_pods("Failed", exit_code=137, only=0)  # OOM-killed: retryable
    else:
        sim.obj["spec"]["suspend"] = True
        sim.step()
        sim.obj["spec"]["suspend"] = False
    for _ in range(6):  # restart/resume, the backoff, the new attempt's pinned creation
        if sim.pods and not set(sim.pods) & set(PINS):
            break
        sim.now += timedelta(seconds=30)
        sim.step(gang=lambda job, pods: GangDecision(release=True, message="placed",
                                                     pins={p["metadata"]["name"]: f"n{i}" for i, p in enumerate(pods)}))
        _stamp(sim)
    new = sorted(sim.pods)
    assert len(new) == 2 and not set(new) & set(PINS), (new, sim.status.get("phase"))  # a new attempt's gang
    assert all(pinned_node(p["spec"]) for p in sim.pods.values()) and cond(sim.status, "Schedulable")["status"] == "True"
    for pod in sim.pods.values():
        pod["spec"].pop("nodeName", None)
        pod["status"] = {"phase": "Pending"}
    sim.now += timedelta(seconds=10)
    assert sim.step().delete_pods == []  # bound late, but its own clock has 110 s left
    sim.now += timedelta(seconds=OperatorConfig().bind_timeout_seconds)
    assert sorted(sim.step().delete_pods) == sorted(new)
