"""A spare node for one node-rank of a placed gang (pure): the node that takes the place of a lost
or quarantined one without moving the others (lifecycle/replace_node.py decides when to ask).

The spare must sit in the gang's topology domain: the level ``scheduling.topology.required`` names,
else the level ``preferred`` names, else the deepest level whose one domain holds every node the
gang keeps (a gang spread over a whole block stays in that block; a gang in one rack stays in the
rack). It must take one pod of the gang (Ready, not quarantined or cordoned, taints tolerated,
nodeSelector, free resources after running pods, pinned pods and other gangs' reservations). Of
those, the node sharing the deepest domain with the lost one wins, then topology order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import NodeInfo, Reservation, free_capacity, pods_from_list, reservations_from_pods
from phalanx.gang.planner import GangRequest, node_rejection
from phalanx.gang.topology import Path, Topology, topology_for


@dataclass(frozen=True)
class Spare:
    """The spare node (None: there is none) and the domain it was looked for in."""

    node: str | None
    domain: str = ""  # 'block=b1' ('' when the gang shares no domain: the whole cluster)
    reason: str = ""  # why there is none


def replacement_domain(request: GangRequest, topo: Topology, keep: Sequence[str]) -> tuple[Path, str] | None:
    """(domain path, description) the spare must come from; None when the kept nodes do not share
    the level the request requires."""
    paths = [topo.paths[node] for node in keep if node in topo.paths]
    named = request.required or request.preferred
    if named:
        level = topo.level_index(named)
        domains = {path[: level + 1] for path in paths}
        if len(domains) > 1 or any(Topology.is_unknown(domain) for domain in domains):
            return None if request.required else _deepest_shared(topo, paths)
        domain = next(iter(domains), ())
        return domain, topo.describe(domain)
    return _deepest_shared(topo, paths)


def _deepest_shared(topo: Topology, paths: list[Path]) -> tuple[Path, str]:
    """The deepest known domain (above the host) holding every path; () is the whole cluster."""
    shared: Path = ()
    for level in range(topo.depth - 1):
        domains = {path[: level + 1] for path in paths}
        if len(domains) != 1:
            break
        domain = next(iter(domains))
        if Topology.is_unknown(domain):
            break
        shared = domain
    return shared, topo.describe(shared)


def find_spare(request: GangRequest, nodes: Sequence[NodeInfo], free: Mapping[str, Mapping[str, int]],
               topo: Topology, keep: Sequence[str], lost: str) -> Spare:
    """The spare node for the pod of ``request`` that was on ``lost``, the gang keeping ``keep``."""
    where = replacement_domain(request, topo, keep)
    if where is None:
        return Spare(None, "", f"the gang's nodes do not share one {request.required}")
    domain, described = where
    kept, excluded, fitting = set(keep), {}, []
    for node in nodes:
        path = topo.paths.get(node.name)
        if node.name in kept or node.name == lost or path is None or path[: len(domain)] != domain:
            continue
        why = node_rejection(node, free.get(node.name, {}), request)
        if why is None:
            fitting.append(node.name)
        else:
            excluded[why] = excluded.get(why, 0) + 1
    scope = described or "the cluster"
    if not fitting:
        counted = sorted(excluded.items(), key=lambda item: (-item[1], item[0]))
        detail = f" ({', '.join(f'{count} {why}' for why, count in counted)})" if excluded else ""
        return Spare(None, described, f"no free node in {scope}{detail}")
    lost_path = topo.paths.get(lost, ())

    def shared_depth(node: str) -> int:
        path = topo.paths[node]
        return next((depth for depth in range(len(lost_path)) if path[: depth + 1] != lost_path[: depth + 1]),
                    len(lost_path))

    best = min(topo.order(fitting), key=lambda node: -shared_depth(node))
    return Spare(best, described)


def spare_for(request: GangRequest, nodes: Sequence[NodeInfo], pods: Iterable[Mapping[str, Any]],
              held: Iterable[Reservation], topology: TopologyConfig, keep: Sequence[str], lost: str) -> Spare:
    """``find_spare`` on a snapshot: the node index, every pod (bound ones use capacity, pinned
    ones hold it) and the reservations the pods do not show yet (bookings, placed rows)."""
    pods = list(pods)
    reservations = reservations_from_pods(pods) + list(held)
    free = free_capacity(nodes, pods_from_list(pods), reservations)
    return find_spare(request, nodes, free, topology_for(nodes, topology), keep, lost)
