"""The level-based reconcile, as a pure function: (job, what exists, now) → what to do.

The kopf handlers observe (pods from an index, children from the API), call ``decide`` and carry
out the returned ``Plan``. Nothing here talks to the API server, so every branch is unit-tested,
and replaying ``decide`` after a crash at any point converges without duplicates or orphans:
names are deterministic and pods of an older attempt are always deleted.

``decide`` runs ``PHASES`` in order over one ``Pass``: each step either has the final word (it
returns the Plan, from ``ctx.done()``) or updates the pass and returns None to hand on. Each
policy is a module of its own in this package (suspend, deadline, ttl, success, restart,
placement, ...); this module only orders them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from phalanx.api.config import OperatorConfig
from phalanx.api.types import TrainingJob
from phalanx.constants import Reason
from phalanx.decision import FindSpare, Fits, GangDecision, GangStep, Observed, Plan
from phalanx.lifecycle import elastic
from phalanx.lifecycle.admission_withdrawn import admission_withdrawn
from phalanx.lifecycle.attempts import split_attempts
from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.creation import create_missing
from phalanx.lifecycle.deadline import deadline
from phalanx.lifecycle.inplace import restarted_in_place
from phalanx.lifecycle.placement import place_gang
from phalanx.lifecycle.predecessors import set_aside_predecessors, wait_for_predecessors
from phalanx.lifecycle.progress import final_progress
from phalanx.lifecycle.replace_node import replace_node
from phalanx.lifecycle.replacement import recreate_interrupted, replan_unbound
from phalanx.lifecycle.restart import failed, restart_backoff
from phalanx.lifecycle.status import StatusView, phase_from_pods
from phalanx.lifecycle.success import succeeded
from phalanx.lifecycle.suspend import suspend_or_resume
from phalanx.lifecycle.ttl import finished
from phalanx.lifecycle.validity import accept, refuse_invalid
from phalanx.validate import validate_job

__all__ = ["PHASES", "Fits", "GangDecision", "GangStep", "Observed", "Plan", "decide", "release_all"]


def release_all(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
    """Default gang step: all pods exist → lift every gate together, the scheduler places them."""
    return GangDecision(release=True, reason=Reason.GANG_COMPLETE, message=f"all {len(pods)} pods created; gates lifted together")


def decide(
    obj: dict[str, Any],
    observed: Observed,
    now: datetime,
    config: OperatorConfig | None = None,
    gang: GangStep = release_all,
    fits: Fits | None = None,
    spare: FindSpare | None = None,
) -> Plan:
    config = config or OperatorConfig()
    meta = obj.get("metadata", {})
    view = StatusView(obj.get("status"), meta.get("generation"), now)
    job, problems = validate_job(obj, config, observed.namespace_labels)
    ctx = Pass(obj=obj, observed=observed, now=now, config=config, gang=gang, fits=fits, view=view, job=job, problems=problems,
               spare=spare)
    for step in PHASES:
        plan = step(ctx)
        if plan is not None:
            return plan
    return ctx.done()


def collect_progress(ctx: Pass) -> None:
    """Progress comes from user code: applied in done(), after suspend, deadline and failure
    checks have decided, so it can change nothing but the progress fields."""
    ctx.reports += [ctx.observed.progress, final_progress(ctx.observed.pods, ctx.attempt)]


def phase_of_gang(ctx: Pass) -> None:
    """The phase from the current gang's pods."""
    phase_from_pods(ctx.view, ctx.current, ctx.spec.gang_size)


Step = Callable[[Pass], Plan | None]
PHASES: tuple[Step, ...] = (
    set_aside_predecessors,
    refuse_invalid,
    accept,
    wait_for_predecessors,
    collect_progress,
    finished,
    split_attempts,
    suspend_or_resume,
    deadline,
    succeeded,
    admission_withdrawn,
    restarted_in_place,
    replace_node,
    failed,
    replan_unbound,
    restart_backoff,
    recreate_interrupted,
    create_missing,
    place_gang,
    phase_of_gang,
    elastic.grow,  # grow back towards spec.nodes once the current size has run for a while
)
