"""A job's status while it is being decided: the pydantic status plus helpers that record
transitions (conditions with lastTransitionTime/observedGeneration, phase Events)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from phalanx import constants as C
from phalanx.api.types import Phase, TrainingJobStatus
from phalanx.lifecycle.conditions import set_condition


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(ts: str | None) -> datetime | None:
    """RFC 3339 (as Kubernetes and the runtime write it) → an aware datetime; ValueError if malformed."""
    if not ts:
        return None
    parsed = datetime.fromisoformat(ts)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)



class StatusView:
    """Mutable view of the status with helpers that record transitions."""

    def __init__(self, raw: dict[str, Any] | None, generation: int | None, now: datetime):
        self.s = TrainingJobStatus.model_validate(raw or {})
        self.before = self.s.model_dump(by_alias=True, mode="json", exclude_none=True)
        self.generation = generation
        self.now = iso(now)
        self.events: list[tuple[str, str, str]] = []

    def cond(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.s.conditions = set_condition(self.s.conditions, type_, status, reason, message, self.now, self.generation)

    def phase(self, phase: Phase, reason: str, message: str, warning: bool = False) -> None:
        if self.s.phase != phase:
            self.events.append(("Warning" if warning else "Normal", reason, message or f"phase {phase}"))
        self.s.phase = phase
        self.s.message = message or None

    def finish(self, phase: Phase, reason: str, message: str) -> None:
        failed = phase == Phase.FAILED
        self.phase(phase, reason, message, warning=failed)
        self.cond(C.COND_SUCCEEDED, not failed, reason, message)
        self.cond(C.COND_FAILED, failed, reason, message)
        self.cond(C.COND_RUNNING, False, reason, message)
        self.cond(C.COND_RESTARTING, False, reason, "")
        self.s.completion_time = self.s.completion_time or self.now

    def dump(self) -> dict[str, Any] | None:
        self.s.observed_generation = self.generation
        after = self.s.model_dump(by_alias=True, mode="json", exclude_none=True)
        return after if after != self.before else None
