"""What the reconcile reads off a job's pods (pure): attempt, gate, readiness, ownership."""

from __future__ import annotations

from typing import Any

from phalanx.constants import GANG_SCHEDULING_GATE, LABEL_RESTART_ATTEMPT


def attempt_of(pod: dict[str, Any]) -> int:
    """The restart attempt a pod belongs to (-1 when unlabelled)."""
    return int(pod["metadata"].get("labels", {}).get(LABEL_RESTART_ATTEMPT, -1))


def is_gated(pod: dict[str, Any]) -> bool:
    return any(gate.get("name") == GANG_SCHEDULING_GATE for gate in pod.get("spec", {}).get("schedulingGates") or [])


def is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in status.get("conditions") or [])


def is_alive(pod: dict[str, Any]) -> bool:
    """Neither finished nor being deleted."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def pod_phase(pod: dict[str, Any]) -> str | None:
    return (pod.get("status") or {}).get("phase")


def is_predecessor(pod: dict[str, Any], uid: str | None) -> bool:
    """A pod of an earlier job with this name (deleted and re-created): another controller owns it."""
    owners = [owner for owner in pod["metadata"].get("ownerReferences") or [] if owner.get("controller")]
    return bool(uid and owners and all(owner.get("uid") != uid for owner in owners))


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def alive_names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods if is_alive(p)]


def undeleted_names(pods: list[dict[str, Any]]) -> list[str]:
    """Pods not yet being deleted (a second delete would only repeat the first)."""
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
