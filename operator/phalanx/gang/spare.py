"""A spare node for one node-rank of a placed gang (pure): the node that takes the place of a lost
or quarantined one without moving the others (lifecycle/replace_node.py decides when to ask).

The spare must sit in the domain of the level ``scheduling.topology.required`` names, when it does,
and take one pod of the gang (Ready, not quarantined or cordoned, taints tolerated, nodeSelector,
free resources after running pods, pinned pods and other gangs' reservations). Of those, the node
inside the deepest domain that holds every node the gang keeps wins (a gang in one subblock stays
in it while it has a free node, then in its block), then the node sharing the deepest domain with
the lost one, then topology order. The domain reported is the deepest one holding the kept nodes
and the spare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import (
    NodeInfo,
    Reservation,
    free_capacity,
    pods_from_list,
    reservations_from_pods,
)
from phalanx.gang.planner import GangRequest, node_rejection
from phalanx.gang.topology import Path, Topology, topology_for


@dataclass(frozen=True)
class Spare:
    """The spare node (None: there is none) and the domain it was looked for in."""

    node: str | None
    domain: str = ""  # 'block=b1' ('' when the gang shares no domain: the whole cluster)
    reason: str = ""  # why there is none


def common_path(paths: Iterable[Path]) -> Path:
    """The deepest known domain (above the host) holding every path; () is the whole cluster."""
    paths = list(paths)
    if not paths:
        return ()
    shared: Path = ()
    for depth in range(1, len(paths[0])):
        domains = {path[:depth] for path in paths}
        if len(domains) != 1 or Topology.is_unknown(next(iter(domains))):
            break
        shared = next(iter(domains))
    return shared


def shared_depth(path: Path, other: Path) -> int:
    """How many levels from the top ``path`` and ``other`` share."""
    return next((depth for depth in range(min(len(path), len(other))) if path[depth] != other[depth]),
                min(len(path), len(other)))


def find_spare(request: GangRequest, nodes: Sequence[NodeInfo], free: Mapping[str, Mapping[str, int]],
               topo: Topology, keep: Sequence[str], lost: str) -> Spare:
    """The spare node for the pod of ``request`` that was on ``lost``, the gang keeping ``keep``."""
    kept_paths = [topo.paths[node] for node in keep if node in topo.paths]
    together = common_path(kept_paths)
    scope: Path = ()
    if request.required:
        level = topo.level_index(request.required)
        if len(together) <= level:
            return Spare(None, "", f"the gang's nodes do not share one {request.required}")
        scope = together[: level + 1]
    kept, excluded, fitting = set(keep), {}, []
    for node in nodes:
        path = topo.paths.get(node.name)
        if node.name in kept or node.name == lost or path is None or path[: len(scope)] != scope:
            continue
        why = node_rejection(node, free.get(node.name, {}), request)
        if why is None:
            fitting.append(node.name)
        else:
            excluded[why] = excluded.get(why, 0) + 1
    if not fitting:
        counted = sorted(excluded.items(), key=lambda item: (-item[1], item[0]))
        detail = f" ({', '.join(f'{count} {why}' for why, count in counted)})" if excluded else ""
        return Spare(None, topo.describe(scope), f"no free node in {topo.describe(scope) or 'the cluster'}{detail}")
    lost_path = topo.paths.get(lost, ())
    best = min(topo.order(fitting), key=lambda node: (-shared_depth(topo.paths[node], together),
                                                      -shared_depth(topo.paths[node], lost_path)))
    return Spare(best, topo.describe(together[: shared_depth(topo.paths[best], together)]))


def spare_for(request: GangRequest, nodes: Sequence[NodeInfo], pods: Iterable[Mapping[str, Any]],
              held: Iterable[Reservation], topology: TopologyConfig, keep: Sequence[str], lost: str) -> Spare:
    """``find_spare`` on a snapshot: the node index, every pod (bound ones use capacity, pinned
    ones hold it) and the reservations the pods do not show yet (bookings, placed rows)."""
    pods = list(pods)
    reservations = reservations_from_pods(pods) + list(held)
    free = free_capacity(nodes, pods_from_list(pods), reservations)
    return find_spare(request, nodes, free, topology_for(nodes, topology), keep, lost)
