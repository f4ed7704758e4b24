"""kopf wiring only: indexes observe, one daemon per job runs the pure reconcile and the executor.

Level-based: each job's daemon re-decides from the indexes whenever a child changes (woken by
events) and at least every RESYNC_SECONDS, so a missed event or an operator restart converges.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from phalanx import constants as C
from phalanx.api.config import OperatorConfig
from phalanx.api.types import TrainingJob
from phalanx.gang.admission import admit, decision_for, gang_request
from phalanx.gang.inventory import Reservation
from phalanx.gang.planner import GangRequest, Placement
from phalanx.jobmetrics import JOB_METRICS
from phalanx.kube import Kube, load_client
from phalanx.lifecycle.progress import parse_progress, progress_port
from phalanx.lifecycle.reconcile import (
    Fits,
    GangDecision,
    GangStep,
    Observed,
    decide,
)
from phalanx.lifecycle.refusals import (
    MAX_DECIDE_ERRORS,
    Refusal,
    error_status,
    refused_status,
    retry_delay,
)
from phalanx.metrics import JOBS, RECONCILE_SECONDS, RECONCILES, RESTARTS
from phalanx.podreflector import usage_entry
from phalanx.render.names import config_map_name, network_policy_name, service_name

log = logging.getLogger("phalanx.operator")

RESYNC_SECONDS = 10.0
EXPECTATION_TIMEOUT = 5.0
PROGRESS_EVERY = 5.0
WAKE_COALESCE_SECONDS = 0.2
PIN_TTL_SECONDS = 30.0  # after this the index shows the pins (nodeSelector) itself


class State:
    """Process-wide operator state, set at startup."""

    config: OperatorConfig = OperatorConfig()
    kubeconfig: str | None = None
    kube: Kube | None = None
    wakeups: dict[tuple[str, str], asyncio.Event] = {}
    waiting: dict[str, GangRequest] = {}  # gangs whose pods all exist, gated, by "ns/name" (a queue, no capacity)
    # Pins not yet seen in the index. No reservation lives only here: a pin is written into the
    # pods (release patch: node affinity) before it is recorded, and the planner reads pins back
    # from the pod index (reservations_from_pods); this only bridges the watch's lag. A new
    # leader starts with it empty, safely: the old leader stopped writing renew_deadline after
    # its last renew, lease_duration - renew_deadline (5 s by default) before the lease could be
    # taken over, while the standby's warm pod index was already receiving those pins.
    pending: dict[str, tuple[list[Reservation], float]] = {}
    phases: dict[tuple[str, str], str] = {}
    leader: Any = None  # phalanx.leader.Elector with --leader-elect: job loops act only while it leads
    pod_reflector: Any = None  # phalanx.podreflector.PodReflector in namespaced mode: every namespace's pods


def wakeup(namespace: str, name: str) -> asyncio.Event:
    return State.wakeups.setdefault((namespace, name), asyncio.Event())


# --------------------------------------------------------------------------------------------
# Start-up


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=C.ANNOTATION_KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=C.ANNOTATION_KOPF_PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = C.FINALIZER
    settings.posting.level = logging.WARNING  # our Events are explicit; no per-handler chatter
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10]
    settings.batching.worker_limit = 1000
    settings.scanning.disabled = True  # no CRD/namespace scanning: least-privilege RBAC
    State.kube = Kube(load_client(State.kubeconfig), concurrency=State.config.pod_create_concurrency)


@kopf.on.cleanup()
async def shutdown(**_: Any) -> None:
    if State.kube is not None:
        State.kube.pool.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------------------------
# Indexes (in-memory inventories kept by kopf's watches)


def _slim_pod(body: kopf.Body) -> dict[str, Any]:
    spec, status = body.get("spec", {}), body.get("status", {})
    return {
        "metadata": {
            "name": body["metadata"]["name"],
            "labels": dict(body["metadata"].get("labels", {})),
            "deletionTimestamp": body["metadata"].get("deletionTimestamp"),
            "ownerReferences": [{"uid": o.get("uid"), "controller": o.get("controller")}
                                for o in body["metadata"].get("ownerReferences") or []],
        },
        "spec": {"nodeName": spec.get("nodeName"), "schedulingGates": list(spec.get("schedulingGates") or []),
                 "nodeSelector": dict(spec.get("nodeSelector") or {}),
                 # the declared progress port (hostNetwork jobs have their own): see progress_port()
                 "containers": [{"name": c.get("name"), "ports": [dict(p) for p in c.get("ports") or [] if p.get("name") == C.PORT_NAME_PROGRESS]}
                                for c in spec.get("containers") or []]},
        "status": {
            "phase": status.get("phase"),
            "reason": status.get("reason"),
            "message": status.get("message"),
            "podIP": status.get("podIP"),
            "conditions": list(status.get("conditions") or []),
            "containerStatuses": list(status.get("containerStatuses") or []),
        },
    }


@kopf.index("pods", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_pods(namespace: str, labels: dict[str, str], body: kopf.Body, **_: Any) -> dict:
    return {(namespace, labels[C.LABEL_JOB_NAME]): _slim_pod(body)}


@kopf.index("services", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_services(namespace: str, name: str, **_: Any) -> dict:
    return {(namespace, name): True}


@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_network_policies(namespace: str, name: str, **_: Any) -> dict:
    return {(namespace, name): True}


@kopf.index("configmaps", labels={C.LABEL_JOB_NAME: kopf.PRESENT})
def job_config_maps(namespace: str, name: str, annotations: dict[str, str], **_: Any) -> dict:
    return {(namespace, name): annotations.get(C.ANNOTATION_SPEC_HASH)}


@kopf.index("nodes")
def cluster_nodes(name: str, body: kopf.Body, **_: Any) -> dict:
    meta = body["metadata"]
    return {name: {"metadata": {"name": name, "labels": dict(meta.get("labels") or {})},
                   "spec": {"taints": list(body.get("spec", {}).get("taints") or []),
                            "unschedulable": body.get("spec", {}).get("unschedulable", False)},
                   "status": {"allocatable": dict(body.get("status", {}).get("allocatable") or {}),
                              "conditions": [c for c in body.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"]}}}


@kopf.index("pods")
def cluster_pods(body: kopf.Body, **_: Any) -> dict | None:
    """Every live pod's requests and binding: the capacity the gang planner must respect.
    Namespaced mode: kopf sees only the listed namespaces; the PodReflector holds them all."""
    return None if State.pod_reflector is not None else {None: usage_entry(body)}


@kopf.index("namespaces")
def namespace_labels(name: str, labels: dict[str, str], **_: Any) -> dict:
    """Each namespace's labels: which policy applies, which Pod Security level it enforces."""
    return {name: dict(labels)}


@kopf.index("scheduling.k8s.io", "v1", "priorityclasses")
def priority_classes(name: str, body: kopf.Body, **_: Any) -> dict:
    return {name: int(body.get("value", 0))}


@kopf.on.event("pods")
def pod_changed(type: str, namespace: str, labels: dict[str, str], status: dict, **_: Any) -> None:
    job = labels.get(C.LABEL_JOB_NAME)
    if job:
        wakeup(namespace, job).set()
    if type == "DELETED" or status.get("phase") in ("Succeeded", "Failed"):
        _wake_waiting_gangs()  # capacity freed


@kopf.on.event("nodes")
def node_changed(**_: Any) -> None:
    _wake_waiting_gangs()


def _wake_waiting_gangs() -> None:
    for key in list(State.waiting):
        namespace, name = key.split("/", 1)
        wakeup(namespace, name).set()


def _pending_pins(except_key: str) -> list[Reservation]:
    """Other gangs' pins that the pod index may not show yet (younger than PIN_TTL_SECONDS)."""
    now = time.monotonic()
    return [r for k, (rs, t) in State.pending.items() if k != except_key and now - t < PIN_TTL_SECONDS for r in rs]


def _values(index: kopf.Index) -> list[Any]:
    return [value for store in index.values() for value in store]


def native_gang_step(cluster_nodes: kopf.Index, cluster_pods: kopf.Index, priority_classes: kopf.Index) -> GangStep:
    """The reconcile's gang step: plan every waiting gang together; pin and release this one
    only if it is placed. Runs synchronously inside decide(), so plans never interleave."""

    def step(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
        key = f"{job.metadata.namespace}/{job.metadata.name}"
        State.waiting[key] = gang_request(job, State.config, _priority(job, priority_classes))
        now = time.monotonic()
        pending = _pending_pins(except_key=key)
        nodes = _values(cluster_nodes)
        admission = admit(State.waiting.values(), nodes, list(cluster_pods.get(None, [])), State.config, pending)
        result = admission.results[key]
        decision = decision_for(job, result, pods, nodes, State.config)
        if decision.release:
            State.waiting.pop(key, None)
            State.pending[key] = (result.reservations(), now)
        return decision

    return step


# --------------------------------------------------------------------------------------------
# The per-job loop


@kopf.daemon(C.GROUP, C.VERSION, C.PLURAL, cancellation_timeout=10.0)
async def job_loop(
    name: str,
    namespace: str,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    job_pods: kopf.Index,
    job_services: kopf.Index,
    job_config_maps: kopf.Index,
    job_network_policies: kopf.Index,
    cluster_nodes: kopf.Index,
    cluster_pods: kopf.Index,
    priority_classes: kopf.Index,
    namespace_labels: kopf.Index,
    **_: Any,
) -> None:
    key = (namespace, name)
    wake = wakeup(namespace, name)
    usage = cluster_pods if State.pod_reflector is None else State.pod_reflector
    gang = native_gang_step(cluster_nodes, usage, priority_classes)
    fits = elastic_probe(namespace, name, cluster_nodes, usage, priority_classes)
    last_progress_poll = 0.0
    progress: dict[str, Any] | None = None
    failures = _Failures()
    try:
        while not stopped:
            # a standby keeps its indexes warm and decides nothing until it holds the lease
            if State.leader is not None and not await State.leader.wait_leading(stopped):
                break
            wake.clear()
            pods = list(job_pods.get(key, []))
            status = dict(body.get("status") or {})
            if status.get("phase") == "Running" and time.monotonic() - last_progress_poll > PROGRESS_EVERY:
                last_progress_poll = time.monotonic()
                progress = await _poll_progress(pods)
            observed = Observed(
                pods=pods,
                service_exists=(namespace, service_name(name)) in job_services,
                config_map_exists=(namespace, config_map_name(name)) in job_config_maps,
                network_policy_exists=(namespace, network_policy_name(name)) in job_network_policies,
                progress=progress,
                lost_nodes=_lost_nodes(pods, cluster_nodes),
                config_map_hash=next(iter(job_config_maps.get((namespace, config_map_name(name)), [None]))),
                namespace_labels=next(iter(namespace_labels.get(namespace, [None]))),
            )
            obj = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body["metadata"]),
                   "spec": dict(body.get("spec") or {}), "status": status}
            started = time.perf_counter()
            try:
                plan = decide(obj, observed, datetime.now(UTC), State.config, gang=gang, fits=fits)
            except Exception as exc:  # noqa: BLE001 - no input may kill the loop; it is reported
                failures.decide += 1
                RECONCILES.labels("error").inc()
                log.exception("deciding %s/%s failed (%d in a row)", namespace, name, failures.decide)
                await _report_error(body, obj, exc, failures.decide, namespace, name)
                await _sleep_or_wake(wake, retry_delay(failures.decide))
                continue
            failures.decide = 0
            JOB_METRICS.observe({**obj, "status": plan.status or status}, progress)  # even if the write fails
            try:
                assert State.kube is not None
                refusals = await State.kube.execute(namespace, plan, status, name)
                RECONCILES.labels("ok").inc()
            except Exception:  # noqa: BLE001 - API or transport trouble: back off and retry
                failures.api += 1
                RECONCILES.labels("error").inc()
                log.exception("reconcile of %s/%s failed (%d in a row); retrying", namespace, name, failures.api)
                await _sleep_or_wake(wake, retry_delay(failures.api))
                continue
            finally:
                RECONCILE_SECONDS.observe(time.perf_counter() - started)
            failures.api = 0
            if refusals:
                failures.refused += 1
                permanent, reported = await _report_refusals(body, obj, plan, refusals, namespace, name)
                JOB_METRICS.observe({**obj, "status": reported}, progress)
                # permanent: the job is Failed now; the pause only guards against a stale body
                await _sleep_or_wake(wake, 1.0 if permanent else retry_delay(failures.refused))
                continue
            failures.refused = 0
            for type_, reason, message in plan.events:
                kopf.event(body, type=type_, reason=reason, message=message)
                if reason == "Restarting":
                    RESTARTS.inc()
            if plan.status is not None:
                _track_phase(key, plan.status.get("phase"))
                await _await_status(body, plan.status)
            if plan.delete_job:
                return
            await _await_expectations(key, job_pods, plan)
            if plan.create or plan.delete_pods or plan.release:
                continue  # re-decide at once on the fresh view
            delay = min(plan.requeue_after or RESYNC_SECONDS, RESYNC_SECONDS)
            try:
                await asyncio.wait_for(wake.wait(), timeout=delay)
                await asyncio.sleep(WAKE_COALESCE_SECONDS)  # one pass for a burst of pod events
            except TimeoutError:
                pass
    finally:
        State.wakeups.pop(key, None)
        State.waiting.pop(f"{namespace}/{name}", None)
        State.pending.pop(f"{namespace}/{name}", None)
        _track_phase(key, None)
        JOB_METRICS.forget(namespace, name)


@dataclass
class _Failures:
    """Consecutive failures of one job's loop, by kind (each backs off on its own)."""

    decide: int = 0
    api: int = 0
    refused: int = 0


async def _sleep_or_wake(wake: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(wake.wait(), timeout=seconds)
    except TimeoutError:
        pass


async def _report_refusals(body: kopf.Body, obj: dict, plan: Any, refusals: list[Refusal], namespace: str, name: str) -> tuple[bool, dict[str, Any]]:
    """The API server refused a creation: say so. Permanent refusals fail the job (the next pass
    deletes what it had); retryable ones are reported once and retried with backoff. Returns
    (permanent, the status as reported)."""
    current = {**obj, "status": plan.status or obj.get("status")}
    status, permanent = refused_status(current, refusals, datetime.now(UTC))
    if status.get("message") == (obj.get("status") or {}).get("message"):
        return permanent, status  # already reported; retrying quietly
    assert State.kube is not None
    await State.kube.patch_status(namespace, name, status, current.get("status"))
    reason = C.REASON_CREATE_REJECTED if permanent else C.REASON_CREATE_REFUSED
    kopf.event(body, type="Warning", reason=reason, message=status["message"])
    if permanent:
        _track_phase((namespace, name), status.get("phase"))
        await _await_status(body, status)
    return permanent, status


async def _report_error(body: kopf.Body, obj: dict, exc: Exception, count: int, namespace: str, name: str) -> None:
    """decide() raised: a ReconcileError condition now, Failed once it keeps happening."""
    final = count >= MAX_DECIDE_ERRORS
    status = error_status(obj, f"{type(exc).__name__}: {exc}", datetime.now(UTC), final=final)
    try:
        assert State.kube is not None
        await State.kube.patch_status(namespace, name, status, obj.get("status"))
    except Exception:  # noqa: BLE001 - reported in the log above; the loop goes on
        log.exception("could not report the error of %s/%s", namespace, name)
        return
    if status.get("message") != (obj.get("status") or {}).get("message"):
        kopf.event(body, type="Warning", reason=C.REASON_RECONCILE_ERROR, message=status["message"])


def _priority(job: TrainingJob, priority_classes: kopf.Index) -> int:
    name = job.spec.scheduling.priority_class_name
    return next(iter(priority_classes.get(name, [0]))) if name else 0


def elastic_probe(namespace: str, name: str, cluster_nodes: kopf.Index, cluster_pods: kopf.Index,
                  priority_classes: kopf.Index) -> Fits:
    """Could this job's gang be placed at another size? Its own pods count as free (they would be
    replaced); other waiting gangs keep their queue order; nothing is pinned or reserved."""
    key = f"{namespace}/{name}"

    def fits(candidate: TrainingJob) -> bool:
        pods = [p for p in cluster_pods.get(None, [])
                if not (p["metadata"]["namespace"] == namespace and p["metadata"]["labels"].get(C.LABEL_JOB_NAME) == name)]
        pending = _pending_pins(except_key=key)
        gangs = [g for k, g in State.waiting.items() if k != key]
        gangs.append(gang_request(candidate, State.config, _priority(candidate, priority_classes)))
        admission = admit(gangs, _values(cluster_nodes), pods, State.config, pending)
        return isinstance(admission.results[key], Placement)

    return fits


def _lost_nodes(pods: list[dict[str, Any]], cluster_nodes: kopf.Index) -> frozenset[str]:
    """Nodes of this job's pods that are gone from the inventory or not Ready."""
    lost = set()
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        entry = next(iter(cluster_nodes.get(node, [])), None)
        ready = entry and any(c.get("status") == "True" for c in entry["status"]["conditions"])
        if not ready:
            lost.add(node)
    return frozenset(lost)


async def _poll_progress(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rank 0's report, parsed strictly (user code serves it); None when unreachable or malformed."""
    rank0 = [p for p in pods if p["metadata"]["labels"].get(C.LABEL_NODE_RANK) == "0" and p["status"].get("podIP")]
    if not rank0 or State.kube is None:
        return None
    pod, problems = rank0[-1], []
    report = parse_progress(await State.kube.get_progress(pod["status"]["podIP"], progress_port(pod)), problems)
    if problems:
        log.debug("progress of %s: %s", pod["metadata"]["name"], "; ".join(problems))
    return report


async def _await_status(body: kopf.Body, written: dict[str, Any]) -> None:
    """Wait until the live body shows what we wrote, so the next pass never decides on stale status."""
    deadline = time.monotonic() + EXPECTATION_TIMEOUT
    keys = ("phase", "restartAttempt", "restarts", "attemptCreated")
    while time.monotonic() < deadline:
        now = body.get("status") or {}
        if all(now.get(k) == written.get(k) for k in keys):
            return
        await asyncio.sleep(0.05)


async def _await_expectations(key: tuple[str, str], index: kopf.Index, plan: Any) -> None:
    """Controller expectations: wait until the index has seen our creates and deletes."""
    created = {o["metadata"]["name"] for o in plan.create if o["kind"] == "Pod"}
    deleted = set(plan.delete_pods)
    if not created and not deleted:
        return
    deadline = time.monotonic() + EXPECTATION_TIMEOUT
    while time.monotonic() < deadline:
        pods = list(index.get(key, []))
        names = {p["metadata"]["name"] for p in pods}
        going = {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}
        if created <= names and not ((deleted & names) - going):
            return
        await asyncio.sleep(0.05)


def _track_phase(key: tuple[str, str], phase: str | None) -> None:
    if phase is None:
        State.phases.pop(key, None)
    else:
        State.phases[key] = phase
    counts: dict[str, int] = {}
    for value in State.phases.values():
        counts[value] = counts.get(value, 0) + 1
    for phase_name in ("Pending", "Scheduling", "Running", "Restarting", "Succeeded", "Failed", "Suspended"):
        JOBS.labels(phase_name).set(counts.get(phase_name, 0))
