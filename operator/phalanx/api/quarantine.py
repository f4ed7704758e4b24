"""The NodeQuarantine API: a node kept out of new gang placements for a while (gang/nodehealth.py
decides, nodehealth.py writes them). Cluster-scoped, one object per node, named after it: the
operator creates and deletes them, an admin clears one with ``kubectl delete nq NODE``; tenants
have no verbs on them (the chart's RBAC)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import yaml
from pydantic import Field

from phalanx import constants
from phalanx.api import patterns
from phalanx.api.crd import custom_resource_definition, openapi_schema
from phalanx.api.types import Model

MAX_EVIDENCE = 16  # the newest implications kept on the record
MAX_MESSAGE = 1024


class QuarantineEvidence(Model):
    """One implication of the node: a job's failure attributed to it, or a signal of its own."""

    job: str | None = Field(None, max_length=317, description="namespace/name of the job whose failure named the node.")
    node_rank: int | None = Field(None, ge=0, description="The job's node-rank on the node.")
    category: str = Field(..., max_length=64, description="The failure's category, or the signal's kind.")
    message: str = Field("", max_length=512, description="The failure's or signal's last line.")
    time: datetime = Field(..., description="When the failure or signal was seen.")


class NodeQuarantineSpec(Model):
    node: str = Field(..., max_length=patterns.MAX_DNS_SUBDOMAIN, pattern=patterns.DNS_SUBDOMAIN,
                      description="The quarantined node (the object's name too).")
    reason: constants.QuarantineReason = Field(..., description="Why the node is quarantined.")
    message: str = Field("", max_length=MAX_MESSAGE, description="What was seen, in words.")
    expires_at: datetime | None = Field(
        None, description="The operator deletes the quarantine at this time; none: it stays until deleted.")
    evidence: list[QuarantineEvidence] = Field(
        default_factory=list, max_length=MAX_EVIDENCE, description="The implications that led to it, newest last.")


class NodeQuarantineStatus(Model):
    """Nothing is reported yet: the spec is the record."""


PRINTER_COLUMNS = [
    {"name": "Node", "type": "string", "jsonPath": ".spec.node"},
    {"name": "Reason", "type": "string", "jsonPath": ".spec.reason"},
    {"name": "Expires", "type": "string", "format": "date-time", "jsonPath": ".spec.expiresAt"},
    {"name": "Message", "type": "string", "jsonPath": ".spec.message", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

NAME_RULES = [{"rule": "self.metadata.name == self.spec.node", "message": "metadata.name must be spec.node"}]


def build_quarantine_crd() -> dict[str, Any]:
    names = {"kind": constants.QUARANTINE_KIND, "plural": constants.QUARANTINE_PLURAL,
             "singular": constants.QUARANTINE_SINGULAR, "shortNames": constants.QUARANTINE_SHORT_NAMES}
    crd = custom_resource_definition(constants.QUARANTINE_CRD_NAME, names, openapi_schema(NodeQuarantineSpec),
                                     NodeQuarantineStatus, NAME_RULES, PRINTER_COLUMNS)
    crd["spec"]["scope"] = "Cluster"
    crd["spec"]["names"]["categories"] = ["phalanx"]  # `kubectl get all` lists namespaced objects only
    return crd


def quarantine_crd_yaml() -> str:
    header = "# Generated from operator/phalanx/api by `make crds` (phalanx crd --quarantine). Do not edit.\n"
    return header + yaml.safe_dump(build_quarantine_crd(), sort_keys=False, width=100)
