import pytest

from phalanx.api.config import default_levels
from phalanx.backends import apply_mutation, render_backend
from phalanx.backends.workload import pick_api_version, render, schedulable
from phalanx.decision import Schedulable
from tests.unit.phalanx.backends.fixtures import job, pod, validate


def test_v1alpha1_workload_and_pod_ref():
    r = render(job(scheduling={"backend": "workload"}), api_version="v1alpha1")
    (wl,) = r.objects
    validate(wl, "workload-v1alpha1.json")
    assert wl["apiVersion"] == "scheduling.k8s.io/v1alpha1" and wl["kind"] == "Workload"
    assert wl["spec"] == {"controllerRef": {"apiGroup": "phalanx.dev", "kind": "TrainingJob", "name": "llm"},
                          "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}
    out = apply_mutation(pod(), r.pod)
    validate(out["spec"]["workloadRef"], "pod-workloadref-v1.35.json")
    assert out["spec"]["workloadRef"] == {"name": "llm", "podGroup": "workers"}
    assert "schedulingGates" not in out["spec"]
    assert not r.errors


def test_v1alpha2_standalone_podgroup_matches_the_servers_schema():
    r = render_backend(job(scheduling={"backend": "workload"}), api_version="v1alpha2")
    wl, pg = r.objects
    # schemas: kube-apiserver v1.36.3's OpenAPI v3 for these kinds, closed (no unknown fields)
    validate(wl, "workload-v1alpha2.json")
    validate(pg, "podgroup-v1alpha2.json")
    assert wl["apiVersion"] == pg["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert wl["spec"]["podGroupTemplates"] == [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]
    assert pg["metadata"]["name"] == "llm-workers"
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert pg["spec"] == {"podGroupTemplateRef": {"workload": {"workloadName": "llm", "podGroupTemplateName": "workers"}},
                          "schedulingPolicy": {"gang": {"minCount": 4}}}
    assert apply_mutation(pod(), r.pod)["spec"]["schedulingGroup"] == {"podGroupName": "llm-workers"}
    assert "schedulingGates" not in apply_mutation(pod(), r.pod)["spec"]
    with pytest.raises(ValueError):
        render(job(), api_version="v2")


@pytest.mark.parametrize("level,key", [("subblock", "phalanx.dev/topology-subblock"),
                                       ("phalanx.dev/topology-block", "phalanx.dev/topology-block"),
                                       ("hostname", "kubernetes.io/hostname")])
def test_required_topology_becomes_the_podgroup_constraint(level, key):
    j = job(scheduling={"backend": "workload", "topology": {"required": level}})
    r = render(j, api_version="v1alpha2", levels=default_levels())
    wl, pg = r.objects
    validate(wl, "workload-v1alpha2.json")
    validate(pg, "podgroup-v1alpha2.json")
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": key}]}
    assert wl["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == {"topology": [{"key": key}]}
    assert not r.errors


def test_preferred_topology_alone_has_no_constraint_and_unknown_level_is_an_error():
    r = render(job(scheduling={"backend": "workload", "topology": {"preferred": "subblock"}}),
               api_version="v1alpha2", levels=default_levels())
    assert "schedulingConstraints" not in r.objects[1]["spec"] and not r.errors
    for level in ("pod", "phalanx.dev/topology-rack"):  # not a configured level: refused, as by validate
        r = render(job(scheduling={"backend": "workload", "topology": {"required": level}}),
                   api_version="v1alpha2", levels=default_levels())
        assert r.errors == [f"scheduling.topology: level {level!r} is not a configured topology level"]
    r = render(job(scheduling={"backend": "workload", "topology": {"required": "block"}}),
               api_version="v1alpha1", levels=default_levels())
    assert "has no topology constraints" in r.errors[0]


def test_version_from_discovery():
    served_136 = {"v1": ["priorityclasses"], "v1alpha2": ["workloads", "podgroups", "podgroups/status"]}
    assert pick_api_version(served_136) == "v1alpha2"
    assert pick_api_version({"v1": ["priorityclasses"], "v1alpha1": ["workloads"]}) == "v1alpha1"
    assert pick_api_version({"v1": ["priorityclasses"]}) is None
    assert pick_api_version({"v1alpha2": ["workloads"]}) is None  # no PodGroup: not usable
    j = job(scheduling={"backend": "workload"})
    assert render(j).objects[0]["apiVersion"] == "scheduling.k8s.io/v1alpha2"  # not discovered: newest
    assert render(j, workload_api_versions=("v1alpha1",)).objects[0]["apiVersion"] == "scheduling.k8s.io/v1alpha1"
    r = render_backend(j, workload_api_versions=())
    assert not r.objects and "does not serve" in r.errors[0] and "GenericWorkload" in r.errors[0]


def pg(*conds):
    return {"metadata": {"name": "llm-workers"}, "status": {"conditions": list(conds)}}


def test_schedulable_from_podgroup_status():
    def seen(pod_group):
        verdict = schedulable(pod_group)
        return verdict.status, verdict.reason, verdict.message

    assert schedulable(None) == Schedulable("Unknown", "PodGroupMissing", "the PodGroup does not exist (yet)")
    assert seen(pg())[:2] == ("Unknown", "WaitingForScheduler")
    assert seen({"metadata": {"name": "x"}})[:2] == ("Unknown", "WaitingForScheduler")
    ok = {"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled", "message": ""}
    assert seen(pg(ok)) == (True, "Scheduled", "PodGroup llm-workers: kube-scheduler placed the whole gang")
    assert schedulable(pg(ok)).is_true
    no = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
          "message": "0/16 nodes are available: 16 Insufficient nvidia.com/gpu."}
    assert seen(pg(no)) == (False, "Unschedulable", "PodGroup llm-workers: 0/16 nodes are available: 16 Insufficient nvidia.com/gpu.")
    assert not schedulable(pg(no)).is_true
    err = {"type": "PodGroupScheduled", "status": "False", "reason": "SchedulerError", "message": "boom"}
    assert seen(pg(err))[:2] == (False, "SchedulerError")
    gone = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": ""}
    assert seen(pg(ok, gone))[:2] == (False, "PreemptionByScheduler")
    assert schedulable(pg({"type": "DisruptionTarget", "status": "False"}, ok)).status is True
    assert schedulable(pg("junk", {"type": "PodGroupScheduled", "status": "Maybe"})).status == "Unknown"


def test_reconcile_takes_schedulable_from_the_podgroup(job_obj):
    """The operator's hook: ungated workload pods' Schedulable condition is the PodGroup's verdict,
    and a gang the scheduler cannot place is not re-planned as 'released but never bound'."""
    import copy
    from datetime import UTC, datetime, timedelta

    from phalanx.lifecycle.reconcile import Observed, decide

    obj = copy.deepcopy(job_obj)
    obj["metadata"].setdefault("uid", "u-1")
    obj["spec"]["scheduling"] = {"backend": "workload", "topology": {"required": "subblock"}}
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    pods: dict[str, dict] = {}
    created = []

    def step(verdict):
        plan = decide(copy.deepcopy(obj), Observed(pods=copy.deepcopy(list(pods.values())), backend_schedulable=verdict), now)
        for child in plan.create:
            created.append(child)
            if child["kind"] == "Pod":
                pods[child["metadata"]["name"]] = child
        assert not plan.delete_pods
        if plan.status is not None:
            obj["status"] = plan.status
        return {c["type"]: c for c in obj["status"]["conditions"]}["Schedulable"]

    missing = schedulable(None)
    step(missing)
    kinds = [c["kind"] for c in created]
    assert kinds.index("Workload") < kinds.index("PodGroup") < kinds.index("Pod")
    pg_obj = next(c for c in created if c["kind"] == "PodGroup")
    assert pg_obj["spec"]["schedulingConstraints"] == {"topology": [{"key": "phalanx.dev/topology-subblock"}]}
    assert all(not p["spec"].get("schedulingGates") for p in pods.values())
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "job-workers"} for p in pods.values())
    cond = step(missing)
    assert (cond["status"], cond["reason"]) == ("Unknown", "PodGroupMissing")
    no = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 placements are available"}
    cond = step(schedulable(pg(no)))
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable") and "0/2 placements" in cond["message"]
    now += timedelta(hours=1)  # waiting long: no 'not bound after release' re-plan
    cond = step(schedulable(pg(no)))
    assert cond["reason"] == "Unschedulable" and obj["status"]["phase"] != "Failed"
    cond = step(schedulable(pg({"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"})))
    assert (cond["status"], cond["reason"]) == ("True", "Scheduled")


def test_executor_does_not_dry_run_a_podgroup_that_names_its_workload():
    """kube-apiserver's PodGroupWorkloadExists admission refuses such a PodGroup (403) until its
    Workload exists: a dry run of both cannot pass, so the executor skips it and creates in order."""
    from phalanx.kube import _needs_sibling

    wl, pg = render(job(scheduling={"backend": "workload"}), api_version="v1alpha2").objects
    assert _needs_sibling(pg) and not _needs_sibling(wl)
    assert not _needs_sibling({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "spec": {}})
