"""What the API server's refusals and the operator's own errors do to a job (pure).

Permanent refusals (400/422 invalid, 403 from admission such as Pod Security) end the job
Failed with the API's words: retrying would only repeat them. Retryable ones (quota, a
PriorityClass or ServiceAccount that does not exist yet, 409/429/5xx) leave it waiting with
Created=False and an exponential backoff, as the Job controller does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from phalanx.api.types import Phase
from phalanx.constants import ConditionType, Reason
from phalanx.lifecycle.status import StatusView

# 403s that a change elsewhere in the cluster can lift (quota freed, a class or account created).
_RETRYABLE_FORBIDDEN = ("exceeded quota", "not found", "no PriorityClass")
RETRY_BASE_SECONDS = 2.0
RETRY_MAX_SECONDS = 300.0
# decide() raising for the same job this many times in a row is not bad luck: say so in status.
MAX_DECIDE_ERRORS = 3


@dataclass(frozen=True)
class Refusal:
    kind: str
    name: str
    code: int | None
    message: str

    @property
    def permanent(self) -> bool:
        return is_permanent(self.code, self.message)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message}"


def is_permanent(code: int | None, message: str) -> bool:
    if code in (400, 404, 422):
        return True
    if code == 403:
        return not any(words in message for words in _RETRYABLE_FORBIDDEN)
    return False  # 409, 429, 5xx, transport errors


def retry_delay(consecutive: int) -> float:
    """Seconds before retry number ``consecutive`` (1-based): 2, 4, 8, ... capped at 5 minutes."""
    return min(RETRY_BASE_SECONDS * 2 ** max(consecutive - 1, 0), RETRY_MAX_SECONDS)


def _summary(refusals: list[Refusal]) -> str:
    text = "; ".join(str(refusal) for refusal in refusals[:3])
    return text + (f" (and {len(refusals) - 3} more)" if len(refusals) > 3 else "")


def refused_status(obj: dict[str, Any], refusals: list[Refusal], now: datetime) -> tuple[dict[str, Any], bool]:
    """(new status, permanent). Permanent: Failed, reason CreateRejected, the API's message."""
    view = StatusView(obj.get("status"), obj.get("metadata", {}).get("generation"), now)
    permanent = [refusal for refusal in refusals if refusal.permanent]
    if permanent:
        message = f"the API server rejected the job's objects: {_summary(permanent)}"
        view.cond(ConditionType.CREATED, False, Reason.CREATE_REJECTED, message)
        view.finish(Phase.FAILED, Reason.CREATE_REJECTED, message)
    else:
        message = _summary(refusals)
        view.cond(ConditionType.CREATED, False, Reason.CREATE_REFUSED, message)
        view.status.message = message
    return view.body(), bool(permanent)


def error_status(obj: dict[str, Any], error: str, now: datetime, final: bool) -> dict[str, Any]:
    """The operator could not decide this job's fate: ReconcileError in status; Failed once the
    same error has repeated MAX_DECIDE_ERRORS times (it is the input, not a passing fault)."""
    generation = (obj.get("metadata") or {}).get("generation")
    try:
        view = StatusView(obj.get("status"), generation, now)
    except Exception:  # noqa: BLE001 - the stored status may be what broke the reconcile
        view = StatusView(None, generation, now)
    message = f"the operator could not reconcile this job: {error}"[:2000]
    view.cond(ConditionType.RECONCILED, False, Reason.RECONCILE_ERROR, message)
    if final:
        view.finish(Phase.FAILED, Reason.RECONCILE_ERROR, message)
    else:
        view.status.message = message
    return view.body()
