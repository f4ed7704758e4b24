"""One job's loop (phalanx/jobloop.py): decide() runs off the event loop (a huge job's render must
not stall the watches, the other jobs and /healthz), per-job bookkeeping (``memo.gangs``) is pruned
when a job finishes or goes away, and the namespace's labels come from a fresh read on a new job's
first pass."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request

import pytest
from aiohttp import web

from phalanx import constants, jobloop, startup
from phalanx.api.config import OperatorConfig
from phalanx.api.policy import ClusterPolicy, PolicyRules
from phalanx.decision import Observed, Plan
from phalanx.gang.inventory import Reservation
from phalanx.lifecycle import pacing
from phalanx.lifecycle.pacing import COUNT_WRITE_INTERVAL_SECONDS
from phalanx.scheduler import PIN_TTL_SECONDS
from tests.unit.phalanx.test_handlers import GPU, indexes, job, job_loop


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


def test_a_pass_that_stops_before_its_release_lets_its_booking_expire():
    """API trouble or a refusal after the gang step booked its placement: the booking expires
    PIN_TTL_SECONDS later instead of holding the nodes through the job's backoff."""
    async def run(refusals, raises):
        memo = startup.new_memo()
        loop_ = job_loop(memo, "stuck", indexes())
        memo.scheduler.pending["default/stuck"] = ([Reservation("default/stuck", "n0", {GPU: 8})], float("inf"))

        class _Failing:
            async def execute(self, *a, **k):
                if raises:
                    raise OSError("API server unreachable")
                return refusals

        memo.kube = _Failing()
        loop_.wake.set()  # the backoff returns at once
        await loop_.execute({"status": {}}, Plan(), 0.0)
        memo.decider.shutdown()
        return memo.scheduler.pending["default/stuck"][1]

    assert asyncio.run(run([], raises=True)) < float("inf")
    assert asyncio.run(run(["refused"], raises=False)) < float("inf")
    assert asyncio.run(run([], raises=False)) == float("inf")  # done: released() starts it instead


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
    assert second.status is None and 0 < second.requeue_after <= COUNT_WRITE_INTERVAL_SECONDS
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



# --- the loop's pure parts: what a pass waits for, whose children count ----------------------------


@pytest.mark.parametrize("status, view", [
    ({}, (None, None, None, None, None, None)),
    ({"phase": "Running", "restartAttempt": 1, "restarts": 1, "attemptCreated": True, "placement": {"n0": 0},
      "nodeReplacement": {"pod": "p"}, "readyNodes": 4, "message": "m"},
     ("Running", 1, 1, True, {"n0": 0}, {"pod": "p"})),  # counts and messages: not waited for
])
def test_the_status_view_holds_only_what_the_next_pass_decides_on(status, view):
    assert jobloop.job_status_view(status) == view


@pytest.mark.parametrize("owner_references, controlled", [
    (None, False),
    ([], False),
    ([{"uid": "u", "controller": False}], False),  # only labelled or merely owned: not the job's
    ([{"uid": "u"}], False),
    ([{"uid": "u", "controller": True}], True),
    ([{"uid": "x"}, {"uid": "u", "controller": True}], True),
])
def test_a_pod_counts_only_with_a_controller(owner_references, controlled):
    pod = {"metadata": {"name": "p", **({"ownerReferences": owner_references} if owner_references is not None else {})}}
    assert jobloop._controlled(pod) is controlled


@pytest.mark.parametrize("uid, values", [
    ("job-uid", ["mine"]),
    ("other-uid", ["predecessor's"]),
    (None, ["unowned"]),
    ("absent-uid", []),
])
def test_owned_keeps_the_values_whose_owner_is_the_job(uid, values):
    index = {("ns", "svc"): [("job-uid", "mine"), ("other-uid", "predecessor's"), (None, "unowned")]}
    assert jobloop.owned(index, ("ns", "svc"), uid) == values
    assert jobloop.owned(index, ("ns", "other"), uid) == []


def test_the_jobs_gauge_counts_each_phase_and_forgets_a_deleted_job():
    from prometheus_client import REGISTRY

    def gauge(phase):
        return REGISTRY.get_sample_value("phalanx_jobs", {"phase": phase})

    gangs = jobloop.Gangs()
    gangs.track_phase(("a", "one"), "Running")
    gangs.track_phase(("a", "two"), "Running")
    gangs.track_phase(("b", "three"), "Failed")
    assert (gauge("Running"), gauge("Failed"), gauge("Pending")) == (2, 1, 0)
    gangs.track_phase(("a", "two"), "Succeeded")  # a job moves: counted once, in its new phase
    assert (gauge("Running"), gauge("Succeeded")) == (1, 1)
    gangs.forget("a", "one")
    gangs.forget("b", "three")
    gangs.forget("a", "two")
    assert not gangs.phases and gauge("Running") == gauge("Failed") == gauge("Succeeded") == 0


def test_a_loops_wakeup_exists_while_it_runs_and_a_changed_row_wakes_it():
    gangs = jobloop.Gangs()
    assert not gangs.alive("ns", "j")
    wake = gangs.wakeup("ns", "j")
    assert gangs.alive("ns", "j") and gangs.wakeup("ns", "j") is wake  # one per loop
    gangs.scheduler.wake("ns", "j")  # the scheduler's hook: a changed row of the gang
    assert wake.is_set()
    gangs.forget("ns", "j")
    assert not gangs.alive("ns", "j") and not gangs.wakeups


class _LogKube:
    def __init__(self, raw):
        self.raw, self.reads = raw, []

    async def pod_log_tail(self, namespace, name, container, tail_lines, limit_bytes):
        self.reads.append((namespace, name, container, tail_lines, limit_bytes))
        return self.raw


@pytest.mark.parametrize("raw, suffix", [
    (b"loading shard 3\n\x1b[33mNCCL WARN\x1b[0m timeout\n", "\nrank 0's last log lines:\n  loading shard 3\n  NCCL WARN timeout"),
    (None, ""),  # unreadable: the message as decided
])
def test_a_hangs_messages_get_rank_0s_log_lines_before_they_are_written(raw, suffix):
    from phalanx.decision import LogTail
    from phalanx.lifecycle.logtail import LOG_TAIL_BYTES, LOG_TAIL_LINES

    async def main():
        memo = startup.new_memo()
        memo.kube = _LogKube(raw)
        loop_ = job_loop(memo, "j", indexes())
        plan = Plan(events=[("Warning", "Restarting", "after hang")], log_tail=LogTail("j-node-0-0", "hang"),
                    status={"conditions": [{"type": "Restarting", "message": "after hang"}]})
        await loop_.attach_log_tail(plan)
        memo.decider.shutdown()
        return plan, memo.kube.reads

    plan, reads = asyncio.run(main())
    assert reads == [("default", "j-node-0-0", constants.CONTAINER_NAME, LOG_TAIL_LINES, LOG_TAIL_BYTES)]
    assert plan.events == [("Warning", "Restarting", "after hang" + suffix)]
    assert plan.status["conditions"][0]["message"] == "after hang" + suffix


class _ProgressKube:
    """Answers get_progress with a record naming the pod IP it was asked."""

    def __init__(self):
        self.asked: list[str] = []

    async def get_progress(self, pod_ip: str, port: int = constants.PROGRESS_PORT) -> bytes:
        self.asked.append(pod_ip)
        return b'{"step": 7}'


def _rank_pod(rank: int, attempt: int, ip: str | None, trainer_restarts: int = 0) -> dict:
    status = {"podIP": ip} if ip else {}
    if trainer_restarts:
        status["containerStatuses"] = [{"name": constants.CONTAINER_NAME, "restartCount": trainer_restarts}]
    return {"metadata": {"name": f"p{rank}-{attempt}", "namespace": "default", "uid": f"u{rank}",
                         "labels": {constants.LABEL_NODE_RANK: str(rank), constants.LABEL_RESTART_ATTEMPT: str(attempt)},
                         "ownerReferences": [{"uid": "uid-j", "controller": True}]},
            "spec": {}, "status": status}


@pytest.mark.parametrize(("pods", "attempt", "asked"), [
    ([_rank_pod(0, 1, "10.0.0.1"), _rank_pod(1, 1, "10.0.0.2")], 1, ["10.0.0.1"]),
    # an earlier attempt's rank 0 still terminating is never read
    ([_rank_pod(0, 1, "10.0.0.9"), _rank_pod(0, 2, "10.0.0.1")], 2, ["10.0.0.1"]),
    ([_rank_pod(0, 1, "10.0.0.9")], 2, []),
    ([_rank_pod(0, 2, None)], 2, []),  # no IP yet
])
def test_progress_is_polled_from_the_current_attempts_rank_0(pods, attempt, asked):
    kube = _ProgressKube()
    report = asyncio.run(jobloop._poll_progress(kube, pods, attempt))
    assert kube.asked == asked
    assert report == ({"step": 7} if asked else None)


@pytest.mark.parametrize(("trainer_restarts", "in_place_restarts", "asked"), [
    (0, 0, ["10.0.0.1"]),
    (1, 1, ["10.0.0.1"]),
    (2, 1, ["10.0.0.1"]),
    # the gang restarted in place, rank 0's trainer not yet: its report is the run before's
    (0, 1, []),
    (1, 2, []),
])
def test_progress_is_polled_from_a_rank_0_that_restarted_in_place_with_the_gang(trainer_restarts, in_place_restarts, asked):
    kube = _ProgressKube()
    asyncio.run(jobloop._poll_progress(kube, [_rank_pod(0, 0, "10.0.0.1", trainer_restarts)], 0, in_place_restarts))
    assert kube.asked == asked


class _RestartingRank0Kube(_ProgressKube):
    """Rank 0's report: the run before the restart in place (resumed at step 10), then the
    restarted run's (resumed at step 20)."""

    reports = [b'{"step": 23, "resumedStep": 10}', b'{"step": 21, "resumedStep": 20}']

    async def get_progress(self, pod_ip: str, port: int = constants.PROGRESS_PORT) -> bytes:
        self.asked.append(pod_ip)
        return self.reports[min(len(self.asked), len(self.reports)) - 1]

    async def namespace_labels(self, namespace):
        return {}


def test_a_report_read_before_a_restart_in_place_is_not_the_restarted_runs():
    """The report cached before the gang restarted in place (same attempt, same pods) holds the
    run before's step and resumedStep: the next passes go without one until rank 0's restarted
    trainer serves its own."""
    async def main():
        memo = startup.new_memo()
        memo.kube = _RestartingRank0Kube()
        ix = indexes()
        body = job("j", nodes=2, status={"phase": "Running", "restartAttempt": 0})
        body["metadata"]["uid"] = "uid-j"
        loop_ = job_loop(memo, "j", ix, body)
        ix.job_pods[("default", "j")] = [_rank_pod(0, 0, "10.0.0.1")]
        seen = [(await loop_.observe())[1].progress]
        body["status"] = {"phase": "Running", "restartAttempt": 0, "inPlaceRestarts": 1}  # counted; polled 0 s ago
        seen.append((await loop_.observe())[1].progress)
        ix.job_pods[("default", "j")] = [_rank_pod(0, 0, "10.0.0.1", trainer_restarts=1)]
        loop_.last_progress_poll = 0.0  # the next poll is due
        seen.append((await loop_.observe())[1].progress)
        memo.decider.shutdown()
        return seen

    before, counted, restarted = asyncio.run(main())
    assert before == {"step": 23, "resumedStep": 10}
    assert counted is None
    assert restarted == {"step": 21, "resumedStep": 20}


class _StartingKube:
    """Rank 0's progress: still building for the first ``building`` reads, then the first step."""

    def __init__(self, building: int):
        self.building, self.reads = building, 0

    async def get_progress(self, pod_ip: str, port: int = constants.PROGRESS_PORT) -> bytes:
        self.reads += 1
        startup = {"metrics": 20.0, **({"firstStep": 24.0} if self.reads > self.building else {})}
        return json.dumps({"step": int("firstStep" in startup), "startup": startup}).encode()


def _running_loop(kube, running_for: float = 0.0, progress: dict | None = None):
    memo = startup.new_memo()
    memo.kube = kube
    ix = indexes()
    ix.job_pods[("default", "j")] = [{**_rank_pod(0, 0, "10.0.0.1"),
                                      "metadata": {**_rank_pod(0, 0, "10.0.0.1")["metadata"],
                                                   "ownerReferences": [{"controller": True}]}}]
    loop_ = job_loop(memo, "j", ix, body={"metadata": {}, "status": {"phase": "Running", "restartAttempt": 0}})
    loop_.note_running(0)
    loop_.running_since -= running_for
    loop_.progress, loop_.progress_run = progress, (0, 0) if progress is not None else None
    return memo, loop_


def test_the_first_step_ends_the_wait_for_the_resync_within_a_read():
    """The gang runs and its first step is awaited: between passes rank 0's report is read every
    second, and the one that shows the step ends the wait (a pass writes it) instead of the resync."""
    async def main():
        kube = _StartingKube(building=2)
        memo, loop_ = _running_loop(kube)
        t0 = time.monotonic()
        await loop_.settle(Plan())
        took = time.monotonic() - t0
        memo.decider.shutdown()
        return kube.reads, took, loop_.progress

    reads, took, progress = asyncio.run(main())
    assert reads == 3 and 1.5 < took < 4.0, (reads, took)  # at once (none read yet), 1 s, 2 s
    assert progress["startup"]["firstStep"] == 24.0


@pytest.mark.parametrize(("running_for", "progress"), [
    (0.0, {"step": 1, "startup": {"firstStep": 24.0}}),  # seen: the running job's pace
    (pacing.FIRST_STEP_WATCH_SECONDS + 1, None),  # a start past the watch: no more reads than before
])
def test_no_read_between_passes_once_the_step_shows_or_the_watch_is_over(running_for, progress):
    async def main():
        kube = _StartingKube(building=0)
        memo, loop_ = _running_loop(kube, running_for, progress)
        t0 = time.monotonic()
        await loop_.settle(Plan(requeue_after=1.5))
        took = time.monotonic() - t0
        memo.decider.shutdown()
        return kube.reads, took

    reads, took = asyncio.run(main())
    assert reads == 0 and took >= 1.4, (reads, took)
