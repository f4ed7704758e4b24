"""An earlier job of this name may still be terminating its pods (same names, its own checkpoint
save on SIGTERM): never adopt or touch them, and create nothing until they are gone. Pods stuck
terminating on a lost node are force-deleted (pure)."""

from __future__ import annotations

from dataclasses import replace

from phalanx.api.types import TERMINAL_PHASES
from phalanx.constants import Reason
from phalanx.decision import Plan
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.failures import stuck_terminating
from phalanx.lifecycle.pods import is_predecessor
from phalanx.lifecycle.progress import parse_progress

PREDECESSOR_REQUEUE_SECONDS = 2.0  # how soon to look again while an earlier job's pods terminate


def set_aside_predecessors(ctx: Pass) -> None:
    """Set the earlier job's pods aside (and its rank 0's progress with them); force-delete pods
    stuck on lost nodes. Rank 0's report comes from user code: parsed strictly, once, here."""
    observed, config = ctx.observed, ctx.config
    ctx.predecessors = [p for p in observed.pods if is_predecessor(p, ctx.meta.get("uid"))]
    observed = replace(observed, progress=parse_progress(observed.progress))
    ctx.plan.force_delete_pods = stuck_terminating(observed.pods, observed.lost_nodes, ctx.now, config.force_delete_after_seconds)
    for pod in ctx.plan.force_delete_pods:
        ctx.view.events.append(("Warning", Reason.FORCE_DELETED, f"pod {pod} stuck terminating on a lost node for over "
                                f"{config.force_delete_after_seconds}s; deleted with grace period 0"))
    if ctx.predecessors:
        observed = replace(observed, pods=[p for p in observed.pods if p not in ctx.predecessors], progress=None)
    ctx.observed = observed


def wait_for_predecessors(ctx: Pass) -> Plan | None:
    if not ctx.predecessors or ctx.view.status.phase in TERMINAL_PHASES:
        return None
    ctx.view.status.message = (f"waiting for {len(ctx.predecessors)} pods of an earlier job named "
                               f"{ctx.meta.get('name')} to terminate")
    ctx.plan.requeue_after = PREDECESSOR_REQUEUE_SECONDS
    return ctx.done()
