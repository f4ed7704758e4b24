"""Per-TrainingJob Prometheus series: one scrape of the operator gives the fleet.

``job_samples`` is pure: a job (metadata, spec, status) and rank 0's last progress → samples.
``JobMetrics`` keeps the latest samples of every live job and serves them on collect; ``forget``
drops a deleted job's series, so label values never pile up (no cardinality leak).

Conventions: ``phalanx_trainingjob_`` prefix, base units, ``_total`` only on the counter, and
"when did X happen" as a Unix ``_timestamp_seconds`` (dashboards and alerts take ``time() - x``),
so a value stays right between reconciles and across operator restarts. Labels: ``namespace``
and ``trainingjob`` (``job`` is the scrape job's label in Prometheus).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import REGISTRY, Collector

from phalanx import constants
from phalanx.api.types import Phase
from phalanx.lifecycle.status import parse_iso

log = logging.getLogger("phalanx.operator")

PREFIX = "phalanx_trainingjob_"
WAITING_PHASES = (Phase.PENDING.value, Phase.SCHEDULING.value)


@dataclass(frozen=True)
class Family:
    name: str  # the sample name (counters end in _total)
    type: str  # gauge | counter
    help: str
    labels: tuple[str, ...] = ()  # beyond namespace and trainingjob


STATUS_PHASE = Family(f"{PREFIX}status_phase", "gauge", "1 for the job's current phase, 0 for the others", ("phase",))
STATUS_CONDITION = Family(f"{PREFIX}status_condition", "gauge", "1 per status condition, with its status and reason",
                          ("condition", "status", "reason"))
NODES_DESIRED = Family(f"{PREFIX}nodes_desired", "gauge", "Nodes (pods) in the job's current gang")
NODES_READY = Family(f"{PREFIX}nodes_ready", "gauge", "Nodes (pods) of the current gang that are Ready")
ROLE_PODS_DESIRED = Family(f"{PREFIX}role_pods_desired", "gauge", "Jobs with spec.roles: pods of each role (worker too)",
                           ("role",))
ROLE_PODS_READY = Family(f"{PREFIX}role_pods_ready", "gauge", "Jobs with spec.roles: Ready pods of each role", ("role",))
STEP = Family(f"{PREFIX}step", "gauge", "Last optimizer step reported by rank 0")
PROGRESS_RATIO = Family(f"{PREFIX}progress_ratio", "gauge", "step / training.steps (0-1)")
ESTIMATED_REMAINING = Family(f"{PREFIX}estimated_remaining_seconds", "gauge", "Steps left times the last step time")
LOSS = Family(f"{PREFIX}loss", "gauge", "Training loss of the last step (global mean; NaN/Inf pass through)")
TOKENS_PER_SECOND = Family(f"{PREFIX}tokens_per_second", "gauge", "Global training throughput of the last step")
MFU = Family(f"{PREFIX}mfu_ratio", "gauge", "Model FLOPs utilisation of the last step (0-1)")
STEP_DURATION = Family(f"{PREFIX}step_duration_seconds", "gauge", "Wall time of the last step")
REPORTED_METRIC = Family(f"{PREFIX}reported_metric", "gauge",
                         "The last value of each metric rank 0 reported (eval_loss, learning_rate, ...; at most "
                         f"{constants.MAX_REPORTED_METRICS} per job)", ("metric",))
RESTARTS = Family(f"{PREFIX}restarts_total", "counter", "Whole-gang restarts of this job (status.restarts)")
LAST_PROGRESS = Family(f"{PREFIX}last_progress_timestamp_seconds", "gauge",
                       "When the step last advanced (or the current gang started running)")
LAST_CHECKPOINT = Family(f"{PREFIX}last_checkpoint_timestamp_seconds", "gauge", "When the last checkpoint was committed")
LAST_CHECKPOINT_STEP = Family(f"{PREFIX}last_checkpoint_step", "gauge",
                              "Step of the last committed checkpoint (0 before the first; checkpointing jobs only)")
CHECKPOINT_INTERVAL = Family(f"{PREFIX}checkpoint_interval_steps", "gauge", "spec.checkpoint.intervalSteps (when > 0)")
PENDING_SINCE = Family(f"{PREFIX}pending_since_timestamp_seconds", "gauge",
                       "While Pending or Scheduling: since when, and why (the reason of the condition holding it)",
                       ("reason",))

FAMILIES: tuple[Family, ...] = (
    STATUS_PHASE, STATUS_CONDITION, NODES_DESIRED, NODES_READY, ROLE_PODS_DESIRED, ROLE_PODS_READY, STEP, PROGRESS_RATIO, ESTIMATED_REMAINING,
    LOSS, TOKENS_PER_SECOND, MFU, STEP_DURATION, REPORTED_METRIC, RESTARTS, LAST_PROGRESS, LAST_CHECKPOINT,
    LAST_CHECKPOINT_STEP, CHECKPOINT_INTERVAL, PENDING_SINCE,
)


@dataclass(frozen=True)
class Sample:
    family: Family
    labels: tuple[tuple[str, str], ...]  # namespace, trainingjob, then the family's own
    value: float


def job_samples(job: dict[str, Any], progress: dict[str, Any] | None = None) -> list[Sample]:
    """Every series of one job. Loss, tokens/s, MFU and step time come from rank 0's progress when
    there is one (fresher, and a NaN loss survives), else from the status."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    base = ((constants.METRIC_LABEL_NAMESPACE, meta.get("namespace") or "default"), (constants.METRIC_LABEL_JOB, meta.get("name") or ""))
    live = progress or {}
    out: list[Sample] = []

    def add(family: Family, value: Any, *extra: str) -> None:
        number = _number(value)
        if number is not None:
            out.append(Sample(family, base + tuple(zip(family.labels, extra, strict=True)), number))

    phase = status.get("phase") or Phase.PENDING.value
    for p in Phase:
        add(STATUS_PHASE, p.value == phase, p.value)
    for cond in status.get("conditions") or []:
        add(STATUS_CONDITION, 1, cond.get("type", ""), str(cond.get("status", "Unknown")).lower(), cond.get("reason") or "")
    add(NODES_DESIRED, status.get("totalNodes") or spec.get("nodes"))
    add(NODES_READY, status.get("readyNodes", 0))
    for role in status.get("roles") or []:  # untrusted shape: the status is the API server's copy
        if isinstance(role, dict) and isinstance(role.get("name"), str):
            add(ROLE_PODS_DESIRED, role.get("replicas"), role["name"])
            add(ROLE_PODS_READY, role.get("ready"), role["name"])
    step, total = status.get("step"), status.get("totalSteps")
    add(STEP, step)
    add(PROGRESS_RATIO, min(1.0, step / total) if step is not None and total else None)
    add(ESTIMATED_REMAINING, status.get("estimatedRemainingSeconds"))
    add(LOSS, _first(live.get("loss"), status.get("loss")))
    add(TOKENS_PER_SECOND, _first(live.get("tokensPerSecond"), status.get("tokensPerSecond")))
    add(MFU, live.get("mfu"))
    add(STEP_DURATION, live.get("stepTimeSeconds"))
    for name, value in _reported_metrics(live, status).items():
        add(REPORTED_METRIC, value, name)
    add(RESTARTS, status.get("restarts", 0))
    add(LAST_PROGRESS, _epoch(status.get("lastProgressTime")))
    _checkpoint_samples(add, spec, status)
    if phase in WAITING_PHASES:
        add(PENDING_SINCE, _pending_since(meta, status), pending_reason(status))
    return out


def _reported_metrics(live: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Each reported metric's last value: the status's (a bounded map the operator wrote), then
    rank 0's fresher ones (parsed and bounded the same way); at most MAX_REPORTED_METRICS."""
    merged: dict[str, Any] = {}
    for source in (status.get(constants.ProgressKey.METRICS), live.get(constants.ProgressKey.METRICS)):
        if isinstance(source, dict):
            merged |= {name: value for name, value in source.items() if isinstance(name, str)}
    return dict(list(merged.items())[-constants.MAX_REPORTED_METRICS:])


def _number(value: Any) -> float | None:
    """A sample value; None (no sample) for what is missing or not a number."""
    if value is None or isinstance(value, str):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _first(*values: Any) -> float | None:
    """The first value that is a number."""
    return next((n for v in values if (n := _number(v)) is not None), None)


def _checkpoint_samples(add, spec: dict[str, Any], status: dict[str, Any]) -> None:
    ckpt = status.get("lastCheckpoint") or {}
    add(LAST_CHECKPOINT, _epoch(ckpt.get("time")))
    checkpointing = (spec.get("checkpoint") or {}).get("volume") is not None
    if checkpointing:
        add(LAST_CHECKPOINT_STEP, ckpt.get("step", 0))
        add(CHECKPOINT_INTERVAL, (spec.get("checkpoint") or {}).get("intervalSteps") or None)


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type"): c for c in status.get("conditions") or []}


def pending_reason(status: dict[str, Any]) -> str:
    """Why a job waits: the reason of the first of Created, Schedulable that is not True (e.g.
    CreateRefused, Unschedulable, GangIncomplete), else the phase itself."""
    conds = _conditions(status)
    for type_ in (constants.COND_CREATED, constants.COND_SCHEDULABLE):
        cond = conds.get(type_)
        if cond and cond.get("status") != "True" and cond.get("reason"):
            return cond["reason"]
    return status.get("phase") or Phase.PENDING.value


def _pending_since(meta: dict[str, Any], status: dict[str, Any]) -> float | None:
    """The latest of: created, stopped running (restart, resize, suspend), resumed."""
    conds = _conditions(status)
    times = [_epoch(meta.get("creationTimestamp"))]
    for type_ in (constants.COND_RUNNING, constants.COND_SUSPENDED):
        cond = conds.get(type_)
        if cond and cond.get("status") == "False":
            times.append(_epoch(cond.get("lastTransitionTime")))
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _epoch(ts: Any) -> float | None:
    """RFC 3339 (as Kubernetes and the runtime write it) → Unix seconds."""
    if isinstance(ts, datetime):
        return ts.timestamp()
    try:
        parsed = parse_iso(str(ts)) if ts else None
    except ValueError:
        return None
    return parsed.timestamp() if parsed else None


class JobMetrics(Collector):
    """The latest samples of every job this operator runs a loop for, served on each scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # observe: the event loop; collect: the HTTP server's thread
        self._jobs: dict[tuple[str, str], list[Sample]] = {}

    def observe(self, job: dict[str, Any], progress: dict[str, Any] | None = None) -> None:
        """Never raises: metrics must not break a reconcile (the job keeps its last samples)."""
        meta = job.get("metadata") or {}
        try:
            samples = job_samples(job, progress)
        except Exception:  # noqa: BLE001
            log.exception("metrics of %s/%s", meta.get("namespace"), meta.get("name"))
            return
        with self._lock:
            self._jobs[(meta.get("namespace") or "default", meta.get("name") or "")] = samples

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, name), None)

    def jobs(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._jobs)

    def describe(self) -> Iterable[Metric]:
        return [_metric(f) for f in FAMILIES]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            samples = [s for job in self._jobs.values() for s in job]
        metrics = {f.name: _metric(f) for f in FAMILIES}
        for s in samples:
            metrics[s.family.name].add_sample(s.family.name, dict(s.labels), s.value)
        yield from metrics.values()


def _metric(family: Family) -> Metric:
    # prometheus_client names a counter's family without the _total its samples carry.
    name = family.name.removesuffix("_total") if family.type == "counter" else family.name
    return Metric(name, family.help, family.type)


JOB_METRICS = JobMetrics()
REGISTRY.register(JOB_METRICS)
