"""The job loop's decide() runs off the event loop (a huge job's render must not stall the watches,
the other jobs and /healthz), the gang step still reads and books on the loop, and per-job
bookkeeping (``memo.gangs``) is pruned when a job finishes or goes away."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from datetime import UTC, datetime

import pytest
from aiohttp import web

from phalanx import constants, expectations, gangstep, handlers, jobloop, offloop, startup
from phalanx.api.config import OperatorConfig
from phalanx.api.policy import ClusterPolicy, PolicyRules
from phalanx.decision import Observed
from phalanx.gang.inventory import Reservation
from phalanx.lifecycle.reconcile import decide
from phalanx.scheduler import PIN_TTL_SECONDS, Scheduler
from phalanx.sweep import handlers as _sweep_handlers  # noqa: F401 - registers the sweep's handlers

GPU = "nvidia.com/gpu"


def job(name="huge", nodes=2048, status=None):
    return {"apiVersion": f"{constants.GROUP}/{constants.VERSION}", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1,
                         "creationTimestamp": "2026-11-30T00:00:00Z"},
            "spec": {"image": "phalanx/runtime:dev", "nodes": nodes, "procsPerNode": 8,
                     "resources": {"gpus": 8, "cpu": "1", "memory": "1Gi"}, "model": {"preset": "debug"},
                     "training": {"globalBatchSize": nodes * 8}},
            "status": status or {}}


def node(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": [], "unschedulable": False},
            "status": {"allocatable": {GPU: "8", "cpu": "16", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def indexes(nodes=(), usage=()):
    return gangstep.Indexes(job_pods={}, job_services={}, job_config_maps={}, job_network_policies={},
                            cluster_nodes={k: [v] for n in nodes for k, v in handlers.cluster_nodes(name=n["metadata"]["name"], body=n).items()}, usage={None: list(usage)},
                            priority_classes={}, namespace_labels={}, resource_quotas={})


def job_loop(memo, name, ix, body=None):
    """The job's loop as the daemon starts it: the native gang step and elastic probe."""
    return jobloop.JobLoop(memo, "default", name, body if body is not None else {}, ix,
                           gangstep.native_gang_step(memo, ix), gangstep.elastic_probe(memo, "default", name, ix))


async def _healthz_server():
    app = web.Application()
    async def healthz(_):
        return web.json_response({})

    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def _probe(port, stop, latencies):
    """A kubelet: GET /healthz every 50 ms, each allowed 1 s."""
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1.0).read()
            latencies.append(time.perf_counter() - t0)
        except OSError:
            latencies.append(float("inf"))
        stop.wait(0.05)


def test_a_huge_render_leaves_the_loop_and_healthz_responsive():
    """Rendering a 2,048-node gang takes seconds of CPU; on the loop it would stall everything (no
    tick, /healthz unanswered) for all of it. Off the loop, the ticks and probes go on."""
    async def main():
        # 2,048 pods: above the policy's default maxNodes (1024), which an admin raises for such jobs
        memo = startup.new_memo(OperatorConfig(policy=ClusterPolicy(default=PolicyRules(max_nodes=4096))))
        runner, port = await _healthz_server()
        loop_ = job_loop(memo, "huge", indexes())
        obj = job()
        observed = Observed(pods=[], service_exists=False, config_map_exists=False, network_policy_exists=False)
        gaps, stop, latencies = [], threading.Event(), []

        async def ticker():
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0.02)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        prober = threading.Thread(target=_probe, args=(port, stop, latencies), daemon=True)
        prober.start()
        t0 = time.perf_counter()
        plan = await loop_.decide(obj, observed)
        took = time.perf_counter() - t0
        stop.set()
        tick.cancel()
        await asyncio.to_thread(prober.join)
        await runner.cleanup()
        memo.decider.shutdown()
        return plan, took, gaps, latencies

    plan, took, gaps, latencies = asyncio.run(main())
    assert sum(1 for c in plan.create if c["kind"] == "Pod") == 2048
    assert took > 0.15, took  # a render worth measuring (0.24-0.6 s CPU here, by load)
    assert len(gaps) >= 5, (took, gaps)  # the loop kept ticking during the render
    assert max(gaps) < 1.0 and max(gaps) < took / 2, (max(gaps), took)
    assert latencies and max(latencies) < 1.0, (took, latencies)


def _gated_pods(obj):
    """The first pass's pods as the index shows them: created, gated, nothing bound."""
    plan = decide(obj, Observed(pods=[], service_exists=False, config_map_exists=False, network_policy_exists=False),
                  datetime.now(UTC))
    pods = [c for c in plan.create if c["kind"] == "Pod"]
    return pods, plan.status


def test_the_gang_step_plans_off_the_loop_and_books_on_it():
    async def main():
        memo = startup.new_memo()
        obj = job(name="small", nodes=4)
        pods, status = _gated_pods(obj)
        status = {**status, "attemptCreated": True}
        ix = indexes(nodes=[node(f"n{i}") for i in range(6)])
        loop_ = job_loop(memo, "small", ix)
        seen = []
        step = loop_.gang

        def spy(j, p):
            seen.append(threading.current_thread() is threading.main_thread())
            return step(j, p)

        loop_.gang = spy
        plan = await loop_.decide({**obj, "status": status}, Observed(pods=pods))
        memo.decider.shutdown()
        return memo, plan, seen

    memo, plan, seen = asyncio.run(main())
    assert seen == [False]  # planned on the decide thread
    assert len(plan.release) == 4 and len(plan.pins) == 4
    assert "default/small" not in memo.scheduler.waiting and len(memo.scheduler.pending["default/small"][0]) == 4


def test_a_gang_of_a_deleted_job_is_never_queued():
    """decide() still running when the job's loop stops (deleted): its gang step books nothing."""
    async def main():
        memo = startup.new_memo()
        ix = indexes(nodes=[node("n0")])
        loop_ = job_loop(memo, "gone", ix)
        memo.gangs.forget("default", "gone")  # the daemon's finally ran
        obj = job(name="gone", nodes=2)
        pods, _ = _gated_pods(obj)
        from phalanx.api.types import TrainingJob
        tj = TrainingJob.model_validate(obj)
        with pytest.raises(offloop.JobGone):
            await asyncio.to_thread(loop_.gang, tj, pods)
        memo.decider.shutdown()
        return memo

    memo = asyncio.run(main())
    assert not memo.scheduler.waiting and not memo.gangs.wakeups


def test_finished_jobs_leave_the_queue_and_deleted_ones_leave_nothing():
    async def main():
        memo = startup.new_memo()
        gangs, scheduler = memo.gangs, memo.scheduler
        loop_ = job_loop(memo, "done", indexes())
        scheduler.waiting["default/done"] = object()
        scheduler.pending["default/done"] = ([Reservation("default/done", "n0", {GPU: 8})], time.monotonic())
        obj = job(name="done", nodes=2, status={"phase": "Failed", "completionTime": "2026-11-30T00:00:00Z"})
        await loop_.decide(obj, Observed(pods=[]))
        assert "default/done" not in scheduler.waiting and "default/done" not in scheduler.pending
        assert gangs.alive("default", "done")  # the loop runs on until the job is deleted (TTL)
        gangs.forget("default", "done")
        memo.decider.shutdown()
        return gangs

    gangs = asyncio.run(main())
    assert not gangs.wakeups and not gangs.scheduler.waiting and not gangs.scheduler.pending and not gangs.phases


def test_pod_events_of_a_job_without_a_loop_make_no_entry():
    """The reflector wakes job loops through Gangs.wake: pods outlive their jobs, and the events of
    a deleted job's pods must not leave an entry per job behind."""
    from phalanx.podreflector import PodReflector, pod_entry

    memo = startup.new_memo()
    reflector = PodReflector(None, on_job=memo.gangs.wake, on_freed=memo.scheduler.changed)

    def event(type_, ns, job, name):
        reflector._apply(type_, pod_entry({"metadata": {"name": name, "namespace": ns, "labels": {constants.LABEL_JOB_NAME: job}}}))

    for i in range(100):  # pods of deleted jobs terminating, GC'd
        event("ADDED", "ns", f"old-{i}", f"old-{i}-0")
        event("DELETED", "ns", f"old-{i}", f"old-{i}-0")
    assert not memo.gangs.wakeups and not reflector.jobs and not reflector.store
    wake = memo.gangs.wakeup("ns", "live")
    event("ADDED", "ns", "live", "live-0")
    assert wake.is_set() and list(memo.gangs.wakeups) == [("ns", "live")]
    assert [p["metadata"]["name"] for p in reflector.job_pods.get(("ns", "live"), [])] == ["live-0"]


def test_expired_pins_are_dropped():
    scheduler = Scheduler()
    old = time.monotonic() - PIN_TTL_SECONDS - 1
    scheduler.pending["a/old"] = ([Reservation("a/old", "n0", {GPU: 8})], old)
    scheduler.pending["a/new"] = ([Reservation("a/new", "n1", {GPU: 8})], time.monotonic())
    assert [r.node for r in scheduler.pending_pins(except_key="a/x")] == ["n1"]
    assert list(scheduler.pending) == ["a/new"]


def test_a_booked_pin_holds_until_its_patch_is_written():
    """At scale the release patches of many gangs queue for minutes: a pin must not expire before
    the index can show it (seen: 46 pods of 9 gangs pinned to full nodes, 200 gangs at once)."""
    gangs = jobloop.Gangs()
    pending = gangs.scheduler.pending
    pending["a/slow"] = ([Reservation("a/slow", "n0", {GPU: 8})], float("inf"))  # booked, patches in flight
    assert [r.node for r in gangs.scheduler.pending_pins(except_key="a/x")] == ["n0"]
    gangs.pins_written("a", "slow")
    assert [r.node for r in gangs.scheduler.pending_pins(except_key="a/x")] == ["n0"]  # the index may lag a little
    pending["a/slow"] = (pending["a/slow"][0], time.monotonic() - PIN_TTL_SECONDS - 1)
    assert gangs.scheduler.pending_pins(except_key="a/x") == [] and not pending
    gangs.pins_written("a", "gone")  # nothing booked: nothing made
    assert not pending


def test_a_release_of_pods_already_released_books_nothing():
    """A pass that saw released pods still gated (watch lag) re-plans them; the API server refuses
    the second release (422). Its booking must not hold other nodes (seen in CI: "2 fit", not 4)."""
    gangs = jobloop.Gangs()
    pending = gangs.scheduler.pending
    pending["a/twice"] = ([Reservation("a/twice", "n5", {GPU: 8})], float("inf"))
    gangs.released("a", "twice", all_new=False)
    assert gangs.scheduler.pending_pins(except_key="a/x") == [] and not pending
    pending["a/once"] = ([Reservation("a/once", "n6", {GPU: 8})], float("inf"))
    gangs.released("a", "once", all_new=True)  # written: held for the index's lag
    assert [r.node for r in gangs.scheduler.pending_pins(except_key="a/x")] == ["n6"]


def test_the_next_pass_waits_until_released_pods_show_ungated():
    """Expectations cover releases: a pass on a view that still shows them gated would plan and
    release them again (a 422 per pod, and a booking of nodes the gang already holds)."""
    from phalanx.decision import Plan

    gated = {"metadata": {"name": "p-0"}, "spec": {"schedulingGates": [{"name": constants.GANG_SCHEDULING_GATE}]}}
    index = {("default", "j"): [gated]}
    plan = Plan(release=["p-0"])

    async def main():
        waiter = asyncio.ensure_future(expectations.await_expectations(("default", "j"), index, plan))
        await asyncio.sleep(0.3)
        assert not waiter.done()  # still gated in the index
        index[("default", "j")] = [{"metadata": {"name": "p-0"}, "spec": {"schedulingGates": []}}]
        t0 = time.monotonic()
        await asyncio.wait_for(waiter, 2.0)
        return time.monotonic() - t0

    assert asyncio.run(main()) < 1.0


class _Kube:
    def __init__(self, labels):
        self.labels, self.reads = labels, 0

    async def namespace_labels(self, namespace):
        self.reads += 1
        return self.labels


@pytest.mark.parametrize("api_labels, first", [
    ({"pod-security.kubernetes.io/enforce": "restricted"}, {"pod-security.kubernetes.io/enforce": "restricted"}),
    (None, {"team": "a"}),  # unreadable (no list on namespaces): the watch's view
])
def test_the_first_pass_reads_the_namespace_labels_from_the_api_server(api_labels, first):
    """A label set just before the job may not have reached the namespace watch, and the first
    pass may create the gang: its policy and Pod Security level come from a fresh read."""
    async def main():
        memo = startup.new_memo()
        memo.kube = _Kube(api_labels)
        ix = indexes()
        ix.namespace_labels["default"] = [{"team": "a"}]  # the watch: not yet the new label
        loop_ = job_loop(memo, "j", ix)
        seen = [await loop_.namespace_labels(), await loop_.namespace_labels()]
        memo.decider.shutdown()
        return seen, memo.kube.reads

    (one, two), reads = asyncio.run(main())
    assert one == first and two == {"team": "a"} and reads == 1  # once per job, then the watch


def test_a_count_only_status_is_held_back_after_a_write_and_requeued():
    from phalanx.decision import Plan

    memo = startup.new_memo()
    loop_ = job_loop(memo, "j", indexes())
    before = {"phase": "Scheduling", "readyNodes": 1, "nodes": "1/4"}
    first = Plan(status={**before, "readyNodes": 2, "nodes": "2/4"})
    loop_.hold_ready_counts({"status": before}, first)
    assert first.status is not None  # nothing written yet: at once
    loop_.status_written_at = time.monotonic()
    second = Plan(status={**before, "readyNodes": 3, "nodes": "3/4"}, requeue_after=30.0)
    loop_.hold_ready_counts({"status": before}, second)
    assert second.status is None and 0 < second.requeue_after <= 1.0
    memo.decider.shutdown()


def test_a_job_with_a_status_keeps_the_watchs_labels():
    """After an operator restart or failover every job has a first pass: no list per job."""
    async def main():
        memo = startup.new_memo()
        memo.kube = _Kube({"fresh": "labels"})
        ix = indexes()
        ix.namespace_labels["default"] = [{"team": "a"}]
        loop_ = job_loop(memo, "j", ix, {"status": {"phase": "Running"}})
        labels = await loop_.namespace_labels()
        memo.decider.shutdown()
        return labels, memo.kube.reads

    assert asyncio.run(main()) == ({"team": "a"}, 0)


def test_the_namespace_read_gives_none_when_forbidden_or_unreachable():
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from phalanx.kube import Kube

    class Core:
        def __init__(self, error):
            self.error = error

        def list_namespace(self, **_):
            raise self.error

    async def read(error):
        kube = Kube(client.ApiClient(), concurrency=1)
        kube.core = Core(error)
        return await kube.namespace_labels("team")

    for error in (ApiException(status=403, reason="forbidden"), ConnectionResetError("reset")):
        assert asyncio.run(read(error)) is None


def test_the_node_index_keeps_parsed_nodes_and_lost_nodes_reads_them():
    ready, gone = node("n1"), node("n2")
    gone["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    ix = indexes([ready, gone])
    entry = next(iter(ix.cluster_nodes["n1"]))
    assert entry.ready and entry.allocatable[GPU] == 8 and entry.allocatable["memory"] == 64 * 2**30
    pods = [{"spec": {"nodeName": n}} for n in ("n1", "n2", "n3")] + [{"spec": {}}]
    assert jobloop._lost_nodes(pods, ix.cluster_nodes) == frozenset({"n2", "n3"})



def test_a_node_with_a_bad_quantity_is_indexed_with_nothing_allocatable_not_lost():
    bad = node("n1")
    bad["status"]["allocatable"][GPU] = "eight"
    entry = next(iter(indexes([bad]).cluster_nodes["n1"]))
    assert entry.allocatable == {} and entry.ready
    assert jobloop._lost_nodes([{"spec": {"nodeName": "n1"}}], indexes([bad]).cluster_nodes) == frozenset()
