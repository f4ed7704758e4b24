"""Create-pinned: a new native gang placed before any pod exists is created already pinned and
ungated (one request per pod, no release pass); whatever goes wrong on the way falls back to
the gated path, and a part-created pinned gang never starts without its peers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_reconcile import Sim, cond

from phalanx import constants as C
from phalanx.api.config import OperatorConfig
from phalanx.decision import GangDecision, Observed
from phalanx.gang.pins import pin_affinity, pin_pod, pinned_node
from phalanx.gang.quota import quota_entry
from phalanx.lifecycle.pods import is_gated
from phalanx.lifecycle.reconcile import decide
from phalanx.lifecycle.replacement import INTERRUPTED_AFTER_SECONDS, REFUSED_GRACE_SECONDS

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
    pod = {"spec": {"schedulingGates": [{"name": C.GANG_SCHEDULING_GATE}]}}
    pin_pod(pod, "node-a")
    assert pod["spec"] == {"affinity": pin_affinity("node-a")} and pinned_node(pod["spec"]) == "node-a"
    other = {"spec": {"schedulingGates": [{"name": "example.com/other"}, {"name": C.GANG_SCHEDULING_GATE}]}}
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
                c["reason"] = C.Reason.CREATE_REFUSED
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
