"""kopf wiring only: what the operator registers with kopf, each handler handing on to the module
that does the work — indexes observe, one daemon per job runs its loop (``phalanx.jobloop``),
startup, health and cleanup (``phalanx.startup``).

Level-based: each job's daemon re-decides from the indexes whenever a child changes (woken by
events) and at least every RESYNC_SECONDS (``phalanx.controlloop``), so a missed event or an
operator restart converges.

Everything process-wide travels in kopf's ``memo``: ``phalanx.startup.new_memo`` lists it.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from phalanx import constants, startup
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.quota import quota_entry
from phalanx.gangstep import Indexes, elastic_probe, native_gang_step, spare_finder
from phalanx.jobloop import run_job

log = logging.getLogger("phalanx.operator")


# --------------------------------------------------------------------------------------------
# Start-up, health, cleanup


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    await startup.configure(settings, memo, defaults=startup.new_memo())


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


@kopf.index("services", labels={constants.LABEL_JOB_NAME: kopf.PRESENT})
def job_services(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): (_owner(body), True)}


@kopf.index("networking.k8s.io", "v1", "networkpolicies", labels={constants.LABEL_JOB_NAME: kopf.PRESENT})
def job_network_policies(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): (_owner(body), True)}


@kopf.index("configmaps", labels={constants.LABEL_JOB_NAME: kopf.PRESENT})
def job_config_maps(namespace: str, name: str, annotations: dict[str, str], body: kopf.Body, **_: Any) -> dict:
    return {(namespace, name): (_owner(body), annotations.get(constants.ANNOTATION_SPEC_HASH))}


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
async def node_changed(type: str | None, name: str, memo: kopf.Memo, cluster_nodes: kopf.Index, **_: Any) -> None:
    """Capacity may have changed: the scheduler plans the queue again (once for a burst). Async:
    on the event loop, where the scheduler's state lives (kopf runs a sync handler in a thread).
    A node gone wakes the jobs that had a pod on it."""
    memo.scheduler.attach(cluster_nodes, memo.pod_reflector)
    memo.scheduler.changed()
    memo.topology_watch.changed()
    if type == "DELETED":
        memo.gangs.wake_on_node(memo.pod_reflector.get(None, []), name)


@kopf.on.event("nodes", id="node_health")
async def node_health(type: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A node's unhealthy conditions and taints (phalanx.nodehealth)."""
    startup.start_node_health(memo)
    memo.node_health.node_event(type, name, body, memo.config.health)


@kopf.on.event(constants.GROUP, constants.VERSION, constants.QUARANTINE_PLURAL)
async def node_quarantine(type: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A NodeQuarantine created, renewed or deleted: the planner's exclusions change, and the jobs
    running on the node are woken (lifecycle/replace_node.py)."""
    startup.start_node_health(memo)  # knows the leader before it posts a release Event
    memo.node_health.quarantine_event(type, name, body)
    if type != "DELETED":
        memo.gangs.wake_on_node(memo.pod_reflector.get(None, []), (body.get("spec") or {}).get("node") or name)


@kopf.on.event(constants.GROUP, constants.VERSION, constants.PLURAL, id="failure_evidence")
async def failure_evidence(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A job's last failure may implicate the node of its failed rank (phalanx.nodehealth)."""
    memo.node_health.job_event(type, body)


# --------------------------------------------------------------------------------------------
# The per-job loop


@kopf.daemon(constants.GROUP, constants.VERSION, constants.PLURAL, cancellation_timeout=10.0)
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
    indexes = Indexes(pods.job_pods, job_services, job_config_maps, job_network_policies, cluster_nodes, pods,
                 priority_classes, namespace_labels, resource_quotas)
    await run_job(memo, namespace, name, body, stopped, indexes, native_gang_step(memo, indexes),
                  elastic_probe(memo, namespace, name, indexes), spare_finder(memo, indexes))
