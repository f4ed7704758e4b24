"""Would the namespace's ResourceQuotas admit a whole gang at once? (pure)

A gang created pinned (``lifecycle.creation.create_pinned``) holds its nodes from its first
pod on, so it is only created that way when every pod will be admitted: a quota refusal
part-way would leave pods that start without their peers. The API server's own dry run checks
one pod against the quota, not the sum; this sums the gang's pods the way the quota admission
plugin counts them (``pods``/``count/pods``, ``requests.*`` and bare names, ``limits.*``),
against each quota's ``status.hard`` − ``status.used``. Conservative where it cannot be sure:
a quota with ``scopes``/``scopeSelector`` or without a status yet, or one that limits a resource
some pod does not declare (a LimitRange default would count), counts as no room, and the gang
is then created behind the gate (refusals there hold nothing). Two jobs of one namespace planned
at the same moment each see the same room: the later one may be refused part-way, and is then
recreated behind the gate (``lifecycle.replacement.recreate_interrupted``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.gang.inventory import (
    RESOURCE_PODS,
    Resources,
    add_resources,
    canonical_amount,
    pod_limits,
    pod_requests,
)

_POD_COUNTS = ("pods", "count/pods")
_REQUESTS, _LIMITS = "requests.", "limits."
_BARE_REQUESTS = ("cpu", "memory", "ephemeral-storage")  # a bare quota name means requests.<name>


def quota_entry(quota: Mapping[str, Any]) -> dict[str, Any]:
    """What the operator keeps of a ResourceQuota (its index entry)."""
    spec, status = quota.get("spec") or {}, quota.get("status") or {}
    return {"name": (quota.get("metadata") or {}).get("name", ""),
            "scoped": bool(spec.get("scopes") or spec.get("scopeSelector")),
            "hard": dict(status.get("hard") or {}) if "hard" in status else None,
            "used": dict(status.get("used") or {})}


def _need(key: str, requests: Mapping[str, int], limits: Mapping[str, int]) -> int | None:
    """How much of quota key ``key`` the pods use (None: a key pods do not count against)."""
    if key in _POD_COUNTS:
        return requests.get(RESOURCE_PODS, 0)
    if key.startswith(_REQUESTS):
        resource = key[len(_REQUESTS):]
        if resource == "storage" or "storageclass.storage.k8s.io/" in resource:
            return None  # PersistentVolumeClaims' storage, not a pod's
        return requests.get(resource, 0)
    if key.startswith(_LIMITS):
        return limits.get(key[len(_LIMITS):], 0)
    if key in _BARE_REQUESTS or key.startswith("hugepages-"):
        return requests.get(key, 0)
    return None  # services, configmaps, storage, object counts of other kinds


def quota_shortfall(pods: Iterable[Mapping[str, Any]], quotas: Iterable[Mapping[str, Any]]) -> str | None:
    """None when every quota has room for all of ``pods`` together; else why not (for logs)."""
    per_pod = [(pod_requests(pod), pod_limits(pod)) for pod in pods]
    requests: Resources = {}
    limits: Resources = {}
    for req, lim in per_pod:
        requests, limits = add_resources(requests, req), add_resources(limits, lim)
    for quota in quotas:
        if quota["scoped"] or quota["hard"] is None:
            return f"ResourceQuota {quota['name']}: scoped, or no status yet"
        for key, hard in quota["hard"].items():
            need = _need(key, requests, limits)
            if need is None:
                continue
            if key not in _POD_COUNTS and any(not _need(key, req, lim) for req, lim in per_pod):
                # a LimitRange default (or an admission plugin) may add it to the pod: not summable
                return f"ResourceQuota {quota['name']}: a pod declares no {key}"
            resource = key.split(".", 1)[1] if key.startswith((_REQUESTS, _LIMITS)) else key
            unit = RESOURCE_PODS if key in _POD_COUNTS else resource
            room = canonical_amount(unit, hard) - canonical_amount(unit, quota["used"].get(key, "0"))
            if need > room:
                return f"ResourceQuota {quota['name']}: {key} has room for {room}, the gang needs {need}"
    return None
