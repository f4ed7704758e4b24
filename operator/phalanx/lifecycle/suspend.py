"""spec.suspend: a suspended job's pods are deleted (each saves a checkpoint on SIGTERM) and none
are created; unsuspended, it starts a new attempt that resumes from that checkpoint (pure)."""

from __future__ import annotations

from phalanx.api.types import Phase
from phalanx.constants import ConditionType, Reason
from phalanx.decision import Plan
from phalanx.lifecycle.attempts import start_new_attempt
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import undeleted_names
from phalanx.lifecycle.status import count_ready


def suspend_or_resume(ctx: Pass) -> Plan | None:
    view = ctx.view
    if ctx.spec.suspend:
        ctx.plan.delete_pods += undeleted_names(ctx.current)
        view.cond(ConditionType.SUSPENDED, True, Reason.SUSPENDED, "spec.suspend is true; pods deleted (checkpoint taken on SIGTERM)")
        view.cond(ConditionType.RUNNING, False, Reason.SUSPENDED, "")
        view.phase(Phase.SUSPENDED, Reason.SUSPENDED, "job suspended")
        count_ready(view, [])
        return ctx.done()
    if view.status.phase == Phase.SUSPENDED:
        view.cond(ConditionType.SUSPENDED, False, Reason.RESUMED, "spec.suspend is false")
        view.phase(Phase.PENDING, Reason.RESUMED, "job resumed; creating a new gang")
        start_new_attempt(ctx)
    return None
