"""charts/phalanx/values.schema.json, generated (`make crds`): Helm refuses bad values at
install, template and lint. The parts the operator reads (network profiles, topology, policy)
come from the same pydantic models as the operator config; the chart's own keys are below."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from phalanx.api.config import (
    HealthConfig,
    JobToleration,
    Limits,
    NetworkPolicyConfig,
    NetworkProfile,
    TopologyConfig,
)
from phalanx.api.crd import _inline, _structural
from phalanx.api.policy import NamespacePolicy, PolicyRules

NULLABLE = "x-phalanx-nullable"


def _model(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _structural(_mark_nullable(_inline(raw, raw.get("$defs", {}))))
    return _strip(schema)


def _mark_nullable(schema: Any) -> Any:
    """A field that may be null (``X | None``; null: "any" or "no limit") stays nullable in Helm's
    schema: the CRD's structural schema drops the null, Helm's validator must not refuse it."""
    if isinstance(schema, list):
        return [_mark_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _mark_nullable(v) for k, v in schema.items()}
    if any(isinstance(o, dict) and o.get("type") == "null" for o in schema.get("anyOf", ())):
        out[NULLABLE] = True
    return out


def _strip(schema: Any) -> Any:
    """Keep JSON-schema keywords Helm's validator knows; drop Kubernetes extensions."""
    if isinstance(schema, list):
        return [_strip(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strip(v) for k, v in schema.items() if not k.startswith(("x-kubernetes-", NULLABLE)) and k != "format"}
    if schema.get(NULLABLE) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    if "exclusiveMinimum" in out and out["exclusiveMinimum"] is True:  # OpenAPI 3.0 → draft 7
        out["exclusiveMinimum"] = out.pop("minimum")
    return out


def _obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False, **extra}


STR, INT, BOOL, MAP = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "object"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
MONITOR = _obj({"enabled": BOOL, "interval": STR, "labels": MAP})


def values_schema() -> dict[str, Any]:
    policy = _obj({"default": _model(PolicyRules), "namespaces": {"type": "array", "items": _model(NamespacePolicy)}})
    netpol = _model(NetworkPolicyConfig)
    # The scraper's selectors as the operator takes them (string maps; null allowed, it means something).
    netpol_values = _obj({"enabled": BOOL, **{k: netpol["properties"][k] for k in ("scraperNamespaceLabels", "scraperPodLabels")}})
    assert set(netpol_values["properties"]) <= set(netpol["properties"]) | {"enabled"}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Phalanx chart values",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "image": _obj({"repository": STR, "tag": STR, "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}}),
            "podAnnotations": MAP,
            "watch": _obj({"allNamespaces": BOOL, "namespaces": {"type": "array", "items": STR}}),
            "replicas": {"type": "integer", "minimum": 1},
            "leaderElection": _obj({"enabled": BOOL, "leaseName": STR, "leaseDurationSeconds": INT,
                                    "renewDeadlineSeconds": INT, "retryPeriodSeconds": INT}),
            "resources": MAP,
            "podCreateConcurrency": {"type": "integer", "minimum": 1, "maximum": 1024},
            "createPinned": BOOL,
            "restartInPlace": BOOL,
            "replaceLostNodes": BOOL,
            "limits": _model(Limits),
            "health": _model(HealthConfig),
            "terminationGracePeriodSeconds": {"type": "integer", "minimum": 10},
            "livenessPort": PORT,
            "metricsPort": PORT,
            "metrics": _obj({"service": BOOL, "serviceMonitor": MONITOR, "podMonitor": MONITOR}),
            "prometheusRule": _obj({"enabled": BOOL, "labels": MAP, "params": MAP}),
            "grafanaDashboard": _obj({"enabled": BOOL, "namespace": STR, "labels": MAP, "annotations": MAP}),
            "policy": policy,
            "admissionPolicy": _obj({"enabled": BOOL}),
            "networkPolicy": netpol_values,
            "networkProfiles": {"type": "object", "additionalProperties": _model(NetworkProfile)},
            "topology": _model(TopologyConfig),
            "jobTolerations": {"type": "array", "items": _model(JobToleration)},
            "defaultShmSize": {"type": ["string", "integer"]},
            "runtime": _obj({"image": _obj({"repository": STR, "tag": STR})}),
            "serviceAccount": _obj({"create": BOOL, "name": STR}),
            "nodeSelector": MAP,
            "tolerations": {"type": "array"},
            "affinity": MAP,
            "priorityClassName": STR,
        },
    }


def values_schema_json() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=False) + "\n"
