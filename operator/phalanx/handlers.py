"""kopf wiring only: what the operator registers with kopf, each handler handing on to the module
that does the work — indexes observe, one daemon per job runs its loop (``phalanx.jobloop``),
startup, health and cleanup (``phalanx.startup``).

Level-based: each job's daemon re-decides from the indexes whenever a child changes (woken by
events) and at least every RESYNC_SECONDS (``phalanx.controlloop``), so a missed event or an
operator restart converges.

Everything process-wide travels in kopf's ``memo`` (``new_memo``; the startup handler adds the
API client): ``config`` (OperatorConfig), ``kubeconfig``, ``kube`` (kube.Kube), ``leader``
(leader.Elector with --leader-elect, else None), ``namespaces`` (the served ones, None: all),
``pod_reflector`` (podreflector.PodReflector: every pod, and each job's pods), ``gangs`` (the job loops' shared bookkeeping, ``Gangs``),
``sweep_wakeups`` (the sweep loops' wake-ups, controlloop.Wakeups) and ``decider`` (the one
thread every ``decide()`` runs on, off the event loop: ``JobLoop.decide``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import kopf

from phalanx import constants as C
from phalanx import startup
from phalanx.api.config import OperatorConfig
from phalanx.api.types import TrainingJob
from phalanx.controlloop import Wakeups
from phalanx.decision import Fits, GangDecision, GangStep
from phalanx.gang.admission import admit, decision_for, gang_request
from phalanx.gang.inventory import NodeInfo, Reservation
from phalanx.gang.planner import GangRequest, Placement
from phalanx.gang.quota import quota_entry
from phalanx.jobloop import run_job
from phalanx.metrics import JOBS
from phalanx.offloop import JobGone, new_decider
from phalanx.offloop import on_loop as _on_loop

log = logging.getLogger("phalanx.operator")

PIN_TTL_SECONDS = 30.0  # after this the index shows the pins (nodeSelector) itself


@dataclass
class Gangs:
    """What the job loops of this process share (``memo.gangs``): how to wake a loop, the queue of
    gangs waiting for placement, the pins in flight, and each job's phase for the jobs gauge."""

    wakeups: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    waiting: dict[str, GangRequest] = field(default_factory=dict)  # gangs whose pods all exist, gated, by "ns/name" (a queue, no capacity)
    # Pins not yet seen in the index. No reservation lives only here: a pin is written into the
    # pods (release patch: node affinity) before it is recorded, and the planner reads pins back
    # from the pod index (reservations_from_pods); this only bridges the watch's lag. A new
    # leader starts with it empty, safely: the old leader stopped writing renew_deadline after
    # its last renew, lease_duration - renew_deadline (5 s by default) before the lease could be
    # taken over, while the standby's warm pod index was already receiving those pins.
    pending: dict[str, tuple[list[Reservation], float]] = field(default_factory=dict)
    phases: dict[tuple[str, str], str] = field(default_factory=dict)

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

    def wake_waiting(self) -> None:
        """Capacity may have freed: every waiting gang plans again."""
        for key in list(self.waiting):
            namespace, name = key.split("/", 1)
            self.wake(namespace, name)

    def pins_written(self, namespace: str, name: str) -> None:
        """The job's release patches (its pins) are written: the index shows them within
        PIN_TTL_SECONDS from now. Until then a booked pin never expires — at scale the patches
        of many gangs queue for minutes, and a pin expired before its patch lands lets another
        gang book the same node."""
        entry = self.pending.get(f"{namespace}/{name}")
        if entry is not None:
            self.pending[f"{namespace}/{name}"] = (entry[0], time.monotonic())

    def released(self, namespace: str, name: str, all_new: bool) -> None:
        """The job's release patches are done. If a pod had been released already (the pass
        planned from a view the watch had not caught up with), the booking pins nothing: it goes
        at once instead of holding other nodes for PIN_TTL_SECONDS."""
        if all_new:
            self.pins_written(namespace, name)
        else:
            self.pending.pop(f"{namespace}/{name}", None)

    def pending_pins(self, except_key: str) -> list[Reservation]:
        """Other gangs' pins that the pod index may not show yet (booked and not yet written, or
        written less than PIN_TTL_SECONDS ago); older ones are dropped."""
        now = time.monotonic()
        for key in [k for k, (_, t) in self.pending.items() if now - t >= PIN_TTL_SECONDS]:
            del self.pending[key]
        return [r for k, (rs, _) in self.pending.items() if k != except_key for r in rs]

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
        self.waiting.pop(f"{namespace}/{name}", None)
        self.pending.pop(f"{namespace}/{name}", None)

    def forget(self, namespace: str, name: str) -> None:
        """The job's loop has stopped (deleted): nothing of it stays."""
        self.wakeups.pop((namespace, name), None)
        self.leave_queue(namespace, name)
        self.track_phase((namespace, name), None)


def new_memo(config: OperatorConfig | None = None, kubeconfig: str | None = None, leader: Any = None) -> kopf.Memo:
    """The operator's startup settings and shared state, handed to ``kopf.operator(memo=...)``."""
    return kopf.Memo(config=config or OperatorConfig(), kubeconfig=kubeconfig, kube=None, leader=leader,
                     namespaces=None, pod_reflector=None, gangs=Gangs(), sweep_wakeups=Wakeups(),
                     decider=new_decider())


# --------------------------------------------------------------------------------------------
# Start-up, health, cleanup


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    await startup.configure(settings, memo, defaults=new_memo())


@kopf.on.probe(id="serving")
async def serving(memo: kopf.Memo, **_: Any) -> str:
    """/healthz fails (kopf answers 500) when a watch or a thread the job loops need is gone."""
    problems = startup.problems(memo)
    if problems:
        log.error("unhealthy: %s", "; ".join(problems))
        raise kopf.PermanentError("; ".join(problems))
    return "ok"


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    startup.shutdown(memo)


# --------------------------------------------------------------------------------------------
# Indexes (in-memory inventories kept by kopf's watches)


# A child counts only when its owner reference names the job's uid (``jobloop.owned``): an object that
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
def node_changed(memo: kopf.Memo, **_: Any) -> None:
    memo.gangs.wake_waiting()


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
    """The reconcile's gang step: plan every waiting gang together; pin and release this one
    only if it is placed. Runs inside decide(), on the one decide thread, so plans never
    interleave; what it reads and writes of the indexes and ``Gangs`` it does on the event loop
    (``_on_loop``), the planning itself on the decide thread."""
    gangs, config = memo.gangs, memo.config
    loop = _running_loop()

    def step(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
        namespace, name = job.metadata.namespace, job.metadata.name
        key = f"{namespace}/{name}"

        def enqueue() -> tuple[list[GangRequest], list[Any], list[Any], list[Reservation]]:
            if loop is not None and not gangs.alive(namespace, name):
                raise JobGone(key)
            gangs.waiting[key] = gang_request(job, config, _priority(job, ix.priority_classes))
            gangs.pending.pop(key, None)  # re-planned: an earlier booking (its release failed) is void
            return (list(gangs.waiting.values()), _values(ix.cluster_nodes), list(ix.usage.get(None, [])),
                    gangs.pending_pins(except_key=key))

        waiting, nodes, usage, pending = _on_loop(loop, enqueue)
        result = admit(waiting, nodes, usage, config, pending).results[key]
        decision = decision_for(job, result, pods, nodes, config)
        if decision.release:

            def booked() -> None:
                if loop is not None and not gangs.alive(namespace, name):
                    raise JobGone(key)
                gangs.waiting.pop(key, None)
                gangs.pending[key] = (result.reservations(), math.inf)  # until pins_written

            _on_loop(loop, booked)
        return decision

    return step


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def elastic_probe(memo: kopf.Memo, namespace: str, name: str, ix: Indexes) -> Fits:
    """Could this job's gang be placed at another size? Its own pods count as free (they would be
    replaced); other waiting gangs keep their queue order; nothing is pinned or reserved."""
    key = f"{namespace}/{name}"
    gangs, config = memo.gangs, memo.config
    loop = _running_loop()

    def fits(candidate: TrainingJob) -> bool:
        def inputs() -> tuple[list[Any], list[Reservation], list[GangRequest], list[Any]]:
            return (list(ix.usage.get(None, [])), gangs.pending_pins(except_key=key),
                    [g for k, g in gangs.waiting.items() if k != key] + [gang_request(candidate, config, _priority(candidate, ix.priority_classes))],
                    _values(ix.cluster_nodes))

        usage, pending, others, nodes = _on_loop(loop, inputs)
        pods = [p for p in usage
                if not (p["metadata"]["namespace"] == namespace and p["metadata"]["labels"].get(C.LABEL_JOB_NAME) == name)]
        admission = admit(others, nodes, pods, config, pending)
        return isinstance(admission.results[key], Placement)

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
    await run_job(memo, namespace, name, body, stopped, ix, native_gang_step(memo, ix),
                  elastic_probe(memo, namespace, name, ix))
