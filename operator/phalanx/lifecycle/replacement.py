"""Gangs replaced without a failure (no restart counted): a released gang the scheduler did not
bind in time, and a pinned creation that stopped part-way. Each is deleted and created again as a
new attempt, placed afresh (pure)."""

from __future__ import annotations

from phalanx.api.types import Phase
from phalanx.backends import backend_for
from phalanx.constants import ConditionType, Reason
from phalanx.decision import Plan
from phalanx.lifecycle.attempts import start_new_attempt
from phalanx.lifecycle.conditions import reason_of
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.failures import created_at, unbound_too_long
from phalanx.lifecycle.pods import is_gated

# A pinned gang seen part-created this long after its newest pod: the creation stopped (the
# index shows our creates within seconds, kopf's expectations wait 5 s).
INTERRUPTED_AFTER_SECONDS = 30.0
REFUSED_GRACE_SECONDS = 10.0  # the same, when the creation's refusal is on record


def replan_unbound(ctx: Pass) -> Plan | None:
    """A released gang the scheduler did not bind in time (its nodes changed under it): the gates
    cannot come back, so replace the gang and plan again."""
    view, timeout = ctx.view, ctx.config.bind_timeout_seconds
    stuck = unbound_too_long(view, ctx.current, ctx.spec.gang_size, ctx.now, timeout)
    if not stuck:
        return None
    message = f"{stuck} pods not bound {timeout}s after release; re-planning the gang"
    view.phase(Phase.PENDING, Reason.REPLANNING, message, warning=True)
    return replace_gang(ctx, Reason.REPLANNING, message)


def recreate_interrupted(ctx: Pass) -> Plan | None:
    """A pinned creation (``creation.create_pinned``) that stopped part-way — refused, an API error,
    the operator restarted — left ungated pods that hold their nodes and would start without their
    peers, and the rest cannot be pinned without the plan. Delete them and create the gang again
    behind the gate. A partial view right after the creates is given INTERRUPTED_AFTER_SECONDS
    (REFUSED_GRACE_SECONDS after a refusal) from the newest pod to catch up."""
    view, current, size = ctx.view, ctx.current, ctx.spec.gang_size
    if (view.status.attempt_created or not current or len(current) >= size
            or not backend_for(ctx.spec).admits_itself or any(is_gated(p) for p in current)):
        return None
    # after a refusal on record, only the expectations' lag; the body may lag too (a stale refusal)
    refused = reason_of(view.status.conditions, ConditionType.CREATED) == Reason.CREATE_REFUSED
    grace = REFUSED_GRACE_SECONDS if refused else INTERRUPTED_AFTER_SECONDS
    newest = max((created_at(p) or ctx.now for p in current), default=ctx.now)
    wait = grace - (ctx.now - newest).total_seconds()
    if wait > 0:
        ctx.plan.requeue_after = wait
        return ctx.done()
    message = f"{len(current)}/{size} pods of a pinned creation exist; recreating the gang behind the gate"
    view.events.append(("Warning", Reason.CREATE_INTERRUPTED, message))
    view.phase(Phase.PENDING, Reason.CREATE_INTERRUPTED, message)  # it is Pending already: no second event
    return replace_gang(ctx, Reason.CREATE_INTERRUPTED, message)


def replace_gang(ctx: Pass, reason: str, message: str) -> Plan:
    """Delete the current gang for a new attempt, placed afresh (Schedulable=False until then)."""
    ctx.view.cond(ConditionType.SCHEDULABLE, False, reason, message)
    start_new_attempt(ctx)
    return ctx.done()
