"""Placing a gated gang once every pod exists: the gang step decides (the native planner pins each
pod; other backends leave placement to their scheduler), every gate is lifted together, and a gang
that cannot be placed waits, shrinks (spec.elastic) or fails at scheduling.gangTimeoutSeconds
(pure)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from phalanx.api.types import Phase, PlacementStatus
from phalanx.constants import ConditionType, Reason
from phalanx.decision import Plan
from phalanx.lifecycle import elastic
from phalanx.lifecycle.conditions import get_condition, is_true
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import is_gated, names
from phalanx.lifecycle.status import StatusView, parse_iso


def place_gang(ctx: Pass) -> Plan | None:
    """All pods exist → decide placement and lift the gates together."""
    view, current = ctx.view, ctx.current
    gated = [p for p in current if is_gated(p)]
    created = view.status.attempt_created
    if gated and created and len(current) == ctx.spec.gang_size:
        return gang_decision(ctx, gated)
    if current and not gated and created and ctx.observed.backend_schedulable is not None:
        verdict = ctx.observed.backend_schedulable  # the scheduler's own gang verdict
        view.cond(ConditionType.SCHEDULABLE, verdict.status, verdict.reason, verdict.message)
    elif current and not gated and created and not is_true(view.status.conditions, ConditionType.SCHEDULABLE):
        view.cond(ConditionType.SCHEDULABLE, True, Reason.GATES_LIFTED, "gang released to the scheduler")
    return None


def gang_decision(ctx: Pass, gated: list[dict[str, Any]]) -> Plan | None:
    view, plan, spec = ctx.view, ctx.plan, ctx.spec
    decision = ctx.gang(ctx.job, ctx.current)
    if decision.placement is not None:
        view.status.placement = PlacementStatus.model_validate(decision.placement)
    view.cond(ConditionType.SCHEDULABLE, decision.schedulable, decision.reason, decision.message)
    if decision.release:
        plan.release = names(gated)
        plan.pins = dict(decision.pins)
        return None
    if decision.schedulable:
        return None
    waited = seconds_unschedulable(view, ctx.now)
    resized = elastic.shrink(ctx, waited)
    if resized is not None:
        return resized
    timeout = spec.scheduling.gang_timeout_seconds
    if timeout and waited >= timeout and spec.scheduling.on_gang_timeout == "Fail":
        view.finish(Phase.FAILED, Reason.GANG_TIMEOUT, f"gang not placed within {timeout}s: {decision.message}")
        plan.delete_pods += names(ctx.current)
        plan.create = []
        return ctx.done()
    return None


def seconds_unschedulable(view: StatusView, now: datetime) -> float:
    """How long Schedulable has been False (0 when it is not False)."""
    schedulable = get_condition(view.status.conditions, ConditionType.SCHEDULABLE)
    since = parse_iso(schedulable.last_transition_time) if schedulable and schedulable.status == "False" else None
    return (now - since).total_seconds() if since else 0.0
