"""Failure classification (Kubeflow's ExitCode policy, refined) and restart backoff. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx import constants as C
from phalanx.api.types import FailurePolicy

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

    def describe(self) -> str:
        code = f" with code {self.exit_code}" if self.exit_code is not None else ""
        kind = "retryable" if self.retryable else "permanent"
        return f"pod {self.pod} (node-rank {self.rank}) {self.reason}{code} ({kind}){': ' + self.message if self.message else ''}"


def exit_code_retryable(code: int, policy: FailurePolicy) -> bool:
    if code in policy.permanent_exit_codes:
        return False
    if code in policy.retryable_exit_codes:
        return True
    return code >= 128  # killed by a signal (OOM 137, SIGTERM 143, ...): the infrastructure's doing


def _exit_code(pod: dict[str, Any]) -> int | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status.get("name") != C.CONTAINER_NAME:
            continue
        term = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if term and term.get("exitCode") is not None:
            return int(term["exitCode"])
    return None


def pod_rank(pod: dict[str, Any]) -> int:
    return int(pod["metadata"].get("labels", {}).get(C.LABEL_NODE_RANK, -1))


def classify_pod(pod: dict[str, Any], policy: FailurePolicy) -> Failure | None:
    """A Failure if the pod failed, else None."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return None
    name, rank = pod["metadata"]["name"], pod_rank(pod)
    reason = status.get("reason") or "Failed"
    message = status.get("message") or ""
    if reason in INFRA_REASONS:
        return Failure(name, rank, reason, message, None, True)
    code = _exit_code(pod)
    if code is None:
        return Failure(name, rank, reason, message or "no exit code recorded", None, True)
    return Failure(name, rank, "exited", message, code, exit_code_retryable(code, policy))


def backoff_seconds(restarts: int, policy: FailurePolicy) -> int:
    """Delay before restart number ``restarts`` (1-based): base × 2^(n-1), capped."""
    if restarts <= 0 or policy.backoff_seconds == 0:
        return 0
    return min(policy.backoff_seconds * 2 ** (restarts - 1), policy.max_backoff_seconds)
