"""What the cluster has: nodes, what running pods use, and what other gangs have reserved.

Everything is built from raw objects as the API server returns them (dicts, camelCase). Resource
amounts are kept as integers in canonical units, exactly like the scheduler's own accounting:
``cpu`` in millicores (``MilliValue``), every other resource in its base unit rounded up
(``Value``: bytes for memory, a count for ``nvidia.com/gpu``).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from phalanx.constants import RESOURCE_CPU, RESOURCE_PODS
from phalanx.gang.pins import pinned_node

Resources = dict[str, int]

# ---------------------------------------------------------------------------------------------
# Quantities

_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}


def parse_quantity(q: str | int | float | Decimal) -> Decimal:
    """A Kubernetes quantity ('500m', '64Gi', '1e3', 8) as an exact Decimal. Raises ValueError."""
    if isinstance(q, bool):
        raise ValueError(f"invalid quantity {q!r}")
    if isinstance(q, int):
        return Decimal(q)
    if isinstance(q, float):
        if not math.isfinite(q):
            raise ValueError(f"invalid quantity {q!r}")
        return Decimal(repr(q))
    if isinstance(q, Decimal):
        return q
    s = str(q).strip()
    m = _QUANTITY_RE.match(s)
    if not m:
        raise ValueError(f"invalid quantity {q!r}")
    try:
        num = Decimal(m["num"])
    except InvalidOperation as e:  # pragma: no cover - the regex already guards this
        raise ValueError(f"invalid quantity {q!r}") from e
    suffix = m["suffix"] or ""
    if suffix in _BINARY:
        value = num * _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = num * _DECIMAL[suffix]
    else:  # exponent
        value = num.scaleb(int(suffix[1:]))
    return -value if m["sign"] == "-" else value


def _ceil(d: Decimal) -> int:
    return int(d.to_integral_value(rounding="ROUND_CEILING"))


@functools.lru_cache(maxsize=4096, typed=True)  # a few distinct amounts, parsed for every node each pass
def canonical_amount(resource: str, q: str | int | float | Decimal) -> int:
    """Integer amount in the scheduler's units: millicores for cpu, else the value rounded up."""
    value = parse_quantity(q)
    if resource == RESOURCE_CPU:
        return _ceil(value * 1000)
    return _ceil(value)


def format_amount(resource: str, amount: int) -> str:
    """Inverse of ``canonical_amount`` with the shortest exact suffix ('16', '500m', '64Gi')."""
    if resource == RESOURCE_CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount and (resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")):
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            unit = _BINARY[suffix]
            if amount and amount % unit == 0:
                return f"{amount // unit}{suffix}"
    return str(amount)


def parse_resources(raw: Mapping[str, Any] | None) -> Resources:
    return {k: canonical_amount(k, v) for k, v in (raw or {}).items()}


def add_resources(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


# ---------------------------------------------------------------------------------------------
# Nodes


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeInfo:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        ready = False
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Ready":
                ready = cond.get("status") == "True"
        taints = tuple(
            Taint(key=t.get("key", ""), value=t.get("value") or "", effect=t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or []
        )
        alloc_raw = status.get("allocatable") or status.get("capacity") or {}
        return cls(
            name=meta["name"],
            labels=dict(meta.get("labels") or {}),
            allocatable=parse_resources(alloc_raw),
            taints=taints,
            ready=ready,
            unschedulable=bool(spec.get("unschedulable", False)),
        )


def nodes_from_list(obj: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[NodeInfo]:
    """NodeInfo for each Node of a ``kubectl get nodes -o yaml`` List (or a plain list); a
    NodeInfo in the list is taken as it is (a caller that parsed the nodes once)."""
    items = obj.get("items", []) if isinstance(obj, Mapping) else obj
    return [n if isinstance(n, NodeInfo) else NodeInfo.from_node(n)
            for n in items if isinstance(n, NodeInfo) or n.get("kind", "Node") == "Node"]


# ---------------------------------------------------------------------------------------------
# Pods


TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def _container_requests(c: Mapping[str, Any]) -> Resources:
    res = c.get("resources") or {}
    req = parse_resources(res.get("requests"))
    # The API server defaults requests to limits when only limits are set.
    for k, v in parse_resources(res.get("limits")).items():
        req.setdefault(k, v)
    return req


def _container_limits(c: Mapping[str, Any]) -> Resources:
    return parse_resources((c.get("resources") or {}).get("limits"))


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """Effective requests of a pod, as the scheduler computes them.

    max(sum(containers) + sum(sidecars), each init container + the sidecars started before it)
    + overhead; plus one ``pods`` slot. Sidecars are init containers with restartPolicy Always.
    """
    total = _pod_total(pod, _container_requests)
    total[RESOURCE_PODS] = total.get(RESOURCE_PODS, 0) + 1
    return total


def pod_limits(pod: Mapping[str, Any]) -> Resources:
    """Effective limits of a pod, computed as its requests are (what ``limits.*`` quotas count)."""
    return _pod_total(pod, _container_limits)


def _pod_total(pod: Mapping[str, Any], amounts: Callable[[Mapping[str, Any]], Resources]) -> Resources:
    spec = pod.get("spec") or {}
    total: Resources = {}
    for c in spec.get("containers") or []:
        total = add_resources(total, amounts(c))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for c in spec.get("initContainers") or []:
        req = amounts(c)
        if c.get("restartPolicy") == "Always":
            sidecars = add_resources(sidecars, req)
            cand = sidecars
        else:
            cand = add_resources(sidecars, req)
        for k, v in cand.items():
            init_peak[k] = max(init_peak.get(k, 0), v)
    total = add_resources(total, sidecars)
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    return add_resources(total, parse_resources(spec.get("overhead")))


@dataclass(frozen=True, slots=True)
class PodUsage:
    name: str
    namespace: str
    node_name: str | None
    phase: str
    requests: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def counts(self) -> bool:
        """Does this pod hold capacity on its node? Bound and not terminal."""
        return bool(self.node_name) and self.phase not in TERMINAL_POD_PHASES

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any]) -> PodUsage:
        meta = pod.get("metadata") or {}
        return cls(
            name=meta.get("name", ""),
            namespace=meta.get("namespace", "default"),
            node_name=(pod.get("spec") or {}).get("nodeName"),
            phase=(pod.get("status") or {}).get("phase", "Pending"),
            requests=pod_requests(pod),
            labels=dict(meta.get("labels") or {}),
        )


def pods_from_list(obj: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[PodUsage]:
    items = obj.get("items", []) if isinstance(obj, Mapping) else obj
    return [PodUsage.from_pod(p) for p in items if p.get("kind", "Pod") == "Pod"]


# ---------------------------------------------------------------------------------------------
# Reservations and free capacity


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity planned for a gang on a node (pinned, not yet bound). ``gang`` is its key."""

    gang: str
    node: str
    requests: Mapping[str, int]


def free_capacity(
    nodes: Iterable[NodeInfo],
    usage: Iterable[PodUsage] = (),
    reservations: Iterable[Reservation] = (),
    *,
    ignore_gang: str | None = None,
) -> dict[str, Resources]:
    """Allocatable minus requests of bound, non-terminal pods minus other gangs' reservations.

    Reservations of ``ignore_gang`` are not subtracted (a gang being re-planned does not compete
    with itself). Values may go negative when a node is over-committed.
    """
    free: dict[str, Resources] = {n.name: dict(n.allocatable) for n in nodes}
    for p in usage:
        if p.counts and p.node_name in free:
            f = free[p.node_name]
            for k, v in p.requests.items():
                f[k] = f.get(k, 0) - v
    for r in reservations:
        if r.gang == ignore_gang or r.node not in free:
            continue
        f = free[r.node]
        for k, v in r.requests.items():
            f[k] = f.get(k, 0) - v
    return free


def reservations_from_pods(
    pods: Iterable[Mapping[str, Any]],
    *,
    gang_of: Any = None,
    hostname_to_node: Mapping[str, str] | None = None,
    hostname_label: str = "kubernetes.io/hostname",
) -> list[Reservation]:
    """Reservations held by pods that are pinned to a node (node affinity on metadata.name, as the
    gang controller pins them, or a nodeSelector on the hostname label) but not bound yet and not terminal.

    ``gang_of(pod) -> str`` names the gang (default: ``namespace/<phalanx.dev/job-name label>``);
    ``hostname_to_node`` maps hostname label values to node names when they differ.
    """
    from phalanx.constants import LABEL_JOB_NAME

    def default_gang(pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return f"{meta.get('namespace', 'default')}/{labels.get(LABEL_JOB_NAME, meta.get('name', ''))}"

    gang_of = gang_of or default_gang
    out: list[Reservation] = []
    for pod in pods:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL_POD_PHASES:
            continue
        pinned = pinned_node(spec)
        host = (spec.get("nodeSelector") or {}).get(hostname_label)
        if not pinned and not host:
            continue
        node = pinned or (hostname_to_node or {}).get(host, host)
        out.append(Reservation(gang=gang_of(pod), node=node, requests=pod_requests(pod)))
    return out
