"""What went wrong with a gang (pure): failed pods classified by Kubeflow's ExitCode policy,
refined, each with its cause (failure_cause.py); lost nodes and pods; hangs; pods stuck
terminating; a released gang left unbound; and the restart backoff."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from phalanx.api.slots import slot_of, slots
from phalanx.api.types import FailurePolicy, FailureStatus, Phase
from phalanx.constants import (
    EXIT_RESTART_IN_PLACE,
    LABEL_NODE_RANK,
    PHASES_WITHOUT_STEPS,
    ConditionType,
    FailureCategory,
    ProgressKey,
    Reason,
    RestartMode,
)
from phalanx.lifecycle.conditions import get_condition
from phalanx.lifecycle.failure_cause import Cause, cause_of, one_line, precedence, terminated
from phalanx.lifecycle.pods import is_alive, is_gated
from phalanx.lifecycle.status import StatusView, parse_iso
from phalanx_common import restarts as restarts_lib

# Pod-level reasons that never depend on the user's code: always retryable.
INFRA_REASONS = frozenset({"Evicted", "Preempting", "NodeLost", "NodeAffinity", "OutOfpods", "Terminated", "DeadlineExceeded", "UnexpectedAdmissionError"})


@dataclass(frozen=True)
class Failure:
    pod: str
    rank: int
    reason: str
    message: str
    exit_code: int | None
    retryable: bool
    cause: Cause | None = None  # why, when the pod says (failure_cause.cause_of)

    def describe(self) -> str:
        code = f" with code {self.exit_code}" if self.exit_code is not None else ""
        kind = "retryable" if self.retryable else "permanent"
        where = f" (node-rank {self.rank})" if self.rank >= 0 else ""
        text = f"pod {self.pod}{where} {self.reason}{code} ({kind}){': ' + self.message if self.message else ''}"
        return f"{text}; cause: {self.cause.describe()}" if self.cause is not None and self.cause.text else text

    def record(self, now: str, node: str | None = None) -> FailureStatus:
        """The failure as status.lastFailure; ``node``: where the failed pod ran (node health blames it)."""
        cause = self.cause or Cause(FailureCategory.UNKNOWN)
        return FailureStatus(pod=self.pod, node_rank=self.rank if self.rank >= 0 else None, node=node, rank=cause.rank,
                             exit_code=self.exit_code, reason=self.reason, category=cause.category,
                             message=cause.text or one_line(self.message), time=now)


def exit_code_retryable(code: int, policy: FailurePolicy) -> bool:
    if code in policy.permanent_exit_codes:
        return False
    if code in policy.retryable_exit_codes or code == EXIT_RESTART_IN_PLACE:
        return True  # the runtime's "restart in place": a pod that could not, restarts as a new attempt
    return code >= 128  # killed by a signal (OOM 137, SIGTERM 143, ...): the infrastructure's doing


def _exit_code(pod: dict[str, Any]) -> int | None:
    term = terminated(pod)
    return int(term["exitCode"]) if term and term.get("exitCode") is not None else None


def pod_rank(pod: dict[str, Any]) -> int:
    return int(pod["metadata"].get("labels", {}).get(LABEL_NODE_RANK, -1))


def _rank_order(pod: dict[str, Any]) -> tuple[bool, int]:
    """Workers by node-rank, then role pods (no node-rank)."""
    rank = pod_rank(pod)
    return rank < 0, rank


def classify_pod(pod: dict[str, Any], policy: FailurePolicy) -> Failure | None:
    """A Failure if the pod failed, else None."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    name, rank = pod["metadata"]["name"], pod_rank(pod)
    reason = status.get("reason") or Reason.POD_FAILED
    message = status.get("message") or ""
    infra = Cause(FailureCategory.INFRASTRUCTURE)
    if reason in INFRA_REASONS:
        return Failure(name, rank, reason, message, None, True, infra)
    code = _exit_code(pod)
    if code is None:
        return Failure(name, rank, reason, message or "no exit code recorded", None, True, infra)
    cause = cause_of(pod)
    # A failed pre-flight check blames the node, not the code: retryable whatever the exit code, so
    # the gang is placed again (node health keeps the node out) instead of the job failing.
    retryable = cause.category == FailureCategory.PREFLIGHT or exit_code_retryable(code, policy)
    return Failure(name, rank, Reason.EXITED, message, code, retryable, cause)


def node_of(pods: list[dict[str, Any]], name: str) -> str | None:
    """The node the pod named ``name`` is bound to (None: no such pod, or not bound)."""
    for pod in pods:
        if (pod.get("metadata") or {}).get("name") == name:
            node = (pod.get("spec") or {}).get("nodeName")
            return node if isinstance(node, str) and node else None
    return None


def backoff_seconds(restarts: int, policy: FailurePolicy) -> int:
    """Delay before restart number ``restarts`` (1-based): base × 2^(n-1), capped."""
    return restarts_lib.backoff_seconds(restarts, policy.backoff_seconds, policy.max_backoff_seconds)


def first_failure(view: StatusView, current: list[dict], spec: Any, now: datetime, lost_nodes: frozenset[str],
                  progress: dict[str, Any] | None) -> Failure | None:
    """The current gang's first failure: a failed pod (by failure_cause.precedence, then rank), a
    pod on a lost node, a pod lost after the gang was created, or a hang (no step progress for
    hangTimeoutSeconds)."""
    best = None
    for pod in sorted(current, key=_rank_order):  # the first of the lowest precedence, in rank order
        failure = classify_pod(pod, spec.failure_policy)
        if failure is not None and (best is None or precedence(failure.cause) < precedence(best.cause)):
            best = failure
            if precedence(failure.cause) == 0:
                break  # nothing outranks it: the other pods' messages need not be read
    if best is not None:
        return best
    for pod in sorted(current, key=_rank_order):
        node = pod.get("spec", {}).get("nodeName")
        if node and node in lost_nodes and is_alive(pod):
            return Failure(pod["metadata"]["name"], pod_rank(pod), Reason.NODE_LOST, f"node {node} is gone or NotReady", None, True,
                           Cause(FailureCategory.INFRASTRUCTURE))
    if view.status.attempt_created:
        present = {slot_of(p) for p in current}
        missing = [slot for slot in slots(spec) if slot not in present]
        if missing:
            lost = missing[0]
            return Failure(str(lost), lost.index if lost.is_worker else -1, Reason.POD_LOST,
                           "pod disappeared (deleted, or its node is gone)", None, True, Cause(FailureCategory.INFRASTRUCTURE))
    return _hang(view, spec, now, progress)


def _hang(view: StatusView, spec: Any, now: datetime, progress: dict[str, Any] | None) -> Failure | None:
    """No step for hangTimeoutSeconds while Running. Not while rank 0 reports a phase that makes no
    steps (PHASES_WITHOUT_STEPS: a long data.prepare, the in-job export); apply_progress restarts
    the clock at each report of one, so it runs afresh when that phase ends."""
    hang = spec.failure_policy.hang_timeout_seconds
    if (progress or {}).get(ProgressKey.PHASE) in PHASES_WITHOUT_STEPS:
        return None
    last = parse_iso(view.status.last_progress_time) or parse_iso(view.status.start_time)
    # A step reported in this very pass is progress (it is applied to the status only at the end).
    fresh = (progress or {}).get("step") not in (None, view.status.step)
    if hang and not fresh and view.status.phase == Phase.RUNNING and last is not None and \
            (now - last).total_seconds() > hang + in_place_backoff(view, spec.failure_policy):
        return Failure("rank 0", 0, Reason.HANG, f"no step progress for {int((now - last).total_seconds())}s (hangTimeoutSeconds {hang})",
                       None, True, Cause(FailureCategory.HANG))
    return None


def in_place_backoff(view: StatusView, policy: FailurePolicy) -> int:
    """The backoff the launchers wait after a restart in place (runtime inplace.wait_backoff),
    while no step has come since every pod ran again: the hang clock allows it on top."""
    restarting = get_condition(view.status.conditions, ConditionType.RESTARTING)
    if view.status.last_restart_mode not in (RestartMode.IN_PLACE, RestartMode.REPLACE_NODE) \
            or restarting is None or restarting.status != "False" \
            or restarting.reason != Reason.RUNNING or restarting.last_transition_time != view.status.last_progress_time:
        return 0
    return backoff_seconds(view.status.in_place_restarts, policy)


def stuck_terminating(pods: list[dict], lost_nodes: frozenset[str], now: datetime, timeout: int) -> list[str]:
    """Pods whose grace period ended ``timeout`` s ago on a node that is gone or NotReady: no
    kubelet will ever confirm their deletion, and their hostnames block the next gang."""
    stuck = []
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in lost_nodes:
            continue
        try:
            deleting = parse_iso(pod["metadata"].get("deletionTimestamp"))
        except ValueError:
            continue
        if deleting is not None and (now - deleting).total_seconds() > timeout:
            stuck.append(pod["metadata"]["name"])
    return stuck


def created_at(pod: dict[str, Any]) -> datetime | None:
    """The pod's creationTimestamp (None: unset, as in a rendered pod, or malformed)."""
    try:
        return parse_iso(pod["metadata"].get("creationTimestamp"))
    except ValueError:
        return None


def unbound_too_long(view: StatusView, current: list[dict], nodes: int, now: datetime, timeout: int) -> int:
    """Pods released (gate lifted) but still unbound ``timeout`` s after the gang was placed and
    every pod existed. A gang created pinned is placed before its pods exist, and its Schedulable
    condition may have been True since an earlier attempt: the clock runs from its newest pod."""
    cond = get_condition(view.status.conditions, ConditionType.SCHEDULABLE)
    released = parse_iso(cond.last_transition_time) if cond and cond.status == "True" else None
    if released is None or len(current) != nodes:
        return 0
    created = [when for p in current if (when := created_at(p)) is not None]
    since = max([released, *created])
    if (now - since).total_seconds() < timeout:
        return 0
    return sum(1 for p in current if not is_gated(p) and not p.get("spec", {}).get("nodeName") and is_alive(p))
