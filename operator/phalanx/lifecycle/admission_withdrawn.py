"""An external admitter (Kueue) took the gang's admission back (preempted, deactivated) and stops
its pods: a new attempt queues again and resumes (lifecycle/resume.py). Not a failure: no restart
counted. Suspended says so until the admitter admits the gang again (pure)."""

from __future__ import annotations

from phalanx.api.types import Phase
from phalanx.backends.kueue import withdrawal
from phalanx.constants import ConditionType, Reason
from phalanx.decision import Plan, Schedulable
from phalanx.lifecycle.attempts import start_new_attempt
from phalanx.lifecycle.conditions import get_condition
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.resume import resume_phrase
from phalanx.lifecycle.status import StatusView, count_ready


def admission_withdrawn(ctx: Pass) -> Plan | None:
    view, observed = ctx.view, ctx.observed
    found = withdrawal(observed.backend_evicted, ctx.current, view.status.attempt_created, ctx.spec.gang_size)
    if found is None:
        _readmitted(view, observed.backend_schedulable)
        return None
    reason, message = found
    view.cond(ConditionType.SUSPENDED, True, reason, message)
    view.cond(ConditionType.RUNNING, False, reason, "")
    view.phase(Phase.PENDING, reason, f"{message}; a new gang queues and {resume_phrase(ctx.spec)}", warning=True)
    start_new_attempt(ctx)
    count_ready(view, [])
    return ctx.done()


def _readmitted(view: StatusView, verdict: Schedulable | None) -> None:
    """The admitter's verdict is True again: a Suspended=True it set (not spec.suspend's) ends."""
    readmitted = verdict is not None and verdict.is_true
    suspended = get_condition(view.status.conditions, ConditionType.SUSPENDED)
    if readmitted and suspended is not None and suspended.status == "True" and suspended.reason != Reason.SUSPENDED:
        view.cond(ConditionType.SUSPENDED, False, verdict.reason, verdict.message)
