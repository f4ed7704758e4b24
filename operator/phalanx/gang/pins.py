"""How a planned pod is pinned to its node, and how to read the pin back (pure)."""

from __future__ import annotations

from typing import Any

from phalanx.constants import GANG_SCHEDULING_GATE


def pin_affinity(node: str) -> dict[str, Any]:
    """Required node affinity on ``metadata.name``: how the gang controller pins a gated pod."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def pin_pod(pod: dict[str, Any], node: str) -> None:
    """A rendered gated pod, pinned to ``node`` and without the gang gate: what a release patch
    (kube.Kube.release_pod) makes of it, for a pod that is created already placed."""
    spec = pod["spec"]
    spec["affinity"] = pin_affinity(node)
    gates = [gate for gate in spec.get("schedulingGates") or [] if gate.get("name") != GANG_SCHEDULING_GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)


def pinned_node(pod_spec: dict[str, Any]) -> str | None:
    """The node a pod was pinned to by :func:`pin_affinity`, if any."""
    terms = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(field.get("values") or []) == 1:
                return field["values"][0]
    return None
