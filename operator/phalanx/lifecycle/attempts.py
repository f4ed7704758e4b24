"""Attempts: each gang a job creates is one attempt, numbered by status.restartAttempt and carried
by its pods' restart-attempt label. Pods of an earlier attempt are always deleted, so a new
attempt never shares a hostname or a rendezvous with the one it replaces (pure). A restart in
place (lifecycle/inplace.py) is no new attempt: it keeps the pods."""

from __future__ import annotations

from phalanx.lifecycle.context import Pass
from phalanx.lifecycle.pods import attempt_of, pod_phase, undeleted_names


def start_new_attempt(ctx: Pass) -> None:
    """Replace the current gang: the next attempt number, not yet created, and the current
    attempt's pods deleted. The one way a new attempt starts (a resume, a restart, a readmission,
    a re-plan, a recreation, a resize); the caller records why."""
    ctx.view.status.restart_attempt += 1
    ctx.view.status.attempt_created = False
    ctx.view.status.resumed_step = None  # the new attempt's script says where it resumed
    ctx.view.status.in_place_restarts = 0  # the new pods' containers have not restarted
    ctx.plan.delete_pods += undeleted_names(ctx.current)
    ctx.current = []


def split_attempts(ctx: Pass) -> None:
    """The current attempt's pods; those of earlier attempts are deleted."""
    ctx.current = [p for p in ctx.observed.pods if attempt_of(p) == ctx.attempt]
    # A pod that ended and is being deleted holds no node, IP or endpoint any more; only another
    # controller's finalizer keeps its object (Kueue keeps a stopped group's pods until their
    # replacements exist): it does not block the next gang.
    ctx.stale = [p for p in ctx.observed.pods if attempt_of(p) != ctx.attempt
                 and not (p["metadata"].get("deletionTimestamp") and pod_phase(p) in ("Succeeded", "Failed"))]
    ctx.plan.delete_pods += undeleted_names(ctx.stale)
