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


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """A Kubernetes quantity ('500m', '64Gi', '1e3', 8) as an exact Decimal. Raises ValueError."""
    if isinstance(quantity, bool):
        raise ValueError(f"invalid quantity {quantity!r}")
    if isinstance(quantity, int):
        return Decimal(quantity)
    if isinstance(quantity, float):
        if not math.isfinite(quantity):
            raise ValueError(f"invalid quantity {quantity!r}")
        return Decimal(repr(quantity))
    if isinstance(quantity, Decimal):
        return quantity
    text = str(quantity).strip()
    match = _QUANTITY_RE.match(text)
    if not match:
        raise ValueError(f"invalid quantity {quantity!r}")
    try:
        num = Decimal(match["num"])
    except InvalidOperation as error:  # pragma: no cover - the regex already guards this
        raise ValueError(f"invalid quantity {quantity!r}") from error
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value = num * _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = num * _DECIMAL[suffix]
    else:  # exponent
        value = num.scaleb(int(suffix[1:]))
    return -value if match["sign"] == "-" else value


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


@functools.lru_cache(maxsize=4096, typed=True)  # a few distinct amounts, parsed for every node each pass
def canonical_amount(resource: str, quantity: str | int | float | Decimal) -> int:
    """Integer amount in the scheduler's units: millicores for cpu, else the value rounded up."""
    value = parse_quantity(quantity)
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
    return {resource: canonical_amount(resource, quantity) for resource, quantity in (raw or {}).items()}


def add_resources(first: Mapping[str, int], second: Mapping[str, int]) -> Resources:
    out = dict(first)
    for resource, amount in second.items():
        out[resource] = out.get(resource, 0) + amount
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
    quarantined: bool = False  # a NodeQuarantine names it (gang/nodehealth.py mark_quarantined)

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
            Taint(key=taint.get("key", ""), value=taint.get("value") or "", effect=taint.get("effect", "NoSchedule"))
            for taint in spec.get("taints") or []
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
    return [item if isinstance(item, NodeInfo) else NodeInfo.from_node(item)
            for item in items if isinstance(item, NodeInfo) or item.get("kind", "Node") == "Node"]


# ---------------------------------------------------------------------------------------------
# Pods


TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def _container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    req = parse_resources(res.get("requests"))
    # The API server defaults requests to limits when only limits are set.
    for resource, amount in parse_resources(res.get("limits")).items():
        req.setdefault(resource, amount)
    return req


def _container_limits(container: Mapping[str, Any]) -> Resources:
    return parse_resources((container.get("resources") or {}).get("limits"))


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
    for container in spec.get("containers") or []:
        total = add_resources(total, amounts(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        req = amounts(container)
        if container.get("restartPolicy") == "Always":
            sidecars = add_resources(sidecars, req)
            while_running = sidecars
        else:
            while_running = add_resources(sidecars, req)
        for resource, amount in while_running.items():
            init_peak[resource] = max(init_peak.get(resource, 0), amount)
    total = add_resources(total, sidecars)
    for resource, amount in init_peak.items():
        total[resource] = max(total.get(resource, 0), amount)
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
    return [PodUsage.from_pod(pod) for pod in items if pod.get("kind", "Pod") == "Pod"]


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
    free: dict[str, Resources] = {node.name: dict(node.allocatable) for node in nodes}
    for pod in usage:
        if pod.counts and pod.node_name in free:
            left = free[pod.node_name]
            for resource, amount in pod.requests.items():
                left[resource] = left.get(resource, 0) - amount
    for held in reservations:
        if held.gang == ignore_gang or held.node not in free:
            continue
        left = free[held.node]
        for resource, amount in held.requests.items():
            left[resource] = left.get(resource, 0) - amount
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
