"""A NetworkPolicy per job (owned by it): its pods take connections from the same gang on any
port (rendezvous, NCCL/gloo's own ports), from the operator on the progress and metrics ports,
and from the metrics scraper on the metrics port — from nowhere else."""

from __future__ import annotations

from typing import Any

from phalanx import constants
from phalanx.api.config import NetworkPolicyConfig
from phalanx.api.types import TrainingJob
from phalanx.render.names import metadata, network_policy_name


def _peer(namespace_labels: dict[str, str] | None, pod_labels: dict[str, str] | None) -> dict[str, Any]:
    peer: dict[str, Any] = {}
    if namespace_labels is not None:
        peer["namespaceSelector"] = {"matchLabels": dict(namespace_labels)}
    if pod_labels is not None:
        peer["podSelector"] = {"matchLabels": dict(pod_labels)}
    return peer


def _rule(peer: dict[str, Any], ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An ingress rule from ``peer``; an empty peer (both selectors left out) means from anywhere,
    which Kubernetes spells as a rule without ``from`` (it refuses a peer that selects nothing)."""
    rule: dict[str, Any] = {"from": [peer]} if peer else {}
    return rule | ({"ports": ports} if ports else {})


def build_network_policy(job: TrainingJob, config: NetworkPolicyConfig) -> dict[str, Any]:
    gang = {"matchLabels": {constants.LABEL_JOB_NAME: job.metadata.name}}
    operator = _peer(config.operator_namespace_labels, config.operator_pod_labels)
    scraper = _peer(config.scraper_namespace_labels, config.scraper_pod_labels)
    ports = {name: {"protocol": "TCP", "port": name} for name in (constants.PORT_NAME_PROGRESS, constants.PORT_NAME_METRICS)}
    ingress = [
        {"from": [{"podSelector": gang}]},
        _rule(operator, [ports[constants.PORT_NAME_PROGRESS], ports[constants.PORT_NAME_METRICS]]),
    ]
    if config.scraper_namespace_labels is not None or config.scraper_pod_labels is not None:
        ingress.append(_rule(scraper, [ports[constants.PORT_NAME_METRICS]]))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, network_policy_name(job.metadata.name), constants.COMPONENT_NETWORK),
        "spec": {"podSelector": gang, "policyTypes": ["Ingress"], "ingress": ingress},
    }
