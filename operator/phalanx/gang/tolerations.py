"""A gang pod's tolerations as the cluster applies them, each with where it came from.

Three sources, in this order:

1. the job's own ``spec.tolerations`` (bounded by the namespace's policy at validation);
2. one ``{key: <resource>, operator: Exists, effect: NoSchedule}`` per extended resource the pod
   requests — what Kubernetes' ExtendedResourceToleration admission plugin adds (GKE, most
   distributions). GKE and the GPU Operator taint GPU nodes ``nvidia.com/gpu``; the planner has
   to tolerate what kube-scheduler will, and the rendered pod carries them so placement also
   holds where the plugin is off;
3. the admin's ``jobTolerations`` (operator config): taints of node pools that no resource
   names, e.g. AKS's ``sku=gpu``, optionally only for pods that request given resources. The
   config is refused at start-up when one breaks a toleration rule of the policy.

Pure; the planner (``GangRequest``), the pod renderer and ``phalanx plan`` call the same function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXTENDED_RESOURCE_SOURCE = "requests {resource} (as ExtendedResourceToleration adds)"
SPEC_SOURCE = "spec.tolerations[{index}]"
CONFIG_SOURCE = "operator config jobTolerations[{index}]"


@dataclass(frozen=True)
class SourcedToleration:
    toleration: Mapping[str, Any]
    source: str

    def describe(self) -> str:
        """'nvidia.com/gpu Exists NoSchedule ← requests nvidia.com/gpu (...)'."""
        t = self.toleration
        what = " ".join(str(part) for part in (
            t.get("key") or "*", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "(any effect)")
            if part != "")
        return f"{what} ← {self.source}"


def is_extended_resource(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: a domain-prefixed name outside kubernetes.io, not a
    quota's ``requests.`` form."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def extended_resource_tolerations(resources: Iterable[str]) -> list[dict[str, str]]:
    """What ExtendedResourceToleration adds for a pod requesting ``resources`` (sorted, once each)."""
    return [{"key": name, "operator": "Exists", "effect": "NoSchedule"}
            for name in sorted({r for r in resources if is_extended_resource(r)})]


def _key(toleration: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in toleration.items() if v not in (None, "")))


def job_tolerations(spec_tolerations: Sequence[Mapping[str, Any]], requested: Iterable[str],
                    defaults: Sequence[Any] = ()) -> list[SourcedToleration]:
    """Every toleration of a pod of the job, first source first, each toleration once.
    ``requested``: the resource names the pod requests (or limits); ``defaults``: the config's
    ``jobTolerations`` (each a ``JobToleration``)."""
    requested = set(requested)
    out: list[SourcedToleration] = []
    seen: set[tuple] = set()

    def add(toleration: Mapping[str, Any], source: str) -> None:
        key = _key(toleration)
        if key not in seen:
            seen.add(key)
            out.append(SourcedToleration(dict(toleration), source))

    for index, tol in enumerate(spec_tolerations):
        add(tol, SPEC_SOURCE.format(index=index))
    for tol in extended_resource_tolerations(requested):
        add(tol, EXTENDED_RESOURCE_SOURCE.format(resource=tol["key"]))
    for index, default in enumerate(defaults):
        if not default.when_requesting or requested & set(default.when_requesting):
            add(default.to_kube(), CONFIG_SOURCE.format(index=index))
    return out


def pod_resource_names(pod_spec: Mapping[str, Any]) -> set[str]:
    """Every resource a pod's containers and init containers request or limit."""
    names: set[str] = set()
    for container in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            names |= set(resources.get(part) or {})
    return names


def with_cluster_tolerations(pod: dict[str, Any], defaults: Sequence[Any] = ()) -> dict[str, Any]:
    """``pod`` (rendered) with the tolerations ``job_tolerations`` gives for what it requests,
    after its own."""
    spec = pod["spec"]
    found = job_tolerations(spec.get("tolerations") or [], pod_resource_names(spec), defaults)
    if found:
        spec["tolerations"] = [dict(t.toleration) for t in found]
    return pod
