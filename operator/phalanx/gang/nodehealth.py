"""Node health: which nodes to quarantine (a NodeQuarantine), renew or release. Pure: the operator's
``phalanx.nodehealth`` feeds it what it watches and carries out what it returns.

Signals:

- a node condition listed in ``health.unhealthyConditions`` whose status is True, or a taint
  listed in ``health.unhealthyTaints`` (GPU/XID errors reported by a node problem detector or a
  GPU health monitor): the node is quarantined at once, and renewed while the signal lasts.
  NotReady and the unreachable taint are not signals here: the planner already leaves such nodes
  out (``NodeExclusion.NOT_READY``, ``TAINTED``);
- a job's own evidence: its ``status.lastFailure`` names the node the failed pod ran on (recorded
  with the failure: the placement may have moved since), and the failure's kind implicates the node (``implicates``): communication errors, a
  rank that reported itself hung, a node lost under the gang, a device error in the message, a
  failed pre-flight check. User-code errors, out-of-memory and invalid configs never do. A node
  named ``evidenceThreshold`` times within ``evidenceWindowSeconds`` is quarantined with reason
  JobEvidence. What a job reports (its messages, its category) is its tenant's word, so the
  failures must come from ``evidenceNamespaces`` namespaces (a node lost under a gang, seen by
  the operator itself, counts alone), and at most ``maxEvidenceFraction`` of the nodes are held
  on job evidence at once: one tenant cannot quarantine the cluster.

A quarantine lasts ``quarantineSeconds``; an expired one is released (deleted) unless its signal is
still there. One without an expiry (an admin's, reason Manual) stays until it is deleted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from phalanx import constants
from phalanx.api.config import HealthConfig
from phalanx.api.quarantine import MAX_EVIDENCE, MAX_MESSAGE
from phalanx.constants import FailureCategory, QuarantineReason, Reason
from phalanx.gang.inventory import NodeInfo

# Failure kinds that say something about the node the failed rank ran on.
IMPLICATING_CATEGORIES = frozenset({FailureCategory.COMMUNICATION, FailureCategory.PREFLIGHT})
IMPLICATING_REASONS = frozenset({Reason.NODE_LOST})
# A device fault in the failure's message, whatever its category (the driver's words).
DEVICE_ERROR = re.compile(r"uncorrectable ECC|ECC error|\bXid\b|fallen off the bus|GPU is lost|"
                          r"NVLink error|CUDA error: (unspecified launch failure|an illegal instruction)", re.IGNORECASE)
MAX_EVIDENCE_MESSAGE = 512
MAX_NODE_NAME = 253  # a DNS subdomain


@dataclass(frozen=True)
class Evidence:
    """One implication of a node. ``key`` tells repeats apart: the same failure seen on every
    status update of its job counts once."""

    node: str
    category: str
    time: datetime
    message: str = ""
    job: str | None = None  # "namespace/name"
    node_rank: int | None = None
    key: tuple[Any, ...] = ()
    observed: bool = False  # seen by the operator (a lost node), not reported by the job

    @property
    def namespace(self) -> str | None:
        return self.job.split("/", 1)[0] if self.job else None

    def to_record(self) -> dict[str, Any]:
        """NodeQuarantine spec.evidence[] (camelCase)."""
        out: dict[str, Any] = {"category": self.category, "time": _iso(self.time),
                               "message": self.message[:MAX_EVIDENCE_MESSAGE]}
        if self.job is not None:
            out["job"] = self.job
        if self.node_rank is not None:
            out["nodeRank"] = self.node_rank
        return out


@dataclass(frozen=True)
class Quarantine:
    """What the planner and this policy read of a NodeQuarantine."""

    node: str
    reason: str
    expires_at: datetime | None = None  # None: until deleted
    # The version the operator decided on: its delete of an expired quarantine carries it as a
    # precondition, so an admin's change since (a later expiresAt) is not deleted with it.
    resource_version: str = field(default="", compare=False)
    created_at: datetime | None = field(default=None, compare=False)  # the failures before it are spent

    def active(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Quarantine:
        spec = obj.get("spec") or {}
        meta = obj.get("metadata") or {}
        name = meta.get("name") or spec.get("node", "")
        return cls(node=spec.get("node") or name, reason=spec.get("reason", QuarantineReason.MANUAL),
                   expires_at=parse_time(spec.get("expiresAt")), resource_version=str(meta.get("resourceVersion") or ""),
                   created_at=parse_time(meta.get("creationTimestamp")))


@dataclass(frozen=True)
class Quarantined:
    """A new quarantine: the object to create, and the job whose failure tipped it (its Event)."""

    node: str
    reason: str
    message: str
    expires_at: datetime
    evidence: tuple[Evidence, ...] = ()

    @property
    def tipping_job(self) -> str | None:
        return self.evidence[-1].job if self.evidence else None


@dataclass(frozen=True)
class HealthActions:
    create: list[Quarantined] = field(default_factory=list)
    renew: dict[str, datetime] = field(default_factory=dict)  # node → new expiresAt
    release: list[str] = field(default_factory=list)  # expired: delete


# ---------------------------------------------------------------------------------------------
# Signals


def parse_time(value: Any) -> datetime | None:
    """An aware datetime (None: missing, malformed or without a zone: it could not be compared)."""
    if not isinstance(value, datetime):
        if not isinstance(value, str) or not value or len(value) > 64:
            return None
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return value if value.tzinfo is not None else None


def _iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def node_signal(node: Mapping[str, Any], config: HealthConfig) -> str | None:
    """What makes ``node`` (a raw Node) unhealthy now, in words (None: nothing does)."""
    wanted = set(config.unhealthy_conditions)
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") in wanted and cond.get("status") == "True":
            detail = cond.get("message") or cond.get("reason") or ""
            return f"condition {cond['type']}=True" + (f": {detail}" if detail else "")
    taints = set(config.unhealthy_taints)
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("key") in taints:
            return f"taint {taint['key']}" + (f"={taint['value']}" if taint.get("value") else "")
    return None


def signal_reason(signal: str) -> QuarantineReason:
    return QuarantineReason.TAINT if signal.startswith("taint ") else QuarantineReason.CONDITION


def implicates(failure: Mapping[str, Any]) -> bool:
    """Does a status.lastFailure say something about its node (not about the job's own code)?"""
    category, reason = (value if isinstance(value, str) else "" for value in (failure.get("category"), failure.get("reason")))
    if category in IMPLICATING_CATEGORIES or reason in IMPLICATING_REASONS:
        return True
    if category == FailureCategory.HANG:  # a rank that reported itself stuck; not the job-wide no-progress timeout
        return failure.get("rank") is not None and reason != Reason.HANG
    if category in (FailureCategory.OUT_OF_MEMORY, FailureCategory.INVALID_CONFIG):
        return False
    message = failure.get("message")
    return isinstance(message, str) and bool(DEVICE_ERROR.search(message[:MAX_EVIDENCE_MESSAGE * 8]))


def failure_evidence(job: Mapping[str, Any]) -> Evidence | None:
    """The node a TrainingJob's last failure implicates (None: it implicates none, or the record
    is malformed: a status is data, never trusted to be well formed)."""
    failure = (job.get("status") or {}).get("lastFailure")
    if not isinstance(failure, Mapping):
        return None
    node, node_rank = failure.get("node"), failure.get("nodeRank")
    when = parse_time(failure.get("time"))
    if (not isinstance(node, str) or not node or len(node) > MAX_NODE_NAME or when is None
            or not implicates(failure)):
        return None
    meta = job.get("metadata") or {}
    return Evidence(node=node, category=str(failure.get("category"))[:64], time=when,
                    message=str(failure.get("message") or failure.get("reason") or "")[:MAX_EVIDENCE_MESSAGE],
                    job=f"{meta.get('namespace')}/{meta.get('name')}",
                    node_rank=node_rank if type(node_rank) is int else None,
                    key=(meta.get("uid"), failure.get("time"), failure.get("pod")),
                    observed=failure.get("reason") == Reason.NODE_LOST)


# ---------------------------------------------------------------------------------------------
# Decisions


def recent(evidence: Iterable[Evidence], now: datetime, config: HealthConfig) -> list[Evidence]:
    """The evidence inside the window, oldest first."""
    since = now - timedelta(seconds=config.evidence_window_seconds)
    return sorted((e for e in evidence if since <= e.time <= now + timedelta(minutes=5)), key=lambda e: e.time)


def _evidence_message(node: str, items: Sequence[Evidence], config: HealthConfig) -> str:
    jobs = sorted({e.job for e in items if e.job})
    kinds = sorted({e.category for e in items})
    text = (f"{len(items)} failures within {config.evidence_window_seconds}s named node {node} "
            f"({', '.join(kinds)}; jobs {', '.join(jobs) or '-'}); last: {items[-1].message}")
    return text[:MAX_MESSAGE]


def plan_health(signals: Mapping[str, str | None], quarantines: Mapping[str, Quarantine],
                evidence: Iterable[Evidence], now: datetime, config: HealthConfig) -> HealthActions:
    """What to create, renew and release now. ``signals``: each existing node's ``node_signal``;
    ``quarantines`` by node; ``evidence``: what jobs implicated (any age)."""
    actions = HealthActions()
    expires = now + timedelta(seconds=config.quarantine_seconds)
    for node, signal in sorted(signals.items()):
        if not signal or not config.enabled:
            continue
        held = quarantines.get(node)
        if held is None:
            actions.create.append(Quarantined(node, signal_reason(signal), signal[:MAX_MESSAGE], expires,
                                              (Evidence(node, signal_reason(signal), now, signal),)))
        elif held.expires_at is not None and (held.expires_at - now).total_seconds() < config.quarantine_seconds / 2:
            actions.renew[node] = expires  # the signal lasts: so does the quarantine
    actions.create.extend(_evidence_quarantines(signals, quarantines, evidence, {q.node for q in actions.create},
                                                now, config))
    for node, held in sorted(quarantines.items()):
        if not held.active(now) and not signals.get(node) and node not in actions.renew:
            actions.release.append(node)
    return actions


def trusted(items: Sequence[Evidence], config: HealthConfig) -> bool:
    """Enough to act on: a failure the operator saw itself, or failures from enough namespaces."""
    return (any(e.observed for e in items)
            or len({e.namespace for e in items if e.namespace}) >= config.evidence_namespaces)


def _evidence_quarantines(signals: Mapping[str, str | None], quarantines: Mapping[str, Quarantine],
                          evidence: Iterable[Evidence], created: set[str], now: datetime,
                          config: HealthConfig) -> list[Quarantined]:
    if not config.enabled:
        return []
    by_node: dict[str, list[Evidence]] = {}
    for item in recent(evidence, now, config):
        by_node.setdefault(item.node, []).append(item)
    held = sum(1 for q in quarantines.values() if q.reason == QuarantineReason.JOB_EVIDENCE and q.active(now))
    room = max(1, int(config.max_evidence_fraction * len(signals))) - held
    out: list[Quarantined] = []
    for node, items in sorted(by_node.items(), key=lambda kv: (-len(kv[1]), kv[0])):  # the most named first
        if (node not in signals  # a node that is gone (lost under a gang) needs no quarantine
                or node in quarantines or node in created or len(items) < config.evidence_threshold
                or not trusted(items, config) or len(out) >= room):
            continue
        out.append(Quarantined(node, QuarantineReason.JOB_EVIDENCE, _evidence_message(node, items, config),
                               now + timedelta(seconds=config.quarantine_seconds), tuple(items[-MAX_EVIDENCE:])))
    return out


def quarantine_object(new: Quarantined) -> dict[str, Any]:
    """The NodeQuarantine to create for ``new``."""
    spec = {"node": new.node, "reason": str(new.reason), "message": new.message, "expiresAt": _iso(new.expires_at),
            "evidence": [e.to_record() for e in new.evidence[-MAX_EVIDENCE:]]}
    return {"apiVersion": f"{constants.GROUP}/{constants.VERSION}", "kind": constants.QUARANTINE_KIND,
            "metadata": {"name": new.node, "labels": {constants.LABEL_MANAGED_BY: constants.MANAGED_BY}},
            "spec": spec}


def next_expiry(quarantines: Iterable[Quarantine], now: datetime) -> float | None:
    """Seconds until the first active quarantine expires (None: none will)."""
    times = [(q.expires_at - now).total_seconds() for q in quarantines if q.expires_at is not None]
    return max(0.0, min(times)) if times else None


def mark_quarantined(nodes: Iterable[NodeInfo], quarantined: Iterable[str]) -> list[NodeInfo]:
    """The nodes, those named in ``quarantined`` marked so (the planner leaves them out of new
    placements; gangs already running on them keep their pods)."""
    names = set(quarantined)
    if not names:
        return list(nodes)
    return [replace(node, quarantined=True) if node.name in names else node for node in nodes]
