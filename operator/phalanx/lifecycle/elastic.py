"""Elastic gangs (spec.elastic): the sizes a job may run at, the job at a given size, and the
reconcile's two elastic steps — shrink when the gang cannot be placed, grow back when it can (pure).

The operator resizes by replacing the whole gang (a new attempt): the runtime saves a checkpoint on
SIGTERM and the new gang resumes from it at the new world size (DCP resharding, data position
re-split), with the data-parallel degree recomputed for the new size.
"""

from __future__ import annotations

from phalanx.api.types import Phase, TrainingJob
from phalanx.constants import ConditionType, Reason
from phalanx.decision import Plan
from phalanx.lifecycle.attempts import start_new_attempt
from phalanx.lifecycle.conditions import get_condition
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.resume import resume_phrase
from phalanx.lifecycle.status import parse_iso
from phalanx_common.layout import check_layout


def at_size(job: TrainingJob, nodes: int) -> TrainingJob:
    """The job as it runs with ``nodes`` nodes: data-parallel degree follows the world size."""
    if nodes == job.spec.nodes:
        return job
    parallelism = job.spec.parallelism.model_copy(update={"data": None})
    spec = job.spec.model_copy(update={"nodes": nodes, "parallelism": parallelism})
    return job.model_copy(update={"spec": spec})


def active_size(job: TrainingJob, recorded: int | None) -> int:
    """The current gang size: the recorded one while it is within the elastic bounds."""
    elastic = job.spec.elastic
    if elastic is None or recorded is None or not elastic.min_nodes <= recorded <= elastic.max_nodes:
        return job.spec.nodes
    return recorded


def runnable_sizes(job: TrainingJob, low: int, high: int) -> list[int]:
    """Sizes in [low, high], largest first, whose layout the runtime can hold (batch, mesh, model)."""
    return [size for size in range(high, low - 1, -1) if not check_layout(at_size(job, size).spec)]


def shrink(ctx: Pass, waited: float) -> Plan | None:
    """The gang has not been placeable for ``waited`` s: replace it with the largest smaller gang
    that fits, once replaceTimeoutSeconds have passed."""
    elastic = ctx.spec.elastic
    if elastic is None or ctx.fits is None or waited < elastic.replace_timeout_seconds:
        return None
    assert ctx.requested is not None
    for size in runnable_sizes(ctx.requested, elastic.min_nodes, ctx.active - 1):
        if ctx.fits(at_size(ctx.requested, size)):
            return resize(ctx, size, f"no room for {ctx.active} nodes for {int(waited)}s")
    return None


def grow(ctx: Pass) -> Plan | None:
    """Grow back towards spec.nodes once the current size has run for replaceTimeoutSeconds."""
    elastic = ctx.spec.elastic
    running = get_condition(ctx.view.status.conditions, ConditionType.RUNNING)
    since = parse_iso(running.last_transition_time) if running and running.status == "True" else None
    assert ctx.requested is not None
    if elastic is None or ctx.fits is None or ctx.active >= ctx.requested.spec.nodes or since is None \
            or (ctx.now - since).total_seconds() < elastic.replace_timeout_seconds:
        return None
    for size in runnable_sizes(ctx.requested, ctx.active + 1, ctx.requested.spec.nodes):
        if ctx.fits(at_size(ctx.requested, size)):
            return resize(ctx, size, "capacity returned")
    return None


def resize(ctx: Pass, new: int, why: str) -> Plan:
    """Replace the gang with one of ``new`` nodes; it resumes from the checkpoint saved on SIGTERM
    (with a checkpoint volume)."""
    view, old = ctx.view, ctx.active
    message = f"resizing the gang from {old} to {new} nodes ({why}); the new gang {resume_phrase(ctx.spec)}"
    view.status.active_nodes = new
    view.cond(ConditionType.RUNNING, False, Reason.RESIZING, message)
    view.phase(Phase.PENDING, Reason.RESIZING, message, warning=new < old)
    start_new_attempt(ctx)
    return ctx.done()
