"""kopf wiring only: indexes observe, one daemon per job runs the pure reconcile and the executor.

Level-based: each job's daemon re-decides from the indexes whenever a child changes (woken by
events) and at least every RESYNC_SECONDS, so a missed event or an operator restart converges.

Everything process-wide travels in kopf's ``memo`` (``new_memo``; the startup handler adds the
API client): ``config`` (OperatorConfig), ``kubeconfig``, ``kube`` (kube.Kube), ``leader``
(leader.Elector with --leader-elect, else None), ``namespaces`` (the served ones, None: all),
``pod_reflector`` (podreflector.PodReflector: every pod, and each job's pods), ``gangs`` (the job loops' shared bookkeeping, ``Gangs``),
``scheduler`` (scheduler.Scheduler: the one gang queue and its published rows; ``scheduler_task`` runs its
cycles) and ``decider`` (the one thread every ``decide()`` runs on, off the event loop: ``JobLoop.decide``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import logging
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf

from phalanx import constants as C
from phalanx import health
from phalanx.api.config import OperatorConfig
from phalanx.api.types import TERMINAL_PHASES, Phase, TrainingJob
from phalanx.backends import kueue as kueue_backend
from phalanx.backends import workload as workload_backend
from phalanx.constants import Reason
from phalanx.decision import Fits, GangDecision, GangStep, Observed, Plan
from phalanx.gang.admission import decision_for, gang_request
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.planner import GangRequest
from phalanx.gang.quota import quota_entry
from phalanx.jobmetrics import JOB_METRICS
from phalanx.kube import Kube, load_client
from phalanx.lifecycle.pacing import hold_ready_counts, wake_coalesce_seconds
from phalanx.lifecycle.pods import is_gated
from phalanx.lifecycle.progress import parse_progress, progress_port
from phalanx.lifecycle.reconcile import decide
from phalanx.lifecycle.refusals import (
    MAX_DECIDE_ERRORS,
    Refusal,
    error_status,
    refused_status,
    retry_delay,
)
from phalanx.metrics import JOBS, RECONCILE_SECONDS, RECONCILES, RESTARTS
from phalanx.pending import compact_pods
from phalanx.podreflector import PodReflector
from phalanx.render.names import config_map_name, network_policy_name, service_name
from phalanx.scheduler import Row, Scheduler, on_loop

log = logging.getLogger("phalanx.operator")

RESYNC_SECONDS = 10.0
EXPECTATION_TIMEOUT = 5.0
PROGRESS_EVERY = 5.0
GC_PAUSE_MIN_NODES = 1024  # decide() of a gang this big runs with the cyclic GC paused (_decide_off_loop)


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


def new_memo(config: OperatorConfig | None = None, kubeconfig: str | None = None, leader: Any = None) -> kopf.Memo:
    """The operator's startup settings and shared state, handed to ``kopf.operator(memo=...)``."""
    gangs = Gangs()
    return kopf.Memo(config=config or OperatorConfig(), kubeconfig=kubeconfig, kube=None, leader=leader,
                     namespaces=None, pod_reflector=None, gangs=gangs, scheduler=gangs.scheduler, scheduler_task=None,
                     sweep_wakeups={},
                     decider=concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="phalanx-decide"))


def _gang_pods(spec: dict[str, Any]) -> int:
    """Pods of the gang as the raw spec says (workers and spec.roles), 0 where it is malformed."""
    counts = [spec.get("nodes")] + [r.get("replicas", 1) for r in spec.get("roles") or [] if isinstance(r, dict)]
    return sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool))


# monotonic start of the decide running now (None: idle): /healthz fails on one that never ends
_decide_started: list[float | None] = [None]


def _decide_off_loop(obj: dict[str, Any], *args: Any, **kwargs: Any) -> Plan:
    """decide() on the decide thread; for a big gang with the cyclic GC paused: a 16k-pod render
    allocates millions of containers, and every full collection meanwhile (one per 25 % of heap
    growth, 9 in that render) holds the GIL for as long as it walks the heap — the event loop
    stalled for 1-1.5 s each on the shared dev VM. Only big gangs: decides run back to back, and
    a collector paused for all of them would let cyclic garbage pile up. Reference counting frees
    what the render drops; the collector runs on its thresholds again as soon as it returns."""
    paused = _gang_pods(obj.get("spec") or {}) >= GC_PAUSE_MIN_NODES and gc.isenabled()
    if paused:
        gc.disable()
    _decide_started[0] = time.monotonic()
    try:
        plan = decide(obj, *args, **kwargs)
        plan.create = compact_pods(plan.create)  # kept as JSON until sent (phalanx.pending)
        return plan
    finally:
        _decide_started[0] = None
        if paused:
            gc.enable()


class JobGone(Exception):
    """The job's loop stopped (the job was deleted) while its decide() ran: nothing is queued."""


# --------------------------------------------------------------------------------------------
# Start-up


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: kopf builds one on every event of every watched resource (a deepcopy of the
    whole body, managedFields included: 7 % of the operator's samples with 64 jobs starting), but
    only change-detecting handlers (on.create/update/delete/field) read it, and this operator
    registers none (its daemons and event handlers decide from the live state). An empty essence
    on both sides: no diff, nothing stored. tests/unit/test_kopf_settings.py fails if a
    change-detecting handler is ever registered."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=C.ANNOTATION_KOPF_PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = C.FINALIZER
    settings.posting.level = logging.WARNING  # our Events are explicit; no per-handler chatter
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10]
    settings.queueing.worker_limit = 1000
    settings.scanning.disabled = True  # no CRD/namespace scanning: least-privilege RBAC
    for key, value in new_memo().items():  # run without phalanx.main (e.g. `kopf run`): the defaults
        memo.setdefault(key, value)
    memo.kube = Kube(load_client(memo.kubeconfig), concurrency=memo.config.pod_create_concurrency)
    await _discover_workload_api(memo.kube)
    if memo.pod_reflector is None:
        memo.pod_reflector = await _start_pod_reflector(memo)
    if memo.scheduler_task is None:
        memo.scheduler_task = asyncio.create_task(memo.scheduler.run(memo.decider, memo.config), name="phalanx-scheduler")


async def _start_pod_reflector(memo: kopf.Memo) -> PodReflector:
    """Every pod, listed before any job loop runs (a loop that saw no pods would create them again)."""
    reflector = PodReflector(load_client(memo.kubeconfig, pool_size=2), namespaces=memo.namespaces,
                             on_job=memo.gangs.wake, on_freed=memo.scheduler.changed)
    reflector.start(asyncio.get_running_loop())
    await reflector.synced.wait()
    return reflector


async def _discover_workload_api(kube: Kube) -> None:
    """Which Workload API version (scheduling.k8s.io) the cluster serves, for the workload backend."""
    try:
        version = workload_backend.pick_api_version(await kube.served_resources(C.WORKLOAD_API_GROUP))
    except Exception:  # noqa: BLE001 - discovery refused or failed: render the newest shape
        log.warning("Workload API discovery failed; assuming scheduling.k8s.io/%s", workload_backend.LATEST, exc_info=True)
        return
    workload_backend.use_served([version] if version else [])
    log.info("Workload API: %s", f"scheduling.k8s.io/{version}" if version else "not served")


async def _workload_schedulable(kube: Kube, namespace: str, name: str, spec: dict[str, Any]) -> tuple[Any, str, str] | None:
    """The job's PodGroup verdict (workload backend, v1alpha2 only), for the Schedulable condition."""
    if (spec.get("scheduling") or {}).get("backend") != "workload" or workload_backend.served_version() != "v1alpha2":
        return None
    try:
        pod_group = await kube.get_custom(f"{C.WORKLOAD_API_GROUP}/v1alpha2", "podgroups", namespace,
                                          workload_backend.pod_group_name(name))
    except Exception:  # noqa: BLE001 - unreadable now: the condition stays as it was
        log.warning("reading the PodGroup of %s/%s failed", namespace, name, exc_info=True)
        return None
    return workload_backend.schedulable(pod_group)


async def _kueue_admission(kube: Kube, namespace: str, name: str, spec: dict[str, Any], pods: list[dict[str, Any]]) -> kueue_backend.Admission | None:
    """Kueue's verdict on the job's pod group (kueue backend): its Workload, named after the group."""
    if (spec.get("scheduling") or {}).get("backend") != "kueue":
        return None
    workload = None
    try:
        workload = await kube.get_custom(f"{kueue_backend.KUEUE_GROUP}/{kueue_backend.KUEUE_VERSION}",
                                         kueue_backend.WORKLOADS, namespace, kueue_backend.workload_name(pods, name))
    except Exception:  # noqa: BLE001 - unreadable now (no Kueue, no RBAC): the pods' gates still tell
        log.warning("reading the Kueue Workload of %s/%s failed", namespace, name, exc_info=True)
    return kueue_backend.admission(workload, pods)


@kopf.on.probe(id="serving")
async def serving(memo: kopf.Memo, **_: Any) -> str:
    """/healthz fails (kopf answers 500) when a watch or a thread the job loops need is gone."""
    now = time.monotonic()
    tasks = [health.TaskView(t.get_name(), t.done()) for t in asyncio.all_tasks()]
    watchers = frozenset(t.name for t in tasks if t.name.startswith(health.WATCHER_PREFIX) and not t.done)
    memo.watchers_seen = memo.get("watchers_seen", frozenset()) | watchers  # scanning is off: a fixed set
    reflector = memo.get("pod_reflector")
    started = _decide_started[0]
    problems = health.watcher_problems(tasks, memo.watchers_seen) + health.thread_problems(
        reflector.thread.is_alive() if reflector is not None and reflector.thread is not None else None,
        now - reflector.failing_since if reflector is not None and reflector.failing_since else None,
        now - started if started is not None else None)
    if problems:
        log.error("unhealthy: %s", "; ".join(problems))
        raise kopf.PermanentError("; ".join(problems))
    return "ok"


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    if memo.get("scheduler_task") is not None:
        memo.scheduler_task.cancel()
    if memo.get("kube") is not None:
        memo.kube.pool.shutdown(wait=False, cancel_futures=True)
    if memo.get("decider") is not None:
        memo.decider.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------------------------
# Indexes (in-memory inventories kept by kopf's watches)


# A child counts only when its owner reference names the job's uid (``owned``): an object that
# merely carries the job label, or a predecessor's under the same name, is never taken for it.
def _owner(body: kopf.Body) -> str | None:
    refs = body.get("metadata", {}).get("ownerReferences") or []
    return next((o.get("uid") for o in refs if isinstance(o, dict) and o.get("controller")), None)


@kopf.index("services", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_services(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): (_owner(body), True)}


@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_network_policies(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): (_owner(body), True)}


@kopf.index("configmaps", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_config_maps(namespace: str, name: str, annotations: dict[str, str], body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): (_owner(body), annotations.get(C.ANNOTATION_SPEC_HASH))}


def owned(index: kopf.Index, key: tuple[str, str], uid: str | None) -> list[Any]:
    """The values under ``key`` (each indexed as ``(owner uid, value)``) whose owner is ``uid``."""
    return [value for owner, value in index.get(key, []) if owner == uid]


@kopf.index("nodes")
def cluster_nodes(name: str, body: kopf.Body, **_: Any) -> dict:
    """Each node parsed once per change (not once per pass): an unchanged node keeps its object,
    so the planner's topology is reused until a node changes (``topology_for``). A quantity that
    does not parse leaves the node indexed with nothing allocatable: never placed on, not lost."""
    try:
        return {name: NodeInfo.from_node(body)}
    except ValueError as exc:
        log.warning("node %s: %s; indexed with nothing allocatable", name, exc)
        status = {**(body.get("status") or {}), "allocatable": {}, "capacity": {}}
        return {name: NodeInfo.from_node({**body, "status": status})}


@kopf.index("namespaces")
def namespace_labels(name: str, labels: dict[str, str], **_: Any) -> dict:
    """Each namespace's labels: which policy applies, which Pod Security level it enforces."""
    return {name: dict(labels)}


@kopf.index("resourcequotas")
def resource_quotas(namespace: str, body: kopf.Body, **_: Any) -> dict:
    """Each namespace's quotas: a gang is created pinned only when all of it fits them."""
    return {namespace: quota_entry(body)}


@kopf.index("scheduling.k8s.io", "v1", "priorityclasses")
def priority_classes(name: str, body: kopf.Body, **_: Any) -> dict:
    return {name: int(body.get("value", 0))}



@kopf.on.event("nodes")
async def node_changed(memo: kopf.Memo, cluster_nodes: kopf.Index, **_: Any) -> None:
    """Capacity may have changed: the scheduler plans the queue again (once for a burst). Async:
    on the event loop, where the scheduler's state lives (kopf runs a sync handler in a thread)."""
    memo.scheduler.attach(cluster_nodes, memo.pod_reflector)
    memo.scheduler.changed()


@dataclass
class Indexes:
    """The indexes one job loop reads: kopf's, and the PodReflector's (``job_pods``, ``usage``)."""

    job_pods: Any
    job_services: kopf.Index
    job_config_maps: kopf.Index
    job_network_policies: kopf.Index
    cluster_nodes: kopf.Index
    usage: Any
    priority_classes: kopf.Index
    namespace_labels: kopf.Index
    resource_quotas: kopf.Index


def _values(index: kopf.Index) -> list[Any]:
    return [value for store in index.values() for value in store]


def _priority(job: TrainingJob, priority_classes: kopf.Index) -> int:
    name = job.spec.scheduling.priority_class_name
    return next(iter(priority_classes.get(name, [0]))) if name else 0


def native_gang_step(memo: kopf.Memo, ix: Indexes) -> GangStep:
    """The reconcile's gang step: this gang's row of the scheduler's plan of every waiting gang;
    pin and release it only if it is placed. It runs inside decide(), on the one decide thread,
    as the scheduler's cycles do, so plans never interleave; what it reads and writes of the
    indexes and the scheduler it does on the event loop (``on_loop``). A gang with no row for its
    request yet (its first plan) is planned at once, by a cycle run from this pass."""
    gangs, scheduler, config = memo.gangs, memo.scheduler, memo.config
    loop = _running_loop()

    def step(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
        namespace, name = job.metadata.namespace, job.metadata.name
        key = f"{namespace}/{name}"
        request = gang_request(job, config, _priority(job, ix.priority_classes))

        def alive() -> None:
            if loop is not None and not gangs.alive(namespace, name):
                raise JobGone(key)

        def join() -> Row | None:
            alive()
            scheduler.attach(ix.cluster_nodes, ix.usage)
            return scheduler.submit(key, request)

        def read() -> tuple[Row | None, list[Any]]:
            alive()
            return scheduler.row(key, request), _values(ix.cluster_nodes)

        if on_loop(loop, join) is None:
            scheduler.cycle(loop, config, quiet=key)
        row, nodes = on_loop(loop, read)
        if row is None:
            raise JobGone(key)  # left the queue while planned: only a stopped loop does that
        decision = decision_for(job, row.result, pods, nodes, config)
        if decision.release:

            def booked() -> None:
                alive()
                scheduler.book(key, row)

            on_loop(loop, booked)
        return decision

    return step


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def elastic_probe(memo: kopf.Memo, namespace: str, name: str, ix: Indexes) -> Fits:
    """Could this job's gang be placed at another size? Its own pods count as free (they would be
    replaced); other waiting gangs keep their queue order; nothing is queued, pinned or booked."""
    scheduler, config = memo.scheduler, memo.config
    loop = _running_loop()

    def fits(candidate: TrainingJob) -> bool:
        def request() -> GangRequest:
            scheduler.attach(ix.cluster_nodes, ix.usage)
            return gang_request(candidate, config, _priority(candidate, ix.priority_classes))

        return scheduler.probe(loop, on_loop(loop, request), config)

    return fits


# --------------------------------------------------------------------------------------------
# The per-job loop


@kopf.daemon(C.GROUP, C.VERSION, C.PLURAL, cancellation_timeout=10.0)
async def job_loop(
    name: str,
    namespace: str,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    memo: kopf.Memo,
    job_services: kopf.Index,
    job_config_maps: kopf.Index,
    job_network_policies: kopf.Index,
    cluster_nodes: kopf.Index,
    priority_classes: kopf.Index,
    namespace_labels: kopf.Index,
    resource_quotas: kopf.Index,
    **_: Any,
) -> None:
    pods = memo.pod_reflector
    ix = Indexes(pods.job_pods, job_services, job_config_maps, job_network_policies, cluster_nodes, pods,
                 priority_classes, namespace_labels, resource_quotas)
    loop = JobLoop(memo, namespace, name, body, ix)
    try:
        while not stopped:
            # a standby keeps its indexes warm and decides nothing until it holds the lease
            if memo.leader is not None and not await memo.leader.wait_leading(stopped):
                break
            if not await loop.reconcile():
                return
    finally:
        memo.gangs.forget(namespace, name)
        JOB_METRICS.forget(namespace, name)


@dataclass
class _Failures:
    """Consecutive failures of one job's loop, by kind (each backs off on its own)."""

    decide: int = 0
    api: int = 0
    refused: int = 0


class JobLoop:
    """One job's reconcile passes: observe → decide → execute → report → wait for a reason."""

    def __init__(self, memo: kopf.Memo, namespace: str, name: str, body: kopf.Body, ix: Indexes):
        self.memo, self.namespace, self.name, self.body, self.ix = memo, namespace, name, body, ix
        self.key = (namespace, name)
        self.wake = memo.gangs.wakeup(namespace, name)
        self.gang = native_gang_step(memo, ix)
        self.fits = elastic_probe(memo, namespace, name, ix)
        self.last_progress_poll = 0.0
        self.progress: dict[str, Any] | None = None
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
        ns, name, body, ix = self.namespace, self.name, self.body, self.ix
        uid = body["metadata"].get("uid")
        pods = [p for p in ix.job_pods.get(self.key, []) if _controlled(p)]
        status = dict(body.get("status") or {})
        if status.get("phase") == "Running" and time.monotonic() - self.last_progress_poll > PROGRESS_EVERY:
            self.last_progress_poll = time.monotonic()
            self.progress = await _poll_progress(self.memo.kube, pods)
        spec = dict(body.get("spec") or {})
        kueued = await _kueue_admission(self.memo.kube, ns, name, spec, pods)
        observed = Observed(
            pods=pods,
            service_exists=bool(owned(ix.job_services, (ns, service_name(name)), uid)),
            config_map_exists=bool(owned(ix.job_config_maps, (ns, config_map_name(name)), uid)),
            network_policy_exists=bool(owned(ix.job_network_policies, (ns, network_policy_name(name)), uid)),
            progress=self.progress,
            lost_nodes=_lost_nodes(pods, ix.cluster_nodes),
            config_map_hash=next(iter(owned(ix.job_config_maps, (ns, config_map_name(name)), uid)), None),
            namespace_labels=await self.namespace_labels(),
            backend_schedulable=await _workload_schedulable(self.memo.kube, ns, name, spec)
            or (kueued.condition() if kueued else None),
            backend_evicted=kueued.eviction() if kueued else None,
            quotas=tuple(ix.resource_quotas.get(ns, ())),
        )
        obj = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body["metadata"]),
               "spec": spec, "status": status}
        return obj, observed

    async def namespace_labels(self) -> dict[str, str] | None:
        """The namespace's labels (its policy, its Pod Security level) from the watch, but read
        from the API server on a new job's first pass: a label set just before the job may not
        have reached the watch yet, and that pass may create the gang. A job with a status was
        created long before (an operator restart or failover must not list once per job)."""
        labels = next(iter(self.ix.namespace_labels.get(self.namespace, [None])))
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
                self.memo.decider, functools.partial(_decide_off_loop, obj, observed, datetime.now(UTC),
                                                     self.memo.config, gang=self.gang, fits=self.fits))
        except Exception as exc:  # noqa: BLE001 - no input may kill the loop; it is reported
            self.failures.decide += 1
            RECONCILES.labels("error").inc()
            log.exception("deciding %s/%s failed (%d in a row)", self.namespace, self.name, self.failures.decide)
            await _report_error(self.memo.kube, self.body, obj, exc, self.failures.decide)
            await sleep_or_wake(self.wake, retry_delay(self.failures.decide))
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
            log.exception("reconcile of %s/%s failed (%d in a row); retrying", self.namespace, self.name, self.failures.api)
            await sleep_or_wake(self.wake, retry_delay(self.failures.api))
            return None
        finally:
            RECONCILE_SECONDS.observe(time.perf_counter() - started)
        self.failures.api = 0
        if plan.status is not None and not refusals:
            self.status_written_at = time.monotonic()
        return refusals

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
        await sleep_or_wake(self.wake, 1.0 if permanent else retry_delay(self.failures.refused))

    async def announce(self, plan: Plan) -> None:
        """The plan's Events, and its status once the body shows it."""
        for type_, reason, message in plan.events:
            kopf.event(self.body, type=type_, reason=reason, message=message)
            if reason == Reason.RESTARTING:
                RESTARTS.inc()
        if plan.status is not None:
            self.memo.gangs.track_phase(self.key, plan.status.get("phase"))
            await _await_status(self.body, plan.status)

    async def settle(self, plan: Plan) -> None:
        """Wait for the index to show what we did, then for a wake-up or the resync."""
        await _await_expectations(self.key, self.ix.job_pods, plan)
        if plan.create or plan.delete_pods or plan.release:
            return  # re-decide at once on the fresh view
        delay = min(plan.requeue_after or RESYNC_SECONDS, RESYNC_SECONDS)
        try:
            await asyncio.wait_for(self.wake.wait(), timeout=delay)
            # one pass for a burst of pod events; longer for a big gang (lifecycle/pacing.py)
            await asyncio.sleep(wake_coalesce_seconds(len(self.ix.job_pods.get(self.key, ()))))
        except TimeoutError:
            pass


async def sleep_or_wake(wake: asyncio.Event, seconds: float, coalesce: float = 0.0) -> None:
    """Sleep ``seconds`` or until woken; ``coalesce``: after a wake, wait that long more so a
    burst of events makes one pass."""
    try:
        await asyncio.wait_for(wake.wait(), timeout=seconds)
        if coalesce:
            await asyncio.sleep(coalesce)
    except TimeoutError:
        pass


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
        await _await_status(body, status)
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


def _lost_nodes(pods: list[dict[str, Any]], cluster_nodes: kopf.Index) -> frozenset[str]:
    """Nodes of this job's pods that are gone from the inventory or not Ready."""
    lost = set()
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        entry = next(iter(cluster_nodes.get(node, [])), None)
        if entry is None or not entry.ready:
            lost.add(node)
    return frozenset(lost)


async def _poll_progress(kube: Kube | None, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rank 0's report, parsed strictly (user code serves it); None when unreachable or malformed."""
    rank0 = [p for p in pods if p["metadata"]["labels"].get(C.LABEL_NODE_RANK) == "0" and p["status"].get("podIP")]
    if not rank0 or kube is None:
        return None
    pod, problems = rank0[-1], []
    report = parse_progress(await kube.get_progress(pod["status"]["podIP"], progress_port(pod)), problems)
    if problems:
        log.debug("progress of %s: %s", pod["metadata"]["name"], "; ".join(problems))
    return report


async def _await_status(body: kopf.Body, written: dict[str, Any]) -> None:
    """Wait until the live body shows what we wrote, so the next pass never decides on stale status."""
    deadline = time.monotonic() + EXPECTATION_TIMEOUT
    # placement: a gang created pinned is placed in a pass that may change none of the others,
    # and a next pass on the stale body would write the earlier attempt's placement back
    keys = ("phase", "restartAttempt", "restarts", "attemptCreated", "placement")
    while time.monotonic() < deadline:
        now = body.get("status") or {}
        if all(now.get(k) == written.get(k) for k in keys):
            return
        await asyncio.sleep(0.05)


async def _await_expectations(key: tuple[str, str], index: kopf.Index, plan: Plan) -> None:
    """Controller expectations: wait until the index has seen our creates, deletes and releases
    (a pass on a view that still shows released pods gated would release them again)."""
    created = {o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"}
    deleted, released = set(plan.delete_pods), set(plan.release)
    if not created and not deleted and not released:
        return
    deadline = time.monotonic() + EXPECTATION_TIMEOUT
    while time.monotonic() < deadline:
        pods = list(index.get(key, []))
        names = {p["metadata"]["name"] for p in pods}
        going = {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}
        still_gated = {p["metadata"]["name"] for p in pods if p["metadata"]["name"] in released and is_gated(p)}
        if created <= names and not ((deleted & names) - going) and not still_gated:
            return
        await asyncio.sleep(0.05)
