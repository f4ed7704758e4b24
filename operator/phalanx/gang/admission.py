"""Native gang admission: every waiting gang planned together, in priority order (pure).

The operator's indexes supply raw Node and Pod dicts; gangs already pinned but not yet visible
in the index are passed as ``pending`` reservations so two gangs never book the same capacity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api.config import OperatorConfig
from phalanx.api.slots import Slot, slot_of, worker
from phalanx.api.types import TrainingJob
from phalanx.constants import Reason
from phalanx.decision import GangDecision
from phalanx.gang.costmodel import cost_report
from phalanx.gang.inventory import (
    NodeInfo,
    Reservation,
    nodes_from_list,
    pods_from_list,
    reservations_from_pods,
)
from phalanx.gang.planner import GangRequest, Placement, Unschedulable, plan_queue
from phalanx.gang.topology import topology_for


def gang_request(job: TrainingJob, config: OperatorConfig, priority: int = 0) -> GangRequest:
    return GangRequest.from_spec(
        job.spec,
        f"{job.metadata.namespace}/{job.metadata.name}",
        priority=priority,
        creation=str(job.metadata.model_extra.get("creationTimestamp", "")) if job.metadata.model_extra else "",
        extra_requests=config.network_profiles[job.spec.network.profile].extra_resources(),
        default_tolerations=config.job_tolerations,
    )


@dataclass
class Admission:
    results: dict[str, Placement | Unschedulable]
    reservations: list[Reservation]


def admit(
    gangs: Iterable[GangRequest],
    node_objs: Iterable[Mapping[str, Any] | NodeInfo],
    pod_objs: Iterable[Mapping[str, Any]],
    config: OperatorConfig,
    pending: Iterable[Reservation] = (),
) -> Admission:
    pods = list(pod_objs)
    reservations = reservations_from_pods(pods) + list(pending)
    result = plan_queue(gangs, nodes_from_list(list(node_objs)), pods_from_list(pods), config.topology, reservations)
    return Admission(result.results, result.reservations)


def decision_for(
    job: TrainingJob,
    result: Placement | Unschedulable,
    pods: list[dict[str, Any]],
    node_objs: list[Mapping[str, Any] | NodeInfo],
    config: OperatorConfig,
) -> GangDecision:
    """Turn the planner's answer for one gang into pins (pod → node) and a status placement."""
    if isinstance(result, Unschedulable):
        return GangDecision(release=False, schedulable=False, reason=result.reason, message=result.message)
    by_slot = {slot_of(p): p["metadata"]["name"] for p in pods}
    pins = {by_slot[worker(rank)]: node for rank, node in enumerate(result.nodes)}
    for role, role_nodes in result.role_nodes.items():
        pins |= {by_slot[Slot(role, i)]: node for i, node in enumerate(role_nodes)}
    placement = result.to_status()
    nodes = nodes_from_list(list(node_objs))
    report = cost_report(job.spec, result.nodes, nodes, topology_for(nodes, config.topology), config.topology,
                         requests=dict(result.requests))
    if report.estimate is not None:
        est = report.estimate
        placement["predictedAllreduceSeconds"] = round(min(est.ring_seconds, est.hierarchical_seconds), 6)
    span = ", ".join(f"{k}={v}" for k, v in result.span.items())
    roles = "".join(f", {len(n)} {r}" for r, n in result.role_nodes.items())
    return GangDecision(release=True, pins=pins, reason=Reason.PLACED, message=f"placed on {len(result.nodes)} nodes ({span}){roles}",
                        placement=placement)
