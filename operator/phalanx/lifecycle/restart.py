"""failurePolicy: a failed pod, a pod lost after the gang was created, or a hang restarts the whole
gang as a new attempt after an exponential backoff, until maxRestarts; a permanent failure, or one
past maxRestarts, ends the job Failed (pure). What counts as a failure: lifecycle/failures.py. A
hang of a gang whose pods restart in place restarts it in place instead (lifecycle/inplace.py)."""

from __future__ import annotations

from datetime import timedelta

from phalanx.api.types import Phase
from phalanx.constants import ConditionType, Reason, RestartMode
from phalanx.decision import Plan
from phalanx.lifecycle.attempts import start_new_attempt
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.failures import Failure, backoff_seconds, first_failure, node_of
from phalanx.lifecycle.inplace import in_place_possible, request_restart
from phalanx.lifecycle.logtail import rank0_log_tail
from phalanx.lifecycle.pods import alive_names
from phalanx.lifecycle.status import count_ready, iso, parse_iso

MIN_REQUEUE_SECONDS = 0.5  # the soonest a restart is re-decided (backoffSeconds may be 0)


def failed(ctx: Pass) -> Plan | None:
    """A failed pod, a pod lost after the gang was created, or a hang: restart or fail the gang."""
    failure = first_failure(ctx.view, ctx.current, ctx.spec, ctx.now, ctx.observed.lost_nodes, ctx.observed.progress)
    return None if failure is None else restart_or_fail(ctx, failure)


def restart_or_fail(ctx: Pass, failure: Failure) -> Plan:
    view, plan, policy = ctx.view, ctx.plan, ctx.spec.failure_policy
    what = failure.describe()
    view.status.last_failure = failure.record(view.now, node_of(ctx.current, failure.pod))
    if failure.reason == Reason.HANG:  # what rank 0 last wrote says more than "no progress"
        plan.log_tail = rank0_log_tail(ctx.current, what)
    if not failure.retryable or view.status.restarts >= policy.max_restarts:
        if failure.retryable:
            view.finish(Phase.FAILED, Reason.MAX_RESTARTS_EXCEEDED,
                        f"restarted {view.status.restarts} times (maxRestarts {policy.max_restarts}); last failure: {what}")
        else:
            view.finish(Phase.FAILED, Reason.PERMANENT_FAILURE, what)
        plan.delete_pods += alive_names(ctx.current)
        return ctx.done()
    if failure.reason == Reason.HANG and ctx.config.in_place_restarts and in_place_possible(ctx):
        return request_restart(ctx, failure)
    view.status.restarts += 1
    view.status.last_restart_mode = RestartMode.RECREATE
    delay = backoff_seconds(view.status.restarts, policy)
    view.status.next_restart_time = iso(ctx.now + timedelta(seconds=delay))
    message = f"restart {view.status.restarts}/{policy.max_restarts} in {delay}s after {what}"
    view.cond(ConditionType.RESTARTING, True, failure.reason, message)
    view.cond(ConditionType.RUNNING, False, Reason.RESTARTING, "")
    view.phase(Phase.RESTARTING, Reason.RESTARTING, message, warning=True)
    start_new_attempt(ctx)
    plan.requeue_after = max(float(delay), MIN_REQUEUE_SECONDS)
    count_ready(view, [])
    return ctx.done()


def restart_backoff(ctx: Pass) -> Plan | None:
    """A restart waits out its backoff (status.nextRestartTime) before the new gang is created."""
    view = ctx.view
    restart_at = parse_iso(view.status.next_restart_time)
    if restart_at is not None and ctx.now < restart_at:
        ctx.plan.requeue_after = (restart_at - ctx.now).total_seconds()
        count_ready(view, ctx.current)
        return ctx.done()
    view.status.next_restart_time = None
    return None
