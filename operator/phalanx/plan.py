"""``phalanx plan JOB.yaml --nodes NODES.yaml [--pods PODS.yaml] [--quarantine NQ.yaml] [--levels a,b,c] [--json]``.

Offline dry run of the gang planner on ``kubectl get nodes -o yaml`` output (and the NodeQuarantines
of ``kubectl get nq -o yaml``: those nodes are left out, as the operator does): where the job would
go, how many domains it spans, the predicted gradient allreduce against the most compact
placement possible, and ZeRO model-state memory per GPU. Pure: reads files, returns text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from phalanx.api.config import OperatorConfig
from phalanx.api.manifests import parse_documents
from phalanx.api.types import TrainingJob
from phalanx.constants import QUARANTINE_KIND
from phalanx.gang.admission import gang_request
from phalanx.gang.costmodel import cost_report, levels_config
from phalanx.gang.inventory import nodes_from_list, pods_from_list, reservations_from_pods
from phalanx.gang.nodehealth import Quarantine, mark_quarantined
from phalanx.gang.planner import GangRequest, Placement, plan_gang
from phalanx.gang.tolerations import SourcedToleration, job_tolerations
from phalanx.gang.topology import Topology, topology_levels
from phalanx.gang.topology_presets import Detection, detect

EXIT_PLACED = 0
EXIT_UNSCHEDULABLE = 1
EXIT_INPUT_ERROR = 2


def _load(src: str | os.PathLike | dict | list) -> Any:
    """A path, YAML text or an already-parsed object. Multi-document YAML becomes a List."""
    if isinstance(src, dict | list):
        return src
    text = str(src)
    if "\n" not in text and os.path.exists(text):
        with open(text, encoding="utf-8") as f:
            text = f.read()
    docs = parse_documents(text)
    if len(docs) == 1:
        return docs[0]
    items: list[Any] = []
    for d in docs:
        items.extend(d.get("items", []) if isinstance(d, dict) and d.get("kind", "").endswith("List") else [d])
    return {"kind": "List", "items": items}


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def _secs(x: float) -> str:
    return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.3f} s"


def run_plan(
    job_yaml: str | os.PathLike | dict,
    nodes_yaml: str | os.PathLike | dict | list,
    pods_yaml: str | os.PathLike | dict | list | None = None,
    levels: str | Sequence[str] | None = None,
    json_out: bool = False,
    *,
    config: OperatorConfig | None = None,
    quarantine_yaml: str | os.PathLike | dict | list | None = None,
) -> tuple[int, str]:
    """(exit code, text): 0 placed, 1 unschedulable, 2 bad input."""
    try:
        job = TrainingJob.model_validate(_load(job_yaml))
        node_objs = _load(nodes_yaml)
        nodes = nodes_from_list(node_objs)
        raw_pods = _load(pods_yaml) if pods_yaml is not None else {"items": []}
        pod_items = raw_pods.get("items", []) if isinstance(raw_pods, dict) else raw_pods
        usage = pods_from_list(pod_items)
        quarantined = active_quarantines(_load(quarantine_yaml)) if quarantine_yaml is not None else []
    except Exception as e:  # noqa: BLE001 - any parse error is an input error for the CLI
        return EXIT_INPUT_ERROR, f"error: {e}"
    if not nodes:
        return EXIT_INPUT_ERROR, "error: no Node objects in the nodes file"
    nodes = mark_quarantined(nodes, [q.node for q in quarantined])

    config = config or OperatorConfig()
    topo_cfg = config.topology.with_kueue_topologies(kueue_topologies(node_objs))
    detection = detect(topo_cfg, nodes)
    names = levels.split(",") if isinstance(levels, str) else levels
    lvls = topology_levels(list(detection.levels), names)
    topo_cfg = levels_config(lvls, topo_cfg)
    key = f"{job.metadata.namespace}/{job.metadata.name}"
    hostmap = {n.labels.get("kubernetes.io/hostname", n.name): n.name for n in nodes}
    reservations = reservations_from_pods(pod_items, hostname_to_node=hostmap)
    if job.spec.network.profile not in config.network_profiles:
        return EXIT_INPUT_ERROR, (f"error: spec.network.profile: unknown network profile {job.spec.network.profile!r}; "
                                  f"known: {', '.join(sorted(config.network_profiles))}")
    request = gang_request(job, config)
    topo = Topology.build(nodes, lvls)
    result = plan_gang(request, nodes, usage, lvls, reservations, topology=topo)
    sourced = job_tolerations([t.to_kube() for t in job.spec.tolerations], request.requests, config.job_tolerations)
    context = _context_notes(sourced, detection, names)

    held = [{"node": q.node, "reason": q.reason, "expiresAt": q.expires_at.isoformat() if q.expires_at else None}
            for q in quarantined]
    note = [f"quarantined: {', '.join(f'{q.node} ({q.reason})' for q in quarantined)}"] if quarantined else []
    note += context
    if not isinstance(result, Placement):
        if json_out:
            return EXIT_UNSCHEDULABLE, json.dumps({"job": key, "schedulable": False, "reason": result.reason,
                                                   "message": result.message, "fit": result.fit,
                                                   "excluded": result.excluded, "quarantined": held,
                                                   **_json_context(sourced, detection)}, indent=2)
        return EXIT_UNSCHEDULABLE, "\n".join([f"{key}: unschedulable: {result.message}", *note])

    report = cost_report(job.spec, result.nodes, nodes, topo, topo_cfg, requests=dict(request.requests))
    if json_out:
        return EXIT_PLACED, _json_report(key, result, report, held, _json_context(sourced, detection))
    return EXIT_PLACED, "\n".join([_text_report(key, job, request, result, report), *note])


def active_quarantines(obj: Any, now: datetime | None = None) -> list[Quarantine]:
    """The NodeQuarantines of a ``kubectl get nq -o yaml`` List (or one object) not expired at ``now``."""
    items = obj.get("items", [obj]) if isinstance(obj, dict) else list(obj)
    now = now or datetime.now(UTC)
    found = [Quarantine.from_object(item) for item in items
             if isinstance(item, dict) and item.get("kind", QUARANTINE_KIND) == QUARANTINE_KIND]
    return sorted((q for q in found if q.active(now)), key=lambda q: q.node)


def kueue_topologies(obj: Any) -> list[dict[str, Any]]:
    """Kueue Topology objects (kueue.x-k8s.io) in a List next to the nodes: auto's candidates."""
    items = obj.get("items", [obj]) if isinstance(obj, dict) else list(obj)
    return [item for item in items if isinstance(item, dict) and item.get("kind") == "Topology"
            and str(item.get("apiVersion", "")).startswith("kueue.x-k8s.io/")]


def _context_notes(sourced: Sequence[SourcedToleration], detection: Detection,
                   names: Sequence[str] | None) -> list[str]:
    """What the verdict rests on: the topology detected (or --levels), the nodes it knows nothing
    of, and each toleration with where it came from."""
    lines = [f"topology: --levels {','.join(names)}" if names else f"topology: {detection.describe()}"]
    warning = detection.warning()
    if warning and not names:
        lines.append(f"note: {warning}")
    lines += [f"toleration: {t.describe()}" for t in sourced]
    return lines


def _json_context(sourced: Sequence[SourcedToleration], detection: Detection) -> dict[str, Any]:
    return {"topology": {"preset": detection.preset, "levels": detection.level_names,
                         "unlabelledNodes": list(detection.unlabelled)},
            "tolerations": [{"toleration": dict(t.toleration), "source": t.source} for t in sourced]}


def _json_report(key: str, result: Placement, report: Any, quarantined: list[dict[str, Any]],
                 context: dict[str, Any]) -> str:
    out: dict[str, Any] = {
        "job": key, "schedulable": True, "quarantined": quarantined, **context,
        "placement": [{"rank": i, "node": n, "domain": d}
                      for i, (n, d) in enumerate(zip(result.nodes, result.domains, strict=True))],
        "roles": result.role_nodes, "span": result.span, "notes": result.notes,
        "params": report.params, "gradientBytes": report.gradient_bytes,
        "lowerBoundSpan": report.lower_bound_span, "zeroBytesPerGpu": report.zero_bytes_per_gpu,
    }
    for name, est in (("allreduce", report.estimate), ("lowerBound", report.lower_bound)):
        if est is not None:
            out[name] = {"ringSeconds": est.ring_seconds, "hierarchicalSeconds": est.hierarchical_seconds,
                         "bottleneck": est.bottleneck.level, "bandwidthGbps": est.bottleneck.bandwidth_gbps,
                         "latencyUs": est.bottleneck.latency_us, "ranks": est.ranks, "nodes": est.nodes}
    return json.dumps(out, indent=2)


def _text_report(key: str, job: TrainingJob, request: GangRequest, result: Placement, report: Any) -> str:
    lines = [f"{key}: {request.describe()} placed"]
    width = max(len(n) for n in result.nodes)
    lines.append(f"  {'rank':>4}  {'node':<{width}}  domain")
    for i, (n, d) in enumerate(zip(result.nodes, result.domains, strict=True)):
        lines.append(f"  {i:>4}  {n:<{width}}  {d}")
    for role, role_nodes in result.role_nodes.items():
        lines.append(f"role {role}: " + ", ".join(f"{i} {n}" for i, n in enumerate(role_nodes)))
    span = ", ".join(f"{k} {v}" for k, v in result.span.items())
    lines.append(f"span: {span}")
    if report.lower_bound_span:
        lines.append("lower bound span: " + ", ".join(f"{k} {v}" for k, v in report.lower_bound_span.items()))
    for note in result.notes:
        lines.append(f"note: {note}")
    est, lb = report.estimate, report.lower_bound
    if est is None:
        lines.append("allreduce: no prediction (model.entrypoint or model.pretrained: parameter count unknown)")
        return "\n".join(lines)
    lines.append(
        f"gradient allreduce: {report.params / 1e9:.2f}B params, {_gb(report.gradient_bytes)} fp32 grads "
        f"per DP group of {est.ranks} ranks on {est.nodes} nodes"
    )
    lines.append(f"  bottleneck: {est.bottleneck.level} {est.bottleneck.bandwidth_gbps:g} Gb/s, "
                 f"{est.bottleneck.latency_us:g} us")
    lines.append(f"  ring:         {_secs(est.ring_seconds)}"
                 + (f"   (lower bound {_secs(lb.ring_seconds)})" if lb else ""))
    lines.append(f"  hierarchical: {_secs(est.hierarchical_seconds)}"
                 + (f"   (lower bound {_secs(lb.hierarchical_seconds)})" if lb else ""))
    p = job.spec.parallelism
    lines.append(f"ZeRO-{p.zero} model state per GPU: {_gb(report.zero_bytes_per_gpu)} "
                 f"(tp {p.tensor}, pp {p.pipeline}, dp {job.spec.data_degree})")
    return "\n".join(lines)
