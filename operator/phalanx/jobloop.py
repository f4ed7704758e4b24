"""One TrainingJob's loop: observe (the indexes, the body, rank 0's progress, the backends'
verdicts) → decide (off the event loop) → execute (``Kube``) → report → wait for a reason. It runs
on the shared loop machinery (``phalanx.controlloop``); ``phalanx.handlers`` starts one per job.

What the loop reads of the process comes from kopf's ``memo``: ``config``, ``kube``, ``leader``,
``decider``, ``gangs`` (the job loops' shared bookkeeping: wake-ups, queue, pins, phases).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from phalanx import constants
from phalanx.api.types import TERMINAL_PHASES, Phase
from phalanx.backends import backend_named
from phalanx.backends import kueue as kueue_backend
from phalanx.backends import workload as workload_backend
from phalanx.constants import Reason
from phalanx.controlloop import (
    await_status,
    back_off,
    backoff_seconds,
    resync,
    resync_seconds,
    run_while_leading,
    sleep_or_wake,
)
from phalanx.decision import FindSpare, Fits, GangStep, Observed, Plan, Schedulable
from phalanx.expectations import await_expectations
from phalanx.jobmetrics import JOB_METRICS
from phalanx.kube import Kube
from phalanx.lifecycle.inplace import trainer_restarts
from phalanx.lifecycle.logtail import LOG_TAIL_BYTES, LOG_TAIL_LINES, attach_log_tail, log_lines
from phalanx.lifecycle.pacing import (
    FIRST_STEP_POLL_SECONDS,
    PROGRESS_POLL_SECONDS,
    first_step_seen,
    hold_ready_counts,
    progress_poll_seconds,
    wake_coalesce_seconds,
)
from phalanx.lifecycle.pods import attempt_of
from phalanx.lifecycle.progress import parse_progress, progress_port
from phalanx.lifecycle.refusals import (
    MAX_DECIDE_ERRORS,
    Refusal,
    error_status,
    refused_status,
)
from phalanx.metrics import JOBS, RECONCILE_SECONDS, RECONCILES, RESTARTS
from phalanx.offloop import decide_off_loop
from phalanx.render.names import config_map_name, network_policy_name, service_name
from phalanx.scheduler import Scheduler

log = logging.getLogger("phalanx.operator")

# What of a job's status the next pass decides on: it waits until the live body shows these as
# written. placement: a gang created pinned is placed in a pass that may change none of the
# others, and a next pass on the stale body would write the earlier attempt's placement back.
STATUS_KEYS = ("phase", "restartAttempt", "restarts", "attemptCreated", "placement", "nodeReplacement")


def job_status_view(status: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(status.get(key) for key in STATUS_KEYS)


async def run_job(memo: kopf.Memo, namespace: str, name: str, body: kopf.Body, stopped: kopf.DaemonStopped,
                  indexes: Any, gang: GangStep, fits: Fits | None, spare: FindSpare | None = None) -> None:
    """The job's passes until it is deleted; then nothing of it stays in ``memo.gangs``."""
    loop = JobLoop(memo, namespace, name, body, indexes, gang, fits, spare)
    try:
        await run_while_leading(loop.reconcile, stopped, memo.leader)
    finally:
        memo.gangs.forget(namespace, name)
        JOB_METRICS.forget(namespace, name)


@dataclass
class Gangs:
    """What the job loops of this process share (``memo.gangs``): how to wake a loop, each job's
    phase for the jobs gauge, and the scheduler (``memo.scheduler``: the queue of gangs waiting
    for placement, the bookings in flight, each gang's published row)."""

    wakeups: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    phases: dict[tuple[str, str], str] = field(default_factory=dict)
    scheduler: Scheduler = field(default_factory=Scheduler)

    def __post_init__(self) -> None:
        self.scheduler.wake = self.wake  # a changed row wakes its job's loop

    def wakeup(self, namespace: str, name: str) -> asyncio.Event:
        """The job loop's wake-up (created by the loop itself: an entry exists while it runs)."""
        return self.wakeups.setdefault((namespace, name), asyncio.Event())

    def wake(self, namespace: str, name: str) -> None:
        """Wake a running job loop; no entry is made for a job without one (pods outlive jobs)."""
        event = self.wakeups.get((namespace, name))
        if event is not None:
            event.set()

    def wake_on_node(self, pods: Any, node: str) -> None:
        """Wake the loops of the jobs with a pod on ``node`` (gone, or quarantined): one of them
        may replace it at once instead of at its next resync."""
        for pod in list(pods):
            job = pod["metadata"].get("labels", {}).get(constants.LABEL_JOB_NAME)
            if job and (pod.get("spec") or {}).get("nodeName") == node:
                self.wake(pod["metadata"]["namespace"], job)

    def alive(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.wakeups

    def pins_written(self, namespace: str, name: str) -> None:
        self.scheduler.pins_written(f"{namespace}/{name}")

    def released(self, namespace: str, name: str, all_new: bool) -> None:
        self.scheduler.released(f"{namespace}/{name}", all_new)

    def track_phase(self, key: tuple[str, str], phase: str | None) -> None:
        if phase is None:
            self.phases.pop(key, None)
        else:
            self.phases[key] = phase
        counts: dict[str, int] = {}
        for value in self.phases.values():
            counts[value] = counts.get(value, 0) + 1
        for phase_name in ("Pending", "Scheduling", "Running", "Restarting", "Succeeded", "Failed", "Suspended"):
            JOBS.labels(phase_name).set(counts.get(phase_name, 0))

    def leave_queue(self, namespace: str, name: str) -> None:
        """The job's gang no longer waits for placement (finished, suspended, or deleted)."""
        self.scheduler.leave(f"{namespace}/{name}")

    def forget(self, namespace: str, name: str) -> None:
        """The job's loop has stopped (deleted): nothing of it stays."""
        self.wakeups.pop((namespace, name), None)
        self.leave_queue(namespace, name)
        self.track_phase((namespace, name), None)


@dataclass
class _Failures:
    """Consecutive failures of one job's loop, by kind (each backs off on its own)."""

    decide: int = 0
    api: int = 0
    refused: int = 0


class JobLoop:
    """One job's reconcile passes: observe → decide → execute → report → wait for a reason."""

    def __init__(self, memo: kopf.Memo, namespace: str, name: str, body: kopf.Body, indexes: Any,
                 gang: GangStep, fits: Fits | None, spare: FindSpare | None = None):
        """``indexes``: what the loop reads (gangstep.Indexes); ``gang``, ``fits``, ``spare``: the
        reconcile's gang step, elastic probe and spare-node finder (decide()'s)."""
        self.memo, self.namespace, self.name, self.body, self.indexes = memo, namespace, name, body, indexes
        self.key = (namespace, name)
        self.wake = memo.gangs.wakeup(namespace, name)
        self.gang = gang
        self.fits = fits
        self.spare = spare
        self.last_progress_poll = 0.0
        self.progress: dict[str, Any] | None = None
        self.progress_run: tuple[int, int] | None = None  # progress_run(status) when self.progress was read
        self.running_since: float | None = None  # when a pass first saw this start's gang Running
        self.running_run: Any = None
        self.failures = _Failures()
        self.status_written_at = -math.inf
        self.namespace_read = False

    async def reconcile(self) -> bool:
        """One pass. False once the job is deleted (its TTL ran out)."""
        self.wake.clear()
        obj, observed = await self.observe()
        started = time.perf_counter()
        plan = await self.decide(obj, observed)
        if plan is None:
            return True
        if plan.log_tail is not None:
            await self.attach_log_tail(plan)
        self.hold_ready_counts(obj, plan)
        refusals = await self.execute(obj, plan, started)
        if refusals is None:
            return True
        if refusals:
            await self.refused(obj, plan, refusals)
            return True
        self.failures.refused = 0
        await self.announce(plan)
        if plan.delete_job:
            return False
        await self.settle(plan)
        return True

    async def observe(self) -> tuple[dict[str, Any], Observed]:
        """The job as the body shows it, and its children as the indexes show them."""
        ns, name, body, indexes = self.namespace, self.name, self.body, self.indexes
        uid = body["metadata"].get("uid")
        pods = [p for p in indexes.job_pods.get(self.key, []) if _controlled(p)]
        status = dict(body.get("status") or {})
        if status.get("phase") == "Running":
            self.note_running(progress_run(status))
            if time.monotonic() - self.last_progress_poll > self.progress_poll_seconds():
                await self.read_progress()
        else:
            self.running_since = None
        spec = dict(body.get("spec") or {})
        job_nodes = _job_nodes(pods, status)
        kueued = await _kueue_admission(self.memo.kube, ns, name, spec, pods)
        observed = Observed(
            pods=pods,
            service_exists=bool(owned(indexes.job_services, (ns, service_name(name)), uid)),
            config_map_exists=bool(owned(indexes.job_config_maps, (ns, config_map_name(name)), uid)),
            network_policy_exists=bool(owned(indexes.job_network_policies, (ns, network_policy_name(name)), uid)),
            # an earlier run's report says nothing of this one (its step, where it resumed)
            progress=self.progress if self.progress_run == progress_run(status) else None,
            lost_nodes=_lost_nodes(job_nodes, indexes.cluster_nodes),
            quarantined_nodes=_quarantined_nodes(self.memo, job_nodes),
            config_map_hash=next(iter(owned(indexes.job_config_maps, (ns, config_map_name(name)), uid)), None),
            namespace_labels=await self.namespace_labels(),
            backend_schedulable=await _workload_schedulable(self.memo.kube, ns, name, spec, self.memo.config.workload_api_versions)
            or (kueued.condition() if kueued else None),
            backend_evicted=kueued.eviction() if kueued else None,
            quotas=tuple(indexes.resource_quotas.get(ns, ())),
        )
        obj = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body["metadata"]),
               "spec": spec, "status": status}
        return obj, observed

    def note_running(self, run: Any) -> None:
        """The first pass that sees this start's gang Running (a new attempt, or a restart in place)
        starts its first-step watch."""
        if self.running_since is None or run != self.running_run:
            self.running_since, self.running_run = time.monotonic(), run

    def progress_poll_seconds(self) -> float:
        """How long after its last read rank 0's progress is read again (lifecycle/pacing.py)."""
        status = self.body.get("status") or {}
        if status.get("phase") != "Running" or self.running_since is None:
            return PROGRESS_POLL_SECONDS
        current = self.progress if self.progress_run == progress_run(status) else None
        return progress_poll_seconds(current, time.monotonic() - self.running_since)

    async def read_progress(self) -> None:
        """Rank 0's report of the current run, read now."""
        run = progress_run(self.body.get("status") or {})
        pods = [p for p in self.indexes.job_pods.get(self.key, []) if _controlled(p)]
        self.last_progress_poll = time.monotonic()
        self.progress = await _poll_progress(self.memo.kube, pods, *run)
        self.progress_run = run

    async def watch_first_step(self, deadline: float) -> bool:
        """Until ``deadline`` (monotonic) or a wake-up, while the first step of the gang's start is
        awaited: read rank 0's progress every FIRST_STEP_POLL_SECONDS. True once it shows the step."""
        while self.progress_poll_seconds() == FIRST_STEP_POLL_SECONDS:
            pause = max(0.0, self.last_progress_poll + FIRST_STEP_POLL_SECONDS - time.monotonic())
            if time.monotonic() + pause >= deadline:
                return False
            await sleep_or_wake(self.wake, pause)
            if self.wake.is_set():
                return False
            await self.read_progress()
            if first_step_seen(self.progress):
                return True
        return False

    async def namespace_labels(self) -> dict[str, str] | None:
        """The namespace's labels (its policy, its Pod Security level) from the watch, but read
        from the API server on a new job's first pass: a label set just before the job may not
        have reached the watch yet, and that pass may create the gang. A job with a status was
        created long before (an operator restart or failover must not list once per job)."""
        labels = next(iter(self.indexes.namespace_labels.get(self.namespace, [None])))
        if self.namespace_read or self.memo.kube is None or (self.body.get("status") or {}).get("phase"):
            return labels
        self.namespace_read = True  # once: a role without list on namespaces keeps the watch's view
        fresh = await self.memo.kube.namespace_labels(self.namespace)
        return fresh if fresh is not None else labels

    async def decide(self, obj: dict[str, Any], observed: Observed) -> Plan | None:
        """decide(), or None after reporting that it raised (no input may kill the loop).

        It runs on ``memo.decider``'s one thread, off the event loop: rendering a 16k-node gang
        takes seconds, and the watches, the other jobs and /healthz go on meanwhile."""
        try:
            plan = await asyncio.get_running_loop().run_in_executor(
                self.memo.decider, functools.partial(decide_off_loop, obj, observed, datetime.now(UTC),
                                                     self.memo.config, gang=self.gang, fits=self.fits,
                                                     spare=self.spare))
        except Exception as exc:  # noqa: BLE001 - no input may kill the loop; it is reported
            self.failures.decide += 1
            RECONCILES.labels("error").inc()
            log.exception("deciding %s/%s failed (%d in a row)", self.namespace, self.name, self.failures.decide)
            await _report_error(self.memo.kube, self.body, obj, exc, self.failures.decide)
            await back_off(self.wake, self.failures.decide)
            return None
        self.failures.decide = 0
        if (plan.status or obj["status"]).get("phase") in (*TERMINAL_PHASES, Phase.SUSPENDED):
            self.memo.gangs.leave_queue(self.namespace, self.name)  # no gang of it waits any more
        JOB_METRICS.observe({**obj, "status": plan.status or obj["status"]}, self.progress)  # even if the write fails
        return plan

    async def execute(self, obj: dict[str, Any], plan: Plan, started: float) -> list[Refusal] | None:
        """Carry out the plan: the API server's refusals, or None after API trouble (backed off)."""
        try:
            refusals = await self.memo.kube.execute(self.namespace, plan, obj["status"], self.name,
                                                    released=self.released)
            RECONCILES.labels("ok").inc()
        except Exception:  # noqa: BLE001 - API or transport trouble: back off and retry
            self.failures.api += 1
            RECONCILES.labels("error").inc()
            self.booking_ends()
            log.exception("reconcile of %s/%s failed (%d in a row); retrying", self.namespace, self.name, self.failures.api)
            await back_off(self.wake, self.failures.api)
            return None
        finally:
            RECONCILE_SECONDS.observe(time.perf_counter() - started)
        self.failures.api = 0
        if refusals:
            self.booking_ends()
        if plan.status is not None and not refusals:
            self.status_written_at = time.monotonic()
        return refusals

    async def attach_log_tail(self, plan: Plan) -> None:
        """A hang: rank 0's last log lines into the plan's Events and conditions (read now, the
        only time the operator reads a log; decide() stays pure)."""
        raw = await self.memo.kube.pod_log_tail(self.namespace, plan.log_tail.pod, constants.CONTAINER_NAME,
                                                LOG_TAIL_LINES, LOG_TAIL_BYTES)
        attach_log_tail(plan, log_lines(raw))

    def booking_ends(self) -> None:
        """The pass stopped before its release was done (API trouble, a refusal): a placement it
        booked expires PIN_TTL_SECONDS from now instead of holding its nodes until this job's next
        pass, which may be minutes of backoff away (some pins may be written: not at once)."""
        self.memo.gangs.pins_written(self.namespace, self.name)

    def hold_ready_counts(self, obj: dict[str, Any], plan: Plan) -> None:
        """A status that only moves ready counts waits out the job's write interval (pacing.py):
        a gang turning Running pod by pod makes a write a second, not one per pod."""
        wait = hold_ready_counts(obj["status"], plan, time.monotonic() - self.status_written_at)
        if wait:
            plan.status, plan.requeue_after = None, min(plan.requeue_after or wait, wait)

    def released(self, all_new: bool) -> None:
        self.memo.gangs.released(self.namespace, self.name, all_new)

    async def refused(self, obj: dict[str, Any], plan: Plan, refusals: list[Refusal]) -> None:
        self.failures.refused += 1
        permanent, reported = await _report_refusals(self.memo, self.body, obj, plan, refusals)
        JOB_METRICS.observe({**obj, "status": reported}, self.progress)
        # permanent: the job is Failed now; the pause only guards against a stale body
        await sleep_or_wake(self.wake, 1.0 if permanent else backoff_seconds(self.failures.refused))

    async def announce(self, plan: Plan) -> None:
        """The plan's Events, and its status once the body shows it."""
        for type_, reason, message in plan.events:
            kopf.event(self.body, type=type_, reason=reason, message=message)
            if reason in (Reason.RESTARTING, Reason.RESTARTED_IN_PLACE, Reason.RESTART_REQUESTED):
                RESTARTS.inc()
        if plan.status is not None:
            self.memo.gangs.track_phase(self.key, plan.status.get("phase"))
            await await_status(self.body, plan.status, job_status_view)

    async def settle(self, plan: Plan) -> None:
        """Wait for the index to show what we did, then for a wake-up or the resync; while the
        gang's first step is awaited, a report that shows it ends the wait too."""
        await await_expectations(self.key, self.indexes.job_pods, plan)
        if plan.create or plan.delete_pods or plan.release:
            return  # re-decide at once on the fresh view
        deadline = time.monotonic() + resync_seconds(plan.requeue_after)
        if await self.watch_first_step(deadline):
            return  # a pass now: the status shows the first step
        left = deadline - time.monotonic()
        if left > 0:
            # one pass for a burst of pod events; longer for a big gang (lifecycle/pacing.py)
            await resync(self.wake, left, wake_coalesce_seconds(len(self.indexes.job_pods.get(self.key, ()))))


async def _report_refusals(memo: kopf.Memo, body: kopf.Body, obj: dict, plan: Plan,
                           refusals: list[Refusal]) -> tuple[bool, dict[str, Any]]:
    """The API server refused a creation: say so. Permanent refusals fail the job (the next pass
    deletes what it had); retryable ones are reported once and retried with backoff. Returns
    (permanent, the status as reported)."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    current = {**obj, "status": plan.status or obj.get("status")}
    status, permanent = refused_status(current, refusals, datetime.now(UTC))
    if status.get("message") == (obj.get("status") or {}).get("message"):
        return permanent, status  # already reported; retrying quietly
    await memo.kube.patch_status(namespace, name, status, current.get("status"))
    reason = Reason.CREATE_REJECTED if permanent else Reason.CREATE_REFUSED
    kopf.event(body, type="Warning", reason=reason, message=status["message"])
    if permanent:
        memo.gangs.track_phase((namespace, name), status.get("phase"))
        await await_status(body, status, job_status_view)
    return permanent, status


async def _report_error(kube: Kube, body: kopf.Body, obj: dict, exc: Exception, count: int) -> None:
    """decide() raised: a ReconcileError condition now, Failed once it keeps happening."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    final = count >= MAX_DECIDE_ERRORS
    status = error_status(obj, f"{type(exc).__name__}: {exc}", datetime.now(UTC), final=final)
    try:
        await kube.patch_status(namespace, name, status, obj.get("status"))
    except Exception:  # noqa: BLE001 - reported in the log above; the loop goes on
        log.exception("could not report the error of %s/%s", namespace, name)
        return
    if status.get("message") != (obj.get("status") or {}).get("message"):
        kopf.event(body, type="Warning", reason=Reason.RECONCILE_ERROR, message=status["message"])


def _controlled(pod: dict[str, Any]) -> bool:
    """A pod some controller owns: this job's, or an earlier job's of its name (set aside by
    reconcile). One that only carries the job label is not the job's: its name, if the job needs
    it, becomes a refusal naming it (Kube.create)."""
    return any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or [])


def _job_nodes(pods: list[dict[str, Any]], status: dict[str, Any]) -> set[str]:
    """The nodes of this job's pods and of its placement (status.placement.nodes: a node-rank's
    node even while its pod is gone)."""
    placed = (status.get("placement") or {}).get("nodes")
    nodes = [pod["spec"].get("nodeName") for pod in pods] + (placed if isinstance(placed, list) else [])
    return {node for node in nodes if isinstance(node, str) and node}


def _quarantined_nodes(memo: kopf.Memo, nodes: set[str]) -> frozenset[str]:
    """The job's nodes that a NodeQuarantine names."""
    quarantined = memo.gangs.scheduler.quarantined()
    return frozenset(nodes.intersection(quarantined)) if quarantined else frozenset()


def _lost_nodes(nodes: Iterable[str], cluster_nodes: kopf.Index) -> frozenset[str]:
    """The job's nodes that are gone from the inventory or not Ready."""
    lost = set()
    for node in nodes:
        entry = next(iter(cluster_nodes.get(node, [])), None)
        if entry is None or not entry.ready:
            lost.add(node)
    return frozenset(lost)


def progress_run(status: dict[str, Any]) -> tuple[int, int]:
    """The run a progress report belongs to: the attempt (a recreated gang is a new one) and the
    gang's restarts in place (the same pods, their containers started again)."""
    return status.get("restartAttempt") or 0, status.get("inPlaceRestarts") or 0


async def _poll_progress(kube: Kube | None, pods: list[dict[str, Any]], attempt: int,
                         in_place_restarts: int = 0) -> dict[str, Any] | None:
    """Rank 0's report, parsed strictly (user code serves it); None when unreachable or malformed.
    Only the current run's rank 0: an earlier attempt's pod may still be terminating, and a rank 0
    whose trainer has not restarted in place as often as the gang still serves the run before."""
    rank0 = [p for p in pods if p["metadata"]["labels"].get(constants.LABEL_NODE_RANK) == "0"
             and p["status"].get("podIP") and attempt_of(p) == attempt and trainer_restarts(p) >= in_place_restarts]
    if not rank0 or kube is None:
        return None
    pod, problems = rank0[-1], []
    report = parse_progress(await kube.get_progress(pod["status"]["podIP"], progress_port(pod)), problems)
    if problems:
        log.debug("progress of %s: %s", pod["metadata"]["name"], "; ".join(problems))
    return report



async def _workload_schedulable(kube: Kube, namespace: str, name: str, spec: dict[str, Any],
                                workload_api_versions: tuple[str, ...] | None) -> Schedulable | None:
    """The job's PodGroup verdict (workload backend, v1alpha2 only), for the Schedulable condition."""
    if not backend_named((spec.get("scheduling") or {}).get("backend")).reads_pod_group(workload_api_versions):
        return None
    try:
        pod_group = await kube.get_custom(f"{constants.WORKLOAD_API_GROUP}/v1alpha2", "podgroups", namespace,
                                          workload_backend.pod_group_name(name))
    except Exception:  # noqa: BLE001 - unreadable now: the condition stays as it was
        log.warning("reading the PodGroup of %s/%s failed", namespace, name, exc_info=True)
        return None
    return workload_backend.schedulable(pod_group)


async def _kueue_admission(kube: Kube, namespace: str, name: str, spec: dict[str, Any], pods: list[dict[str, Any]]) -> kueue_backend.Admission | None:
    """Kueue's verdict on the job's pod group (kueue backend): its Workload, named after the group."""
    if not backend_named((spec.get("scheduling") or {}).get("backend")).reads_kueue_workload:
        return None
    workload = None
    try:
        workload = await kube.get_custom(f"{kueue_backend.KUEUE_GROUP}/{kueue_backend.KUEUE_VERSION}",
                                         kueue_backend.WORKLOADS, namespace, kueue_backend.workload_name(pods, name))
    except Exception:  # noqa: BLE001 - unreadable now (no Kueue, no RBAC): the pods' gates still tell
        log.warning("reading the Kueue Workload of %s/%s failed", namespace, name, exc_info=True)
    return kueue_backend.admission(workload, pods)


def owned(index: kopf.Index, key: tuple[str, str], uid: str | None) -> list[Any]:
    """The values under ``key`` (each indexed as ``(owner uid, value)``) whose owner is ``uid``."""
    return [value for owner, value in index.get(key, []) if owner == uid]
