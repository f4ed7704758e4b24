"""The spec's verdict (phalanx.validate): an invalid job is refused with exactly what is wrong and
nothing is created; a valid one is accepted at its current (elastic) size and its totals go into
the status (pure)."""

from __future__ import annotations

from phalanx.api.slots import role_counts
from phalanx.api.types import TERMINAL_PHASES, Phase
from phalanx.constants import ConditionType, Reason
from phalanx.decision import Plan
from phalanx.lifecycle import elastic
from phalanx.lifecycle.conditions import get_condition
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import alive_names


def refuse_invalid(ctx: Pass) -> Plan | None:
    """Bad input: say exactly what is wrong, create nothing, never crash-loop."""
    if ctx.job is not None and not ctx.problems:
        return None
    view = ctx.view
    message = "; ".join(str(p) for p in ctx.problems)
    if view.status.phase not in TERMINAL_PHASES:
        view.cond(ConditionType.VALID, False, Reason.INVALID_SPEC, message)
        view.finish(Phase.FAILED, Reason.INVALID_SPEC, message)
    ctx.plan.delete_pods = alive_names(ctx.observed.pods)
    return ctx.done()


def accept(ctx: Pass) -> None:
    """A valid job: elastic jobs run at their current gang size; the totals go into the status."""
    view, requested = ctx.view, ctx.job
    assert requested is not None
    ctx.requested = requested
    ctx.active = elastic.active_size(requested, view.status.active_nodes)
    ctx.job = elastic.at_size(requested, ctx.active)
    spec = ctx.spec
    if spec.elastic is not None:
        view.status.active_nodes = ctx.active
    view.cond(ConditionType.VALID, True, Reason.VALIDATED, "spec is valid")
    if get_condition(view.status.conditions, ConditionType.RECONCILED) is not None:  # recovered from a ReconcileError
        view.cond(ConditionType.RECONCILED, True, Reason.RECONCILED, "")
    view.status.total_nodes = spec.nodes
    view.role_totals = role_counts(spec) if spec.roles else None
    view.status.world_size = spec.world_size
    if spec.uses_runtime:  # a command job's script reports its own (lifecycle/progress.py)
        view.status.total_steps = spec.training.steps
