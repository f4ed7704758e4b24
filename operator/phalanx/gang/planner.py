"""Gang placement: all nodes of a gang or none, as compact as the topology allows.

``plan_gang`` filters feasible nodes (Ready, not cordoned, taints tolerated, nodeSelector, free
resources after running pods and other gangs' reservations), then walks the topology tree from
the root choosing, at each level:

1. if one child domain can hold the whole remainder: the child whose own inside placement uses
   the fewest domains at each lower level (coarse first), then the tightest such child (best fit:
   big holes stay free for big gangs), known domains before ``unknown`` ones;
2. otherwise the fewest children that can hold it (the largest ones decide how many), chosen
   tightest-first with lookahead (the smallest child that still lets the remaining slots finish),
   so the gang fills whole small domains instead of nibbling at big ones.

``required`` (all pods in one domain of that level) is a hard filter; ``preferred`` tries the same
and falls back to the plain walk. Node ranks follow a depth-first walk of the tree, so
consecutive ranks share the deepest domain possible. One pod per node.

``plan_queue`` plans gangs in priority order, reserving each placed gang's capacity before the
next: two gangs can never each hold half of what both need.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.api.config import TopologyConfig, TopologyLevel
from phalanx.constants import (
    RESOURCE_CPU,
    RESOURCE_GPU,
    RESOURCE_MEMORY,
    RESOURCE_PODS,
    ROLE_WORKER,
    NodeExclusion,
    UnschedulableReason,
)
from phalanx.gang.inventory import (
    NodeInfo,
    PodUsage,
    Reservation,
    Resources,
    canonical_amount,
    format_amount,
    free_capacity,
)
from phalanx.gang.tolerations import job_tolerations
from phalanx.gang.topology import Path, Topology, topology_for

# ---------------------------------------------------------------------------------------------
# Request


@dataclass(frozen=True)
class GangRequest:
    key: str  # "namespace/name"
    count: int  # pods = nodes (one pod per node)
    requests: Mapping[str, int]  # per pod, canonical units (see inventory), incl. pods: 1
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required: str | None = None  # level name or label key
    preferred: str | None = None
    priority: int = 0
    creation: str = ""  # RFC 3339 creationTimestamp; sorts lexicographically
    role: str = ROLE_WORKER
    roles: tuple[GangRequest, ...] = ()  # the job's other roles: placed with it, all or nothing

    @classmethod
    def from_spec(
        cls,
        spec: Any,
        key: str,
        *,
        priority: int = 0,
        creation: str = "",
        extra_requests: Mapping[str, Any] | None = None,
        default_tolerations: Sequence[Any] = (),
    ) -> GangRequest:
        """From a TrainingJobSpec. ``extra_requests`` adds e.g. the network profile's RDMA resource
        (``NetworkWiring.resources``); ``default_tolerations`` the config's ``jobTolerations``. Each
        pod tolerates what the cluster lets it (gang/tolerations.py). Each of ``spec.roles`` becomes a
        sub-request: GPU roles keep the job's topology constraints (compact among themselves); CPU
        roles go wherever they fit."""
        topo = spec.scheduling.topology
        own = [tol.to_kube() for tol in spec.tolerations]

        def tolerations(requests: Mapping[str, int]) -> tuple[Mapping[str, Any], ...]:
            return tuple(t.toleration for t in job_tolerations(own, requests, default_tolerations))

        req = pod_requests(spec.resources, extra_requests)
        role_requests = [(role, pod_requests(role.resources, extra_requests)) for role in spec.roles]
        roles = tuple(
            cls(key=key, count=role.replicas, requests=role_req, role=role.name, tolerations=tolerations(role_req),
                node_selector=dict(spec.node_selector or {}),
                required=topo.required if role.resources.gpus else None,
                preferred=topo.preferred if role.resources.gpus else None)
            for role, role_req in role_requests)
        return cls(
            key=key,
            count=spec.nodes,
            requests=req,
            tolerations=tolerations(req),
            node_selector=dict(spec.node_selector or {}),
            required=topo.required,
            preferred=topo.preferred,
            priority=priority,
            creation=creation,
            roles=roles,
        )

    def describe(self) -> str:
        """'4 nodes with 8 free nvidia.com/gpu' (the resource that matters most)."""
        what = f"{self.count} node{'s' if self.count != 1 else ''}"
        for res in (RESOURCE_GPU, RESOURCE_CPU, RESOURCE_MEMORY):
            if self.requests.get(res):
                return f"{what} with {format_amount(res, self.requests[res])} free {res}"
        for res, amount in self.requests.items():
            if res != RESOURCE_PODS and amount:
                return f"{what} with {format_amount(res, amount)} free {res}"
        return what


def pod_requests(res: Any, extra_requests: Mapping[str, Any] | None = None) -> Resources:
    """One pod's requests in canonical units, from an api ``Resources`` (plus ``extra_requests``)."""
    req: Resources = {}
    if res.gpus:
        req[RESOURCE_GPU] = res.gpus
    if res.cpu is not None:
        req[RESOURCE_CPU] = canonical_amount(RESOURCE_CPU, res.cpu)
    if res.memory is not None:
        req[RESOURCE_MEMORY] = canonical_amount(RESOURCE_MEMORY, res.memory)
    for resource, amount in (res.extra or {}).items():
        req[resource] = canonical_amount(resource, amount)
    for resource, amount in (extra_requests or {}).items():
        req[resource] = canonical_amount(resource, amount)
    req[RESOURCE_PODS] = 1
    return req


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Placement:
    key: str
    nodes: list[str]  # node of each node-rank
    domains: list[str]  # domain path of each node-rank, e.g. "block=b1/subblock=s3/hostname=n7"
    span: dict[str, int]  # domains used per level
    requests: Mapping[str, int]
    notes: list[str] = field(default_factory=list)
    role_nodes: dict[str, list[str]] = field(default_factory=dict)  # node of each pod of each other role
    role_requests: dict[str, Mapping[str, int]] = field(default_factory=dict)

    def parts(self) -> list[tuple[list[str], Mapping[str, int]]]:
        """(nodes, per-pod requests) of the workers and of each other role."""
        return [(self.nodes, self.requests)] + [(nodes, self.role_requests[role]) for role, nodes in self.role_nodes.items()]

    def reservations(self) -> list[Reservation]:
        return [Reservation(gang=self.key, node=node, requests=req) for nodes, req in self.parts() for node in nodes]

    def to_status(self) -> dict[str, Any]:
        """Fields of TrainingJobStatus.placement (camelCase)."""
        out = {"nodes": list(self.nodes), "span": dict(self.span), "message": "; ".join(self.notes) or None}
        if self.role_nodes:
            out["roles"] = {role: list(nodes) for role, nodes in self.role_nodes.items()}
        return out


@dataclass(frozen=True)
class Unschedulable:
    key: str
    message: str
    reason: str = UnschedulableReason.INSUFFICIENT
    fit: int = 0  # feasible nodes
    excluded: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Feasibility

# Exclusions with equal counts are listed in this order in a message.
_EXCLUSION_ORDER = [NodeExclusion.NOT_READY, NodeExclusion.QUARANTINED, NodeExclusion.CORDONED,
                    NodeExclusion.TAINTED, NodeExclusion.SELECTOR_MISMATCH]
_SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
_UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def tolerates(toleration: Mapping[str, Any], key: str, value: str, effect: str) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    t_effect = toleration.get("effect") or ""
    if t_effect and t_effect != effect:
        return False
    op = toleration.get("operator") or "Equal"
    t_key = toleration.get("key") or ""
    if not t_key:
        return op == "Exists"
    if t_key != key:
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == value


def untolerated_taints(node: NodeInfo, tolerations: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for taint in node.taints:
        if taint.effect not in _SCHEDULING_EFFECTS:
            continue
        if not any(tolerates(tol, taint.key, taint.value, taint.effect) for tol in tolerations):
            out.append(taint.key)
    return out


def static_rejection(node: NodeInfo, request: GangRequest) -> str | None:
    """Why ``node`` cannot take a pod of ``request`` whatever its free capacity (None when it can):
    readiness, quarantine, cordon, taints, nodeSelector."""
    if not node.ready:
        return NodeExclusion.NOT_READY
    if node.quarantined:
        return NodeExclusion.QUARANTINED
    if node.unschedulable and not any(
        tolerates(tol, _UNSCHEDULABLE_TAINT, "", "NoSchedule") for tol in request.tolerations
    ):
        return NodeExclusion.CORDONED
    if node.taints and untolerated_taints(node, request.tolerations):
        return NodeExclusion.TAINTED
    labels = node.labels
    for key, value in request.node_selector.items():
        if labels.get(key) != value:
            return NodeExclusion.SELECTOR_MISMATCH
    return None


def resource_rejection(free: Mapping[str, int], requests: Mapping[str, int]) -> str | None:
    """'too little <resource>' for the first requested resource ``free`` lacks (None when it fits)."""
    for res, amount in requests.items():
        if amount > 0 and free.get(res, 0) < amount:
            return NodeExclusion.TOO_LITTLE.format(resource=res)
    return None


def node_rejection(
    node: NodeInfo, free: Mapping[str, int], request: GangRequest
) -> str | None:
    """Why ``node`` cannot take one pod of ``request`` (None when it can)."""
    return static_rejection(node, request) or resource_rejection(free, request.requests)


def feasible_nodes(
    nodes: Iterable[NodeInfo], free: Mapping[str, Mapping[str, int]], request: GangRequest
) -> tuple[list[str], dict[str, int]]:
    """(feasible node names, excluded count per reason)."""
    ok: list[str] = []
    excluded: dict[str, int] = {}
    empty: Mapping[str, int] = {}
    for node in nodes:
        why = node_rejection(node, free.get(node.name, empty), request)
        if why is None:
            ok.append(node.name)
        else:
            excluded[why] = excluded.get(why, 0) + 1
    return ok, excluded


def _format_excluded(excluded: Mapping[str, int]) -> str:
    order = {exclusion: position for position, exclusion in enumerate(_EXCLUSION_ORDER)}
    items = sorted(excluded.items(), key=lambda kv: (-kv[1], order.get(kv[0], 99), kv[0]))
    return ", ".join(f"{count} {why}" for why, count in items)


# ---------------------------------------------------------------------------------------------
# The walk


class _Walk:
    """Span-minimising, best-fit selection over one topology with one set of feasible nodes."""

    def __init__(
        self, topo: Topology, feasible: Iterable[str], count: Mapping[Path, int] | None = None
    ):
        """``count`` (``topo.counts(feasible)``) may be passed when already known."""
        self.topo = topo
        self.depth = topo.depth
        self.count = topo.counts(feasible) if count is None else count
        self.feasible = feasible if isinstance(feasible, (set, frozenset)) else set(feasible)
        self.members: dict[Path, list[str]] = {}  # finest domain -> its feasible nodes (on demand)
        self.memo: dict[tuple[Path, int], tuple[tuple[int, ...], list[tuple[Path, int]] | None]] = {}

    def leaf(self, path: Path) -> list[str]:
        """Feasible nodes of a finest domain, in the topology's order."""
        members = self.members.get(path)
        if members is None:
            feasible = self.feasible
            members = self.members[path] = [node for node in self.topo.members.get(path, ()) if node in feasible]
        return members

    def children(self, path: Path) -> list[Path]:
        count = self.count
        return [child for child in self.topo.children.get(path, ()) if count.get(child, 0) > 0]

    def cost(self, path: Path, wanted: int) -> tuple[tuple[int, ...], list[tuple[Path, int]] | None]:
        """(domains used at each level below ``path``, [(child, how many)]) for ``wanted`` nodes in path."""
        key = (path, wanted)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if len(path) == self.depth:
            out: tuple[tuple[int, ...], list[tuple[Path, int]] | None] = ((), None)
            self.memo[key] = out
            return out
        kids = self.children(path)
        count = self.count
        if wanted >= count.get(path, 0):  # take everything
            plan = [(child, count[child]) for child in kids]
        else:
            single = [child for child in kids if count[child] >= wanted]
            if single:
                best = min(
                    single,
                    key=lambda child: (Topology.is_unknown(child), self.cost(child, wanted)[0], count[child]),
                )
                plan = [(best, wanted)]
            else:
                plan = self._multi(kids, wanted)
        below: list[int] = []
        for child, taken in plan:
            child_cost = self.cost(child, taken)[0]
            if len(below) < len(child_cost):
                below.extend([0] * (len(child_cost) - len(below)))
            for level, used in enumerate(child_cost):
                below[level] += used
        out = ((len(plan), *below), plan)
        self.memo[key] = out
        return out

    def _multi(self, kids: list[Path], wanted: int) -> list[tuple[Path, int]]:
        count = self.count
        # Remaining children ascending by (count, unknown last-ish, DFS order).
        remaining = sorted(
            ((count[child], 1 if Topology.is_unknown(child) else 0, order, child) for order, child in enumerate(kids)),
            key=lambda entry: (entry[0], entry[1], entry[2]),
        )
        if remaining[-1][0] <= 1:  # single-node children (hosts): DFS order, known first
            picks = sorted(remaining, key=lambda entry: (entry[1], entry[2]))[:wanted]
            return [(entry[3], entry[0]) for entry in sorted(picks, key=lambda entry: entry[2])]
        counts = [entry[0] for entry in remaining]
        # fewest children that can hold ``wanted``: the largest ones decide.
        total, fewest = 0, 0
        for held in reversed(counts):
            total += held
            fewest += 1
            if total >= wanted:
                break
        plan: list[tuple[Path, int]] = []
        left = wanted
        for slots in range(fewest, 0, -1):
            top = sum(counts[len(counts) - (slots - 1):]) if slots > 1 else 0
            need = max(1, left - top)
            index = bisect.bisect_left(counts, need)
            # Among equal counts prefer known domains, then DFS order (remaining is sorted that way).
            held, _, _, child = remaining.pop(index)
            counts.pop(index)
            take = min(held, left)
            plan.append((child, take))
            left -= take
            if left == 0:
                break
        order = {child: position for position, child in enumerate(kids)}
        plan.sort(key=lambda pick: order[pick[0]])
        return plan

    def materialise(self, path: Path, wanted: int) -> list[str]:
        if len(path) == self.depth:
            return self.leaf(path)[:wanted]
        _, plan = self.cost(path, wanted)
        out: list[str] = []
        for child, taken in plan or ():
            out.extend(self.materialise(child, taken))
        return out


# ---------------------------------------------------------------------------------------------
# Feasible sets


class _Fit:
    """The feasible nodes of one request on one snapshot: the set, the count of nodes each domain
    holds (``Topology.counts``) and why the others were excluded."""

    def __init__(self, feasible: set[str], count: Mapping[Path, int], excluded: Mapping[str, int]):
        self.feasible = feasible
        self.count = count
        self.excluded = excluded

    @classmethod
    def of(cls, topo: Topology, feasible: list[str], excluded: dict[str, int]) -> _Fit:
        return cls(set(feasible), topo.counts(feasible), excluded)

    def domains(self, level: int) -> list[Path]:
        """Domains of ``level`` holding feasible nodes, ordered by their first feasible node in
        the node list (the order ``Topology.counts`` inserts them in: ties go to the first)."""
        return [path for path, held in self.count.items() if held and len(path) == level + 1]


def _levels_checked(request: GangRequest, topo: Topology) -> list[tuple[str, int]] | Unschedulable:
    out = []
    for which, lvl in (("required", request.required), ("preferred", request.preferred)):
        if lvl:
            try:
                out.append((which, topo.level_index(lvl)))
            except KeyError as e:
                if which == "preferred":  # a wish the cluster's topology has no level for: nothing to try
                    continue
                return Unschedulable(request.key, f"scheduling.topology.{which}: {e.args[0]}",
                                     reason=UnschedulableReason.INVALID_REQUEST)
    return out


def _place(request: GangRequest, topo: Topology, fit_of: Callable[[], _Fit]) -> Placement | Unschedulable:
    """The walk over ``fit_of()``'s feasible nodes (called once the request is known valid)."""
    if request.count < 1:
        return Unschedulable(request.key, "needs at least 1 node", reason=UnschedulableReason.INVALID_REQUEST)
    levels_checked = _levels_checked(request, topo)
    if isinstance(levels_checked, Unschedulable):
        return levels_checked
    fit = fit_of()
    wanted = request.count
    fitting_nodes = len(fit.feasible)
    excluded = dict(fit.excluded)
    if fitting_nodes < wanted:
        msg = f"needs {request.describe()}; {fitting_nodes} fit"
        if excluded:
            msg += f" ({sum(excluded.values())} excluded: {_format_excluded(excluded)})"
        return Unschedulable(request.key, msg, fit=fitting_nodes, excluded=excluded)

    walk = _Walk(topo, fit.feasible, fit.count)
    notes: list[str] = []
    chosen: list[str] | None = None
    for which, level in levels_checked:
        level_name = topo.levels[level].name
        candidates = [path for path in fit.domains(level) if not Topology.is_unknown(path)]
        fitting = [path for path in candidates if walk.count[path] >= wanted]
        if fitting:
            best = min(fitting, key=lambda path: (walk.cost(path, wanted)[0], walk.count[path]))
            chosen = walk.materialise(best, wanted)
            break
        largest = max((walk.count[path] for path in candidates), default=0)
        msg = f"needs {request.describe()} under one {level_name}; the largest has {largest}"
        if which == "required":
            return Unschedulable(request.key, msg, reason=UnschedulableReason.TOPOLOGY_REQUIRED, fit=fitting_nodes,
                                 excluded=excluded)
        notes.append(f"preferred {level_name} not met: {msg.split('needs ', 1)[1]}")
    if chosen is None:
        chosen = walk.materialise((), wanted)

    ranked = topo.order(chosen)
    notes += [f"{count} of {len(ranked)} nodes carry no {name} label ({topo.levels[topo.level_index(name)].label}): "
              f"their {name} is unknown, so the span leaves it out"
              for name, count in topo.unlabelled_levels(ranked).items()]
    return Placement(
        key=request.key,
        nodes=ranked,
        domains=[topo.describe(topo.paths[node]) for node in ranked],
        span=topo.span(ranked),
        requests=dict(request.requests),
        notes=notes,
    )


def _negated(requests: Mapping[str, int]) -> dict[str, int]:
    return {resource: -amount for resource, amount in requests.items()}


def _scarce_first(roles: Sequence[GangRequest]) -> list[GangRequest]:
    """GPU roles first, then the larger CPU and memory requests (spec order among equals): a small
    CPU role must not take the CPU a GPU node's GPU role needs."""
    return sorted(roles, key=lambda role: tuple(-role.requests.get(resource, 0)
                                               for resource in (RESOURCE_GPU, RESOURCE_CPU, RESOURCE_MEMORY)))


def _workers_domain(request: GangRequest, topo: Topology, main: Placement) -> tuple[int, Path] | None:
    """``scheduling.topology.required``: the level and the domain the workers were placed in."""
    if not request.required:
        return None
    level = topo.level_index(request.required)
    return level, topo.paths[main.nodes[0]][: level + 1]


def _within(cap: Capacity, topo: Topology, fit: _Fit, scope: tuple[int, Path]) -> _Fit:
    """``fit`` less the nodes outside the workers' required domain (node order kept)."""
    level, domain = scope
    inside = [node for node in cap.names if node in fit.feasible and topo.paths[node][: level + 1] == domain]
    excluded = dict(fit.excluded)
    if len(fit.feasible) > len(inside):
        excluded[NodeExclusion.OUTSIDE_WORKERS_DOMAIN.format(level=topo.levels[level].name)] = len(fit.feasible) - len(inside)
    return _Fit.of(topo, inside, excluded)


def _role_fit(cap: Capacity, topo: Topology, role: GangRequest, scope: tuple[int, Path] | None) -> Callable[[], _Fit]:
    if scope is None:
        return functools.partial(cap.fit, role)
    return lambda: _within(cap, topo, cap.fit(role), scope)


def _place_gang(request: GangRequest, topo: Topology, cap: Capacity) -> Placement | Unschedulable:
    """The workers, then each other role (scarce first) on the capacity they leave, inside the
    workers' domain when the topology is required: all of them or none. Where the workers' best
    domain leaves no room for the roles, every other domain of the required level is tried. The
    capacity is unchanged on return (the caller reserves a placement)."""
    first = _place_parts(request, topo, cap, None)
    if not isinstance(first, _RolesFailed):
        return first
    tried = _workers_domain(request, topo, first.workers)
    if tried is None:
        return first.unschedulable
    level = tried[0]
    for domain in cap.fit(request).domains(level):
        if Topology.is_unknown(domain) or domain == tried[1]:
            continue
        res = _place_parts(request, topo, cap, (level, domain))
        if isinstance(res, Placement):
            return res
    return first.unschedulable


@dataclass(frozen=True)
class _RolesFailed:
    workers: Placement
    unschedulable: Unschedulable


def _place_parts(request: GangRequest, topo: Topology, cap: Capacity,
                 scope: tuple[int, Path] | None) -> Placement | Unschedulable | _RolesFailed:
    """The whole gang; Unschedulable when the workers do not fit (in ``scope``); _RolesFailed when
    a role does not. The capacity is unchanged on return."""
    main = _place(request, topo, _role_fit(cap, topo, request, scope))
    if not request.roles or isinstance(main, Unschedulable):
        return main
    scope = scope or _workers_domain(request, topo, main)
    held = [(main.nodes, main.requests)]
    cap.reserve(main.nodes, main.requests)
    role_nodes: dict[str, list[str]] = {}
    failed: Unschedulable | None = None
    for role in _scarce_first(request.roles):
        res = _place(role, topo, _role_fit(cap, topo, role, scope))
        if isinstance(res, Unschedulable):
            failed = Unschedulable(request.key, f"role {role.role}: {res.message}", reason=res.reason,
                                   fit=res.fit, excluded=dict(res.excluded))
            break
        cap.reserve(res.nodes, res.requests)
        held.append((res.nodes, res.requests))
        role_nodes[role.role] = res.nodes
    for nodes, requests in reversed(held):
        cap.reserve(nodes, _negated(requests))
    if failed is not None:
        return _RolesFailed(main, failed)
    return replace(main, role_nodes={role.role: role_nodes[role.role] for role in request.roles},
                   role_requests={role.role: dict(role.requests) for role in request.roles})


# ---------------------------------------------------------------------------------------------
# Incremental capacity (plan_queue)


def _static_key(request: GangRequest) -> Any:
    """Requests with equal keys have equal ``static_rejection`` on every node."""
    try:
        key = (tuple(tuple(sorted(tol.items())) for tol in request.tolerations),
               tuple(sorted(request.node_selector.items())))
        hash(key)
    except TypeError:  # unhashable toleration values: no sharing
        return ("request", id(request))
    return key


class _LiveFit(_Fit):
    """A ``_Fit`` kept current as capacity is reserved: only the nodes whose free capacity
    changed are checked again."""

    def __init__(self, cap: Capacity, static: list[str | None], requests: Mapping[str, int]):
        # What it needs of ``cap``, not ``cap`` itself: no reference cycle (freed without the GC).
        self.names, self.topo, self.free = cap.names, cap.topo, cap.free
        self.requests = dict(requests)
        self.reason: dict[str, str | None] = {}
        feasible: list[str] = []
        excluded: dict[str, int] = {}
        free, empty = cap.free, {}
        for node, why in zip(cap.names, static, strict=True):
            if why is None:
                why = resource_rejection(free.get(node, empty), self.requests)
            self.reason[node] = why
            if why is None:
                feasible.append(node)
            else:
                excluded[why] = excluded.get(why, 0) + 1
        super().__init__(set(feasible), cap.topo.counts(feasible), excluded)

    def update(self, node: str, static: str | None) -> None:
        old = self.reason[node]
        new = static or resource_rejection(self.free.get(node, {}), self.requests)
        if new == old:
            return
        self.reason[node] = new
        exc, count = self.excluded, self.count
        if old is not None:
            exc[old] -= 1
            if not exc[old]:
                del exc[old]
        if new is not None:
            exc[new] = exc.get(new, 0) + 1
        path = self.topo.paths[node]
        if old is None:  # feasible -> not
            self.feasible.discard(node)
            for depth in range(len(path) + 1):
                key = path[:depth]
                count[key] -= 1
                if not count[key]:
                    del count[key]
        elif new is None:
            self.feasible.add(node)
            for depth in range(len(path) + 1):
                key = path[:depth]
                count[key] = count.get(key, 0) + 1

    def domains(self, level: int) -> list[Path]:
        # Dict order of ``count`` is not kept through updates: scan the nodes in order instead.
        seen: dict[Path, None] = {}
        paths, feas = self.topo.paths, self.feasible
        for node in self.names:
            if node in feas:
                seen.setdefault(paths[node][: level + 1])
        return list(seen)


class Capacity:
    """Free capacity of a snapshot and, per request shape, which nodes fit — computed once and
    updated on the reserved nodes only (``plan_queue``'s state between gangs)."""

    def __init__(self, nodes: Sequence[NodeInfo], topo: Topology, free: dict[str, Resources]):
        self.nodes = list(nodes)
        self.names = [node.name for node in self.nodes]
        self.unique = len(set(self.names)) == len(self.names)  # else: no incremental state
        self.topo = topo
        self.free = free
        self._static: dict[Any, list[str | None]] = {}
        self._fits: dict[tuple[Any, tuple[tuple[str, int], ...]], _LiveFit] = {}
        self._index: dict[str, int] | None = None

    def _static_of(self, key: Any, request: GangRequest) -> list[str | None]:
        out = self._static.get(key)
        if out is None:
            out = self._static[key] = [static_rejection(node, request) for node in self.nodes]
        return out

    def fit(self, request: GangRequest) -> _Fit:
        if not self.unique:
            return _Fit.of(self.topo, *feasible_nodes(self.nodes, self.free, request))
        skey = _static_key(request)
        key = (skey, tuple(request.requests.items()))
        fit = self._fits.get(key)
        if fit is None:
            fit = self._fits[key] = _LiveFit(self, self._static_of(skey, request), request.requests)
        return fit

    def reserve(self, nodes: Iterable[str], requests: Mapping[str, int]) -> None:
        nodes = list(nodes)
        for node in nodes:
            free = self.free[node]
            for resource, amount in requests.items():
                free[resource] = free.get(resource, 0) - amount
        if self._fits and self._index is None:
            self._index = {name: position for position, name in enumerate(self.names)}
        index = self._index or {}
        for (skey, _), fit in self._fits.items():
            static = self._static[skey]
            for node in nodes:
                fit.update(node, static[index[node]])


# ---------------------------------------------------------------------------------------------
# Public API


def plan_gang(
    request: GangRequest,
    nodes: Sequence[NodeInfo],
    usage: Iterable[PodUsage] = (),
    topology_config: TopologyConfig | Sequence[TopologyLevel] | None = None,
    reservations: Iterable[Reservation] = (),
    *,
    topology: Topology | None = None,
    free: Mapping[str, Mapping[str, int]] | None = None,
) -> Placement | Unschedulable:
    """Place ``request.count`` pods, one per node, or explain exactly why not.

    ``topology``/``free`` may be passed pre-computed; otherwise they are built from ``nodes``,
    ``usage``, ``reservations`` (own reservations ignored) and the levels.
    """
    if request.count < 1:
        return Unschedulable(request.key, "needs at least 1 node", reason=UnschedulableReason.INVALID_REQUEST)
    topo = topology or topology_for(nodes, topology_config)
    if free is None:
        free = free_capacity(nodes, usage, reservations, ignore_gang=request.key)
    if request.roles:  # the roles are placed on what the workers leave: a capacity of its own
        return _place_gang(request, topo, Capacity(nodes, topo, {node: dict(left) for node, left in free.items()}))
    free_ = free

    def fit() -> _Fit:
        return _Fit.of(topo, *feasible_nodes(nodes, free_, request))

    return _place(request, topo, fit)


@dataclass
class QueueResult:
    results: dict[str, Placement | Unschedulable]  # in planning order
    reservations: list[Reservation]  # input reservations + those of every placed gang

    @property
    def placed(self) -> dict[str, Placement]:
        return {key: result for key, result in self.results.items() if isinstance(result, Placement)}


def queue_order(gangs: Iterable[GangRequest]) -> list[GangRequest]:
    """Priority (high first), then creation time (old first), then key."""
    return sorted(gangs, key=lambda gang: (-gang.priority, gang.creation, gang.key))


def plan_queue(
    gangs: Iterable[GangRequest],
    nodes: Sequence[NodeInfo],
    usage: Iterable[PodUsage] = (),
    topology_config: TopologyConfig | Sequence[TopologyLevel] | None = None,
    reservations: Iterable[Reservation] = (),
    *,
    backfill: bool = True,
) -> QueueResult:
    """Plan gangs in priority order; each placed gang's capacity is reserved before the next.

    Every gang gets all its nodes or none, so gangs never deadlock on partial holds. Existing
    ``reservations`` of a gang in ``gangs`` are released first (it is being re-planned).
    ``backfill=False`` stops at the first gang that does not fit (strict FIFO: later gangs wait
    behind it, so a big gang cannot be starved by a stream of small ones).

    Incremental: each node's feasibility for a request shape (tolerations, nodeSelector,
    requests) is computed once per queue and, after a gang is placed, re-checked only on that
    gang's nodes (``Capacity``). The placements are those of ``plan_gang`` called
    for each gang in turn on the capacity left by the gangs before it.
    """
    ordered = queue_order(gangs)
    keys = {gang.key for gang in ordered}
    kept = [held for held in reservations if held.gang not in keys]
    topo = topology_for(nodes, topology_config)
    cap = Capacity(nodes, topo, free_capacity(nodes, usage, kept))
    results: dict[str, Placement | Unschedulable] = {}
    out_res = list(kept)
    blocked_by: str | None = None
    for gang in ordered:
        if blocked_by is not None:
            results[gang.key] = Unschedulable(gang.key, f"queued behind {blocked_by}", reason=UnschedulableReason.QUEUED)
            continue
        res = _place_gang(gang, topo, cap)
        results[gang.key] = res
        if isinstance(res, Placement):
            for part_nodes, requests in res.parts():
                cap.reserve(part_nodes, requests)
            out_res.extend(res.reservations())
        elif not backfill:
            blocked_by = gang.key
    return QueueResult(results=results, reservations=out_res)
