"""spec.activeDeadlineSeconds: a job that has run longer (from status.startTime) ends Failed and
its pods are deleted; until then the job is re-decided when the deadline comes (pure)."""

from __future__ import annotations

from datetime import datetime, timedelta

from phalanx.api.types import Phase
from phalanx.constants import Reason
from phalanx.decision import Plan
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import alive_names
from phalanx.lifecycle.status import parse_iso


def seconds_left(started: datetime | None, deadline_seconds: int | None, now: datetime) -> float | None:
    """Seconds until the deadline (≤ 0: passed); None when there is no deadline or no start yet."""
    if not deadline_seconds or started is None:
        return None
    return (started + timedelta(seconds=deadline_seconds) - now).total_seconds()


def deadline(ctx: Pass) -> Plan | None:
    limit = ctx.spec.active_deadline_seconds
    left = seconds_left(parse_iso(ctx.view.status.start_time), limit, ctx.now)
    if left is None:
        return None
    if left > 0:
        ctx.plan.requeue_after = left
        return None
    ctx.view.finish(Phase.FAILED, Reason.DEADLINE_EXCEEDED, f"job ran longer than activeDeadlineSeconds {limit}")
    ctx.plan.delete_pods += alive_names(ctx.current)
    return ctx.done()
