import copy
from datetime import UTC, datetime, timedelta

import pytest

from phalanx import constants
from phalanx.api.config import TopologyConfig
from phalanx.backends import apply_mutation
from phalanx.backends.kueue import Admission, admission, render, withdrawal, workload_name
from phalanx.decision import Schedulable
from phalanx.lifecycle.reconcile import Observed, decide
from phalanx.lifecycle.resume import FROM_CHECKPOINT, FROM_STEP_ZERO
from tests.unit.phalanx.backends.fixtures import job, pod

LEVELS = TopologyConfig().resolved_levels


def test_pod_group_labels_and_tas():
    r = render(job(scheduling={"backend": "kueue", "queue": "lq", "topology": {"required": "block"}}), levels=LEVELS)
    assert r.objects == [] and r.errors == []
    out = apply_mutation(pod(), r.pod)
    assert out["metadata"]["labels"] == {"a": "b", "kueue.x-k8s.io/pod-group-name": "llm", "kueue.x-k8s.io/queue-name": "lq"}
    assert out["metadata"]["annotations"] == {"kueue.x-k8s.io/pod-group-total-count": "4",
                                              "kueue.x-k8s.io/podset-required-topology": "phalanx.dev/topology-block"}
    assert "schedulingGates" not in out["spec"] and "schedulerName" not in out["spec"]


def test_preferred_and_missing_queue():
    r = render(job(scheduling={"backend": "kueue", "topology": {"preferred": "cloud.google.com/gce-topology-block"}}),
               levels=LEVELS, group_name="llm-attempt-2")
    assert r.errors == ["scheduling.queue: backend kueue needs a LocalQueue name"]
    assert r.pod.labels == {"kueue.x-k8s.io/pod-group-name": "llm-attempt-2"}
    assert r.pod.annotations["kueue.x-k8s.io/podset-preferred-topology"] == "cloud.google.com/gce-topology-block"


def test_kueue_gate_left_to_kueue():
    p = pod()
    p["spec"]["schedulingGates"].append({"name": "kueue.x-k8s.io/admission"})
    out = apply_mutation(p, render(job(scheduling={"backend": "kueue", "queue": "q"})).pod)
    assert out["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]


# -------------------------------------------------------------------------------------------------
# Kueue's view of a gang mirrored into the Schedulable condition (backends.kueue.admission), and
# the reconcile's preemption path (Kueue evicts the gang → a new queued attempt, no restart counted).
# The Workload shapes are Kueue v0.17.0's (kueue.x-k8s.io/v1beta2), as the integration tests see them.


GATE = {"name": "kueue.x-k8s.io/admission"}


def wl(*conds, active=None, admission_=None, name="llm"):
    obj = {"metadata": {"name": name}, "spec": {}, "status": {"conditions": list(conds)}}
    if active is not None:
        obj["spec"]["active"] = active
    if admission_ is not None:
        obj["status"]["admission"] = admission_
    return obj


def cond(type_, status, reason="", message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message}


def gated_pod(name="llm-0"):
    return {"metadata": {"name": name, "labels": {constants.LABEL_KUEUE_POD_GROUP_NAME: "llm-g"}}, "spec": {"schedulingGates": [GATE]}, "status": {}}


PENDING_MSG = "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 16 more needed"


def test_no_workload_yet():
    assert admission(None, []) is None
    a = admission(None, [gated_pod()])
    assert (a.status, a.reason) == ("Unknown", "WaitingForKueue") and "kueue.x-k8s.io/admission" in a.message
    assert admission(None, [{"metadata": {"name": "x"}, "spec": {}}]) is None  # ungated, no workload: nothing to say


def test_pending_mirrors_kueue_reason_and_message():
    a = admission(wl(cond("QuotaReserved", "False", "Pending", PENDING_MSG)), [gated_pod()])
    assert a == Admission("False", "Pending", f"Kueue: {PENDING_MSG}")
    assert a.condition() == Schedulable("False", "Pending", f"Kueue: {PENDING_MSG}") and a.eviction() is None
    inad = admission(wl(cond("QuotaReserved", "False", "Inadmissible", "ClusterQueue cq is inactive")), [])
    assert (inad.status, inad.reason) == ("False", "Inadmissible")


def test_admitted_with_tas_summary():
    adm = {"clusterQueue": "cq", "podSetAssignments": [{
        "name": "main", "count": 4,
        "topologyAssignment": {"levels": ["phalanx.dev/topology-rack", "kubernetes.io/hostname"], "slices": [{
            "domainCount": 4,
            "valuesPerLevel": [{"universal": "b0-s0-r0"}, {"individual": {"prefix": "n", "roots": ["1", "2", "3", "4"]}}],
            "podCounts": {"universal": 1}}]}}]}
    a = admission(wl(cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"), admission_=adm), [])
    assert (a.status, a.reason) == ("True", "Admitted")
    assert "ClusterQueue cq" in a.message and "4 nodes in 4 kubernetes.io/hostname domains" in a.message
    v1 = {"clusterQueue": "cq", "podSetAssignments": [{"topologyAssignment": {
        "levels": ["kubernetes.io/hostname"], "domains": [{"values": ["n1"], "count": 1}, {"values": ["n2"], "count": 1}]}}]}
    assert "2 nodes in 2" in admission(wl(cond("Admitted", "True"), admission_=v1), []).message


def test_quota_reserved_waiting_for_checks():
    a = admission(wl(cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")), [])
    assert (a.status, a.reason) == ("Unknown", "QuotaReserved")


def test_evicted_is_mirrored_and_flagged():
    ev = cond("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: u2) due to prioritization in the ClusterQueue")
    a = admission(wl(ev, cond("QuotaReserved", "False", "Pending", PENDING_MSG), cond("Admitted", "False")), [])
    assert (a.status, a.reason, a.evicted) == ("False", "Preempted", True)
    assert "Kueue evicted Workload llm (Preempted)" in a.message and f"requeued: {PENDING_MSG}" in a.message
    assert a.eviction() == ("Preempted", a.message)
    # Evicted while still Admitted (Kueue is stopping the pods): evicted wins.
    assert admission(wl(ev, cond("Admitted", "True")), []).evicted
    # Re-admitted: Kueue resets Evicted to False ("Previously: ...").
    again = admission(wl(cond("Evicted", "False", "QuotaReserved", "Previously: ..."), cond("Admitted", "True")), [])
    assert again.status == "True" and not again.evicted


def test_deactivated_and_finished():
    d = admission(wl(cond("Evicted", "True", "Deactivated", "The workload is deactivated"), active=False), [])
    assert (d.status, d.reason, d.evicted) == ("False", "Deactivated", True)
    assert admission(wl(cond("Finished", "True", "Succeeded"), cond("Admitted", "True")), []) is None
    assert admission(wl(), []).reason == "Queued"


def test_workload_name_from_group_label():
    assert workload_name([gated_pod()], "llm") == "llm-g"
    assert workload_name([], "llm") == "llm"


def stopping_pod(name, reason="Preempted"):
    return {"metadata": {"name": name, "deletionTimestamp": "2026-11-30T12:00:00Z"}, "spec": {},
            "status": {"phase": "Running", "conditions": [cond("TerminationTarget", "True", reason, "Preempted to accommodate ...")]}}


def test_withdrawal():
    running = [{"metadata": {"name": f"p{i}"}, "spec": {}, "status": {"phase": "Running"}} for i in range(2)]
    assert withdrawal(None, running, True, 2) is None
    # the pods say so (Kueue's pod-level stop reason), or the Workload does (its reason wins)
    assert withdrawal(None, [stopping_pod("p0", "WorkloadEvictedDueToPreempted"), running[1]], True, 2)[0] == "WorkloadEvictedDueToPreempted"
    assert withdrawal(("Preempted", "m"), [stopping_pod("p0", "WorkloadEvictedDueToPreempted"), running[1]], True, 2) == ("Preempted", "m")
    assert withdrawal(("Preempted", "m"), running[:1], True, 2) == ("Preempted", "m")  # one already gone
    assert withdrawal(("Preempted", "m"), running, True, 2) is None  # a new attempt, all alive: queued, not withdrawn
    assert withdrawal(("Preempted", "m"), [], False, 2) is None  # not created yet


@pytest.mark.parametrize("volume, resumes", [(None, FROM_STEP_ZERO), ({"persistentVolumeClaim": {"claimName": "ckpt"}}, FROM_CHECKPOINT)])
def test_reconcile_preemption_is_a_new_queued_attempt_not_a_restart(job_obj, volume, resumes):
    obj = copy.deepcopy(job_obj)
    if volume is not None:
        obj["spec"]["checkpoint"] = {"volume": volume}
    obj["metadata"].setdefault("uid", "u-1")
    obj["spec"]["scheduling"] = {"backend": "kueue", "queue": "lq"}
    nodes = obj["spec"]["nodes"]
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    pods: dict[str, dict] = {}

    def step(schedulable=None, evicted=None):
        nonlocal now
        now += timedelta(seconds=1)
        plan = decide(copy.deepcopy(obj), Observed(pods=copy.deepcopy(list(pods.values())), backend_schedulable=schedulable,
                                                   backend_evicted=evicted), now)
        for name in plan.delete_pods:
            pods.pop(name, None)
        for child in plan.create:
            if child["kind"] == "Pod":
                child["spec"]["schedulingGates"] = [GATE]  # Kueue's webhook
                pods[child["metadata"]["name"]] = child
        if plan.status is not None:
            obj["status"] = plan.status
        return plan

    def conds():
        return {c["type"]: c for c in obj["status"]["conditions"]}

    step()
    assert len(pods) == nodes and all(p["metadata"]["labels"][constants.LABEL_KUEUE_QUEUE_NAME] == "lq" for p in pods.values())
    pending = Schedulable("False", "Pending", f"Kueue: {PENDING_MSG}")
    step(pending)
    assert conds()["Schedulable"]["reason"] == "Pending" and PENDING_MSG in conds()["Schedulable"]["message"]
    assert obj["status"]["phase"] == "Scheduling"
    # Admitted: Kueue lifts its gate, the scheduler binds, kwok runs them.
    for i, p in enumerate(pods.values()):
        p["spec"]["schedulingGates"] = []
        p["spec"]["nodeName"] = f"n{i}"
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    step(Schedulable("True", "Admitted", "admitted by Kueue"))
    assert obj["status"]["phase"] == "Running" and conds()["Schedulable"]["status"] == "True"
    # Preempted: Kueue marks the pods and deletes them.
    for name in list(pods):
        pods[name] = {**pods[name], "metadata": {**pods[name]["metadata"], "deletionTimestamp": now.isoformat()},
                      "status": {**pods[name]["status"], "conditions": [cond("TerminationTarget", "True", "Preempted", "to make room")]}}
    ev = ("Preempted", "Kueue evicted Workload llm (Preempted): ...")
    step(Schedulable("False", *ev), ev)
    st = obj["status"]
    assert st["phase"] == "Pending" and st["restartAttempt"] == 1 and st.get("restarts", 0) == 0
    assert conds()["Suspended"]["status"] == "True" and conds()["Suspended"]["reason"] == "Preempted"
    assert resumes in st["message"]
    assert not step(Schedulable("False", *ev), ev).delete_pods  # already being deleted (by Kueue): left alone
    pods.clear()  # their deletion completes
    step(Schedulable("False", *ev), ev)  # the new attempt's pods, queued behind the still-Evicted Workload
    assert len(pods) == nodes and all(p["metadata"]["labels"][constants.LABEL_RESTART_ATTEMPT] == "1" for p in pods.values())
    step(Schedulable("False", *ev), ev)
    assert obj["status"]["restartAttempt"] == 1 and conds()["Schedulable"]["reason"] == "Preempted"
    # Re-admitted: Suspended clears, the gang runs again (attempt 1 resumes from the checkpoint).
    for p in pods.values():
        p["spec"]["schedulingGates"] = []
        p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        p["spec"]["nodeName"] = "n"
    step(Schedulable("True", "Admitted", "admitted by Kueue"))
    assert obj["status"]["phase"] == "Running" and conds()["Suspended"]["status"] == "False"
    assert obj["status"].get("restarts", 0) == 0
