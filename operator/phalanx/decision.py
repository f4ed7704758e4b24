"""What one reconcile pass sees and what it decides — the types every layer shares (pure).

``Observed`` (the job's children as the indexes show them) goes into ``lifecycle.reconcile.decide``;
the ``Plan`` it returns is carried out by ``kube.Kube.execute``. The gang step (``GangStep``, native
admission in ``gang.admission``) answers with a ``GangDecision``; ``Fits`` asks whether an elastic
gang could be placed at another size. This module imports nothing else of Phalanx, so any layer may
use it without pulling another one in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GangDecision:
    """What the gang step decided for gated pods of the current attempt."""

    release: bool  # lift every gate now (all together)
    pins: dict[str, str] = field(default_factory=dict)  # pod name → node name
    schedulable: bool = True
    reason: str = "Placed"  # a constants.Reason (str); Reason.PLACED's value by default
    message: str = ""
    placement: dict[str, Any] | None = None


@dataclass(frozen=True)
class Schedulable:
    """A scheduler-side verdict on the gang (a backend's own gang object), as the job's
    ``Schedulable`` condition."""

    status: bool | str  # True, False or "Unknown" (a condition's status as the backend wrote it)
    reason: str
    message: str

    @property
    def is_true(self) -> bool:
        return self.status in (True, "True")


# (job at its current size, the current attempt's pods) → GangDecision. The job is a
# phalanx.api.types.TrainingJob (not imported here: this module stays a leaf).
GangStep = Callable[[Any, list[dict[str, Any]]], GangDecision]
# Could a gang of this job (at some size) be placed now, its own pods' capacity counted as free?
Fits = Callable[[Any], bool]
# (job, node-rank, the nodes the gang keeps, the lost node) → a phalanx.gang.spare.Spare: a spare
# node in the gang's topology domain, booked so that no other gang takes it (gangstep.spare_finder).
FindSpare = Callable[[Any, int, tuple[str, ...], str], Any]


@dataclass
class Observed:
    pods: list[dict[str, Any]]
    service_exists: bool = True
    config_map_exists: bool = True
    network_policy_exists: bool = True
    progress: Any = None  # rank 0's progress report, if reachable (untrusted: parsed in decide)
    lost_nodes: frozenset[str] = frozenset()  # nodes gone or NotReady
    quarantined_nodes: frozenset[str] = frozenset()  # the gang's nodes a NodeQuarantine names
    config_map_hash: str | None = None  # spec-hash annotation of the existing ConfigMap
    namespace_labels: dict[str, str] | None = None  # the job's namespace (policy, Pod Security)
    # A scheduler-side gang object's verdict for the Schedulable condition (workload backend:
    # backends.workload.schedulable of its PodGroup; kueue: backends.kueue.Admission.condition).
    backend_schedulable: Schedulable | None = None
    # An external admitter took the gang's admission back (kueue backend: Kueue evicted its Workload,
    # backends.kueue.Admission.eviction): (reason, message); decide starts a new queued attempt.
    backend_evicted: tuple[str, str] | None = None
    # The namespace's ResourceQuotas (gang.quota.quota_entry each): a gang is created pinned only
    # when all of its pods fit them together.
    quotas: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class LogTail:
    """A pod's last log lines, for a failure the log explains better than its exit (a hang):
    the executor reads them — only then, the one log read — and appends them after ``text``
    wherever the plan's Events and conditions say it (lifecycle.logtail)."""

    pod: str
    text: str  # the failure as the plan's messages carry it (Failure.describe())


@dataclass
class Plan:
    create: list[dict[str, Any]] = field(default_factory=list)
    update: list[dict[str, Any]] = field(default_factory=list)  # children to patch to this content
    delete_pods: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)  # pods whose gang gate is lifted
    pins: dict[str, str] = field(default_factory=dict)  # pod → node (pinned by node affinity)
    status: dict[str, Any] | None = None  # full new status (camelCase) when it changed
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    delete_job: bool = False
    requeue_after: float | None = None
    # Dry-run the new attempt's objects first: a permanent refusal then leaves nothing behind.
    dry_run: bool = False
    force_delete_pods: list[str] = field(default_factory=list)  # stuck terminating on lost nodes
    delete_grace: dict[str, int] = field(default_factory=dict)  # of delete_pods: a grace period shorter than the pod's
    annotate_pods: dict[str, dict[str, str]] = field(default_factory=dict)  # pod → annotations to merge in
    log_tail: LogTail | None = None  # a hang: rank 0's last log lines go into its messages
