"""Finished jobs and spec.ttlSecondsAfterFinished: whatever still runs is deleted, and the job
itself once the TTL has passed since status.completionTime (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from phalanx.api.types import TERMINAL_PHASES
from phalanx.decision import Plan
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import alive_names
from phalanx.lifecycle.status import count_ready, parse_iso


def seconds_to_deletion(completed: datetime | None, ttl_seconds: int | None, now: datetime) -> float | None:
    """Seconds until a finished job is deleted (≤ 0: now); None when it is kept (no TTL, or no
    completion time recorded)."""
    if ttl_seconds is None or completed is None:
        return None
    return (completed + timedelta(seconds=ttl_seconds) - now).total_seconds()


def finished(ctx: Pass) -> Plan | None:
    """Finished jobs: free what still runs, then wait for the TTL."""
    view, plan = ctx.view, ctx.plan
    if view.status.phase not in TERMINAL_PHASES:
        return None
    plan.delete_pods = alive_names(ctx.observed.pods)
    count_ready(view, [])
    left = seconds_to_deletion(parse_iso(view.status.completion_time), ctx.spec.ttl_seconds_after_finished, ctx.now)
    if left is not None and left <= 0:
        plan.delete_job = True
    elif left is not None:
        plan.requeue_after = left
    return ctx.done()
