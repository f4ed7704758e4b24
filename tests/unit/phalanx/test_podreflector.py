"""The pod reflector's pure parts: entries, events, the job index, expiry, freed capacity."""

from __future__ import annotations

import json

import pytest

from phalanx import constants
from phalanx.podreflector import Expired, JobPods, apply_event, index_jobs, pod_entry, watch_event


def pod(name, ns="other", node="n1", phase="Running", gpus=8, **spec):
    return {"metadata": {"name": name, "namespace": ns, "labels": {"app": "x"}, "resourceVersion": "7"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", "resources": {
                "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}], **spec},
            "status": {"phase": phase, "podIP": "10.0.0.1"}}


def test_entry_keeps_only_what_the_planner_and_the_job_loops_read():
    raw = pod("a", affinity={"nodeAffinity": {}}, schedulingGates=[{"name": "g"}])
    raw["metadata"]["ownerReferences"] = [{"uid": "u", "controller": True, "kind": "TrainingJob", "name": "j"}]
    raw["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastProbeTime": None,
                                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    raw["status"]["containerStatuses"] = [{"name": "c", "ready": False, "restartCount": 1, "image": "i", "imageID": "x",
                                           "state": {"terminated": {"exitCode": 3, "message": "m", "containerID": "c"}},
                                           "lastState": {}}]
    e = pod_entry(raw)
    assert e["metadata"]["labels"] == {"app": "x"} and "resourceVersion" not in e["metadata"]
    assert e["metadata"]["ownerReferences"] == [{"uid": "u", "controller": True}]
    assert e["spec"]["nodeName"] == "n1" and e["spec"]["affinity"] == {"nodeAffinity": {}}
    assert e["spec"]["schedulingGates"] == [{"name": "g"}]
    assert e["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert "image" not in e["spec"]["containers"][0]
    assert e["status"]["phase"] == "Running" and e["status"]["podIP"] == "10.0.0.1"
    assert e["status"]["conditions"] == [{"type": "Ready", "status": "True", "reason": None, "message": None}]
    assert e["status"]["containerStatuses"] == [{"name": "c", "ready": False, "restartCount": 1, "lastState": {},
                                                 "state": {"terminated": {"exitCode": 3, "reason": None, "message": "m"}}}]


def test_entry_keeps_what_restarts_in_place_read():
    raw = pod("a")
    raw["metadata"]["annotations"] = {"phalanx.dev/restart-request": "2", "other": "x"}
    raw["spec"]["containers"][0]["restartPolicyRules"] = [{"action": "RestartAllContainers"}]
    raw["spec"]["containers"][0]["env"] = [{"name": "PHALANX_RESTART_BASE", "value": "1"}, {"name": "A", "value": "b"}]
    e = pod_entry(raw)
    assert e["metadata"]["annotations"] == {"phalanx.dev/restart-request": "2"}
    assert e["spec"]["containers"][0]["restartPolicyRules"] == [{"action": "RestartAllContainers"}]
    assert e["spec"]["containers"][0]["env"] == [{"name": "PHALANX_RESTART_BASE", "value": "1"}]
    plain = pod_entry(pod("b"))["spec"]["containers"][0]
    assert "restartPolicyRules" not in plain and "env" not in plain


def test_entry_keeps_what_a_restart_in_place_reads():
    """The trainer's restart rule, the operator's restart request and whether the restarted
    trainer runs again: without them no pod would be asked and no restart would catch up."""
    from phalanx.lifecycle import inplace

    raw = pod("a", node="n1")
    raw["metadata"]["annotations"] = {constants.ANNOTATION_RESTART_REQUEST: "2", "other": "x" * 100}
    raw["spec"]["containers"][0].update(name=constants.CONTAINER_NAME, restartPolicyRules=[
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [75]}}])
    raw["status"]["containerStatuses"] = [{"name": constants.CONTAINER_NAME, "restartCount": 2,
                                           "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                                           "lastState": {"terminated": {"exitCode": 75, "reason": "Error"}}}]
    e = pod_entry(raw)
    assert e["metadata"]["annotations"] == {constants.ANNOTATION_RESTART_REQUEST: "2"}
    assert inplace.restarts_in_place(e) and inplace.requested(e) == 2 and inplace.trainer_restarts(e) == 2
    assert e["status"]["containerStatuses"][0]["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    assert inplace.in_place_failure(e).exit_code == 75
    plain = pod_entry(pod("b"))
    assert "annotations" not in plain["metadata"] and "restartPolicyRules" not in plain["spec"]["containers"][0]


def test_entries_share_their_label_strings():
    a, b = (pod_entry(json.loads(json.dumps(pod(n)))) for n in "ab")
    (ka, va), = a["metadata"]["labels"].items()
    (kb, vb), = b["metadata"]["labels"].items()
    assert ka is kb and va is vb


def test_events_add_modify_delete_and_report_freed_capacity():
    store, jobs = {}, {}
    assert apply_event(store, jobs, "ADDED", pod_entry(pod("a")))[1] is False
    assert apply_event(store, jobs, "MODIFIED", pod_entry(pod("a")))[1] is False
    assert list(store) == [("other", "a")]
    assert apply_event(store, jobs, "MODIFIED", pod_entry(pod("a", phase="Succeeded")))[1] is True  # ended: freed
    assert apply_event(store, jobs, "DELETED", pod_entry(pod("a", phase="Succeeded")))[1] is False  # already free
    assert store == {}
    apply_event(store, jobs, "ADDED", pod_entry(pod("b")))
    assert apply_event(store, jobs, "DELETED", pod_entry(pod("b")))[1] is True
    apply_event(store, jobs, "ADDED", pod_entry(pod("gated", node=None, phase="Pending")))
    assert apply_event(store, jobs, "DELETED", pod_entry(pod("gated", node=None, phase="Pending")))[1] is False
    assert jobs == {}  # no pod had the job label


def job_pod(name, job, ns="ns"):
    p = pod(name, ns=ns)
    p["metadata"]["labels"] = {constants.LABEL_JOB_NAME: job}
    return pod_entry(p)


def test_job_index_follows_the_events_and_names_the_job():
    store, jobs = {}, {}
    assert apply_event(store, jobs, "ADDED", job_pod("j-0", "j"))[0] == ("ns", "j")
    apply_event(store, jobs, "ADDED", job_pod("j-1", "j"))
    apply_event(store, jobs, "ADDED", job_pod("k-0", "k", ns="other"))
    view = JobPods(lambda: jobs)
    assert sorted(p["metadata"]["name"] for p in view.get(("ns", "j"), [])) == ["j-0", "j-1"]
    assert ("other", "k") in view and view.get(("ns", "none"), []) == []
    assert apply_event(store, jobs, "DELETED", job_pod("j-0", "j"))[0] == ("ns", "j")
    assert [p["metadata"]["name"] for p in view.get(("ns", "j"))] == ["j-1"]
    apply_event(store, jobs, "DELETED", job_pod("j-1", "j"))
    assert ("ns", "j") not in jobs  # no empty entry left per deleted job
    assert index_jobs(store, None) == jobs


def test_job_index_covers_only_the_served_namespaces():
    store, jobs = {}, {}
    assert apply_event(store, jobs, "ADDED", job_pod("k-0", "k", ns="other"), namespaces={"ns"})[0] is None
    apply_event(store, jobs, "ADDED", job_pod("j-0", "j"), namespaces={"ns"})
    assert list(jobs) == [("ns", "j")] and len(store) == 2  # capacity still counts every pod
    assert index_jobs(store, {"ns"}) == jobs


def test_a_relabelled_pod_moves_between_jobs():
    store, jobs = {}, {}
    apply_event(store, jobs, "ADDED", job_pod("p", "a"))
    apply_event(store, jobs, "MODIFIED", job_pod("p", "b"))
    assert list(jobs) == [("ns", "b")]


def test_same_name_in_two_namespaces_are_two_pods():
    store = {}
    apply_event(store, {}, "ADDED", pod_entry(pod("a", ns="x")))
    apply_event(store, {}, "ADDED", pod_entry(pod("a", ns="y")))
    assert len(store) == 2


def test_watch_lines():
    assert watch_event(json.dumps({"type": "ADDED", "object": pod("a")}))[0] == "ADDED"
    kind, obj = watch_event(json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "99"}}}))
    assert kind == "BOOKMARK" and obj["metadata"]["resourceVersion"] == "99"
    with pytest.raises(Expired):
        watch_event(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}))
    with pytest.raises(RuntimeError):
        watch_event(json.dumps({"type": "ERROR", "object": {"kind": "Status", "code": 500}}))


def test_a_burst_of_events_reaches_the_loop_in_order_with_one_wake_up():
    import asyncio
    import threading

    from kubernetes import client

    from phalanx.podreflector import PodReflector

    seen, wakes = [], []

    async def main():
        reflector = PodReflector(client.ApiClient())
        loop = asyncio.get_running_loop()
        reflector.loop = loop
        original = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda fn, *a: (wakes.append(fn), original(fn, *a))[1]
        burst = threading.Thread(target=lambda: [reflector._post(seen.append, i) for i in range(200)])
        burst.start()
        burst.join()  # the loop was busy (here: blocked) the whole burst
        await asyncio.sleep(0.05)
        reflector._post(seen.append, 200)  # after a drain, the next event wakes the loop again
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert seen == list(range(201)) and len(wakes) == 2


def test_an_entry_says_whether_a_container_runs():
    # an in-place restart is over once every trainer runs again (lifecycle/inplace.py)
    raw = pod("a")
    raw["status"]["containerStatuses"] = [{"name": "c", "restartCount": 2, "state": {"running": {"startedAt": "t"}},
                                           "lastState": {"terminated": {"exitCode": 75}}}]
    status = pod_entry(raw)["status"]["containerStatuses"][0]
    assert status["state"] == {"running": {"startedAt": "t"}} and status["lastState"]["terminated"]["exitCode"] == 75
    raw["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    assert pod_entry(raw)["status"]["containerStatuses"][0]["state"] == {}
