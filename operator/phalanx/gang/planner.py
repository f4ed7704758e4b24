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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.api.config import TopologyConfig, TopologyLevel, levels_of
from phalanx.constants import RESOURCE_CPU, RESOURCE_GPU, RESOURCE_MEMORY, RESOURCE_PODS
from phalanx.gang.inventory import (
    NodeInfo,
    PodUsage,
    Reservation,
    Resources,
    canonical_amount,
    format_amount,
    free_capacity,
)
from phalanx.gang.topology import Path, Topology

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

    @classmethod
    def from_spec(
        cls,
        spec: Any,
        key: str,
        *,
        priority: int = 0,
        creation: str = "",
        extra_requests: Mapping[str, Any] | None = None,
    ) -> GangRequest:
        """From a TrainingJobSpec. ``extra_requests`` adds e.g. the network profile's RDMA resource
        (``NetworkWiring.resources``)."""
        res = spec.resources
        req: Resources = {}
        if res.gpus:
            req[RESOURCE_GPU] = res.gpus
        if res.cpu is not None:
            req[RESOURCE_CPU] = canonical_amount(RESOURCE_CPU, res.cpu)
        if res.memory is not None:
            req[RESOURCE_MEMORY] = canonical_amount(RESOURCE_MEMORY, res.memory)
        for k, v in (res.extra or {}).items():
            req[k] = canonical_amount(k, v)
        for k, v in (extra_requests or {}).items():
            req[k] = canonical_amount(k, v)
        req[RESOURCE_PODS] = 1
        topo = spec.scheduling.topology
        return cls(
            key=key,
            count=spec.nodes,
            requests=req,
            tolerations=tuple(t.to_kube() for t in spec.tolerations),
            node_selector=dict(spec.node_selector or {}),
            required=topo.required,
            preferred=topo.preferred,
            priority=priority,
            creation=creation,
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

    def reservations(self) -> list[Reservation]:
        return [Reservation(gang=self.key, node=n, requests=self.requests) for n in self.nodes]

    def to_status(self) -> dict[str, Any]:
        """Fields of TrainingJobStatus.placement (camelCase)."""
        return {"nodes": list(self.nodes), "span": dict(self.span),
                "message": "; ".join(self.notes) or None}


@dataclass(frozen=True)
class Unschedulable:
    key: str
    message: str
    reason: str = "Insufficient"  # Insufficient | TopologyRequired | InvalidRequest | Queued
    fit: int = 0  # feasible nodes
    excluded: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Feasibility

R_NOT_READY = "not ready"
R_CORDONED = "cordoned"
R_TAINTED = "tainted"
R_SELECTOR = "nodeSelector mismatch"
_REASON_ORDER = [R_NOT_READY, R_CORDONED, R_TAINTED, R_SELECTOR]
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
    for t in node.taints:
        if t.effect not in _SCHEDULING_EFFECTS:
            continue
        if not any(tolerates(tol, t.key, t.value, t.effect) for tol in tolerations):
            out.append(t.key)
    return out


def node_rejection(
    node: NodeInfo, free: Mapping[str, int], request: GangRequest
) -> str | None:
    """Why ``node`` cannot take one pod of ``request`` (None when it can)."""
    if not node.ready:
        return R_NOT_READY
    if node.unschedulable and not any(
        tolerates(t, _UNSCHEDULABLE_TAINT, "", "NoSchedule") for t in request.tolerations
    ):
        return R_CORDONED
    if node.taints and untolerated_taints(node, request.tolerations):
        return R_TAINTED
    labels = node.labels
    for k, v in request.node_selector.items():
        if labels.get(k) != v:
            return R_SELECTOR
    for res, amount in request.requests.items():
        if amount > 0 and free.get(res, 0) < amount:
            return f"too little {res}"
    return None


def feasible_nodes(
    nodes: Iterable[NodeInfo], free: Mapping[str, Mapping[str, int]], request: GangRequest
) -> tuple[list[str], dict[str, int]]:
    """(feasible node names, excluded count per reason)."""
    ok: list[str] = []
    excluded: dict[str, int] = {}
    empty: Mapping[str, int] = {}
    for n in nodes:
        why = node_rejection(n, free.get(n.name, empty), request)
        if why is None:
            ok.append(n.name)
        else:
            excluded[why] = excluded.get(why, 0) + 1
    return ok, excluded


def _format_excluded(excluded: Mapping[str, int]) -> str:
    order = {r: i for i, r in enumerate(_REASON_ORDER)}
    items = sorted(excluded.items(), key=lambda kv: (-kv[1], order.get(kv[0], 99), kv[0]))
    return ", ".join(f"{v} {k}" for k, v in items)


# ---------------------------------------------------------------------------------------------
# The walk


class _Walk:
    """Span-minimising, best-fit selection over one topology with one set of feasible nodes."""

    def __init__(self, topo: Topology, feasible: Iterable[str]):
        self.topo = topo
        self.depth = topo.depth
        self.count = topo.counts(feasible)
        feas = set(feasible) if not isinstance(feasible, set) else feasible
        self.members = {
            p: [n for n in ns if n in feas] for p, ns in topo.members.items() if self.count.get(p)
        }
        self.memo: dict[tuple[Path, int], tuple[tuple[int, ...], list[tuple[Path, int]] | None]] = {}
        self._dfs_rank: dict[Path, int] = {}

    def children(self, path: Path) -> list[Path]:
        c = self.count
        return [ch for ch in self.topo.children.get(path, ()) if c.get(ch, 0) > 0]

    def cost(self, path: Path, n: int) -> tuple[tuple[int, ...], list[tuple[Path, int]] | None]:
        """(domains used at each level below ``path``, [(child, how many)]) for n nodes in path."""
        key = (path, n)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        if len(path) == self.depth:
            out: tuple[tuple[int, ...], list[tuple[Path, int]] | None] = ((), None)
            self.memo[key] = out
            return out
        kids = self.children(path)
        c = self.count
        if n >= c.get(path, 0):  # take everything
            plan = [(ch, c[ch]) for ch in kids]
        else:
            single = [ch for ch in kids if c[ch] >= n]
            if single:
                best = min(
                    single,
                    key=lambda ch: (Topology.is_unknown(ch), self.cost(ch, n)[0], c[ch]),
                )
                plan = [(best, n)]
            else:
                plan = self._multi(kids, n)
        sub: list[int] = []
        for ch, k in plan:
            t = self.cost(ch, k)[0]
            if len(sub) < len(t):
                sub.extend([0] * (len(t) - len(sub)))
            for i, v in enumerate(t):
                sub[i] += v
        out = ((len(plan), *sub), plan)
        self.memo[key] = out
        return out

    def _multi(self, kids: list[Path], n: int) -> list[tuple[Path, int]]:
        c = self.count
        # Remaining children ascending by (count, unknown last-ish, DFS order).
        rem = sorted(
            ((c[ch], 1 if Topology.is_unknown(ch) else 0, i, ch) for i, ch in enumerate(kids)),
            key=lambda t: (t[0], t[1], t[2]),
        )
        if rem[-1][0] <= 1:  # single-node children (hosts): DFS order, known first
            picks = sorted(rem, key=lambda t: (t[1], t[2]))[:n]
            return [(t[3], t[0]) for t in sorted(picks, key=lambda t: t[2])]
        counts = [t[0] for t in rem]
        # k = fewest children that can hold n: the largest ones decide.
        total, k = 0, 0
        for v in reversed(counts):
            total += v
            k += 1
            if total >= n:
                break
        plan: list[tuple[Path, int]] = []
        m = n
        for slots in range(k, 0, -1):
            top = sum(counts[len(counts) - (slots - 1):]) if slots > 1 else 0
            need = max(1, m - top)
            i = bisect.bisect_left(counts, need)
            # Among equal counts prefer known domains, then DFS order (rem is sorted that way).
            cnt, _, _, ch = rem.pop(i)
            counts.pop(i)
            take = min(cnt, m)
            plan.append((ch, take))
            m -= take
            if m == 0:
                break
        order = {ch: i for i, ch in enumerate(kids)}
        plan.sort(key=lambda pc: order[pc[0]])
        return plan

    def materialise(self, path: Path, n: int) -> list[str]:
        if len(path) == self.depth:
            return self.members[path][:n]
        _, plan = self.cost(path, n)
        out: list[str] = []
        for ch, k in plan or ():
            out.extend(self.materialise(ch, k))
        return out


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

    ``topology``/``free`` may be passed pre-computed (``plan_queue`` does); otherwise they are
    built from ``nodes``, ``usage``, ``reservations`` (own reservations ignored) and the levels.
    """
    if request.count < 1:
        return Unschedulable(request.key, "needs at least 1 node", reason="InvalidRequest")
    topo = topology or Topology.build(nodes, levels_of(topology_config))
    if free is None:
        free = free_capacity(nodes, usage, reservations, ignore_gang=request.key)

    levels_checked = []
    for which, lvl in (("required", request.required), ("preferred", request.preferred)):
        if lvl:
            try:
                levels_checked.append((which, topo.level_index(lvl)))
            except KeyError as e:
                return Unschedulable(request.key, f"scheduling.topology.{which}: {e.args[0]}",
                                     reason="InvalidRequest")

    feas, excluded = feasible_nodes(nodes, free, request)
    n = request.count
    if len(feas) < n:
        msg = f"needs {request.describe()}; {len(feas)} fit"
        if excluded:
            msg += f" ({sum(excluded.values())} excluded: {_format_excluded(excluded)})"
        return Unschedulable(request.key, msg, fit=len(feas), excluded=excluded)

    walk = _Walk(topo, feas)
    notes: list[str] = []
    chosen: list[str] | None = None
    for which, r in levels_checked:
        lvl_name = topo.levels[r].name
        cands = [p for p, v in walk.count.items() if len(p) == r + 1 and not Topology.is_unknown(p)]
        fitting = [p for p in cands if walk.count[p] >= n]
        if fitting:
            best = min(fitting, key=lambda p: (walk.cost(p, n)[0], walk.count[p]))
            chosen = walk.materialise(best, n)
            break
        largest = max((walk.count[p] for p in cands), default=0)
        msg = f"needs {request.describe()} under one {lvl_name}; the largest has {largest}"
        if which == "required":
            return Unschedulable(request.key, msg, reason="TopologyRequired", fit=len(feas),
                                 excluded=excluded)
        notes.append(f"preferred {lvl_name} not met: {msg.split('needs ', 1)[1]}")
    if chosen is None:
        chosen = walk.materialise((), n)

    ranked = topo.order(chosen)
    return Placement(
        key=request.key,
        nodes=ranked,
        domains=[topo.describe(topo.paths[x]) for x in ranked],
        span=topo.span(ranked),
        requests=dict(request.requests),
        notes=notes,
    )


@dataclass
class QueueResult:
    results: dict[str, Placement | Unschedulable]  # in planning order
    reservations: list[Reservation]  # input reservations + those of every placed gang

    @property
    def placed(self) -> dict[str, Placement]:
        return {k: v for k, v in self.results.items() if isinstance(v, Placement)}


def queue_order(gangs: Iterable[GangRequest]) -> list[GangRequest]:
    """Priority (high first), then creation time (old first), then key."""
    return sorted(gangs, key=lambda g: (-g.priority, g.creation, g.key))


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
    """
    ordered = queue_order(gangs)
    keys = {g.key for g in ordered}
    kept = [r for r in reservations if r.gang not in keys]
    topo = Topology.build(nodes, levels_of(topology_config))
    free = free_capacity(nodes, usage, kept)
    results: dict[str, Placement | Unschedulable] = {}
    out_res = list(kept)
    blocked_by: str | None = None
    for g in ordered:
        if blocked_by is not None:
            results[g.key] = Unschedulable(g.key, f"queued behind {blocked_by}", reason="Queued")
            continue
        res = plan_gang(g, nodes, topology=topo, free=free)
        results[g.key] = res
        if isinstance(res, Placement):
            for node in res.nodes:
                f = free[node]
                for k, v in res.requests.items():
                    f[k] = f.get(k, 0) - v
            out_res.extend(res.reservations())
        elif not backfill:
            blocked_by = g.key
    return QueueResult(results=results, reservations=out_res)
