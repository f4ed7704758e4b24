"""How long a job's loop lets a burst of wake-ups gather before its next pass, how long it
holds back a status write that only moves ready counts, and how often it reads rank 0's progress
(pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phalanx.constants import ProgressKey, StartupPhase
from phalanx.decision import Plan

WAKE_COALESCE_MIN_SECONDS = 0.2
WAKE_COALESCE_MAX_SECONDS = 2.0
PODS_PER_COALESCE_SECOND = 256


def wake_coalesce_seconds(pods: int) -> float:
    """0.2 s for a gang of up to 51 pods, then a gang's size / 256 s, at most 2 s (512 pods and up).

    A big gang's pods turn Running one by one over tens of seconds, each a wake-up; every pass
    re-decides the whole gang and writes its changed ready counts. Waiting in proportion to the
    gang keeps that to about one pass and one status write per 2 s, at the price of reacting to a
    failed pod up to 2 s later in a 512-pod gang (its restart takes far longer)."""
    return min(WAKE_COALESCE_MAX_SECONDS, max(WAKE_COALESCE_MIN_SECONDS, pods / PODS_PER_COALESCE_SECOND))


# Status fields that count pods as they bind and turn ready, and the message that tells those
# counts ("3/8 pods bound to nodes") (wire names): a change to these alone is written at most
# once per interval per job, as the Job controller batches its status updates (syncJobBatchPeriod).
# Counts are a display: every write is an API request and a watch event for every watcher, and a
# gang's pods turn Running over several seconds, so they are written every 2 s, not at each
# change. A phase, condition, event or any other change is written at once.
COUNT_FIELDS = frozenset({"readyNodes", "nodes", "roles", "rolesReady", "message"})
COUNT_WRITE_INTERVAL_SECONDS = 2.0


def hold_ready_counts(before: Mapping[str, Any], plan: Plan, since_last_write: float) -> float:
    """Seconds to hold back ``plan``'s status write (0: write it now). Held only when the plan
    does nothing else and its status differs from ``before`` in counts alone, within
    the interval after this job's last status write; the caller re-decides when it ends."""
    wait = COUNT_WRITE_INTERVAL_SECONDS - since_last_write
    if plan.status is None or wait <= 0 or _acts(plan):
        return 0.0
    changed = {key for key in before.keys() | plan.status.keys() if before.get(key) != plan.status.get(key)}
    return wait if changed and changed <= COUNT_FIELDS else 0.0


def _acts(plan: Plan) -> bool:
    return bool(plan.create or plan.update or plan.delete_pods or plan.force_delete_pods or plan.release
                or plan.events or plan.delete_job)


# Rank 0's progress is read every PROGRESS_POLL_SECONDS while a job runs. Until the report shows
# the first step of the gang's start it is read every FIRST_STEP_POLL_SECONDS between the loop's
# passes (a read, no pass: a pass follows only once the step shows), so the status shows the first
# step about a second after it is done instead of up to a resync later; for at most
# FIRST_STEP_WATCH_SECONDS after the loop saw the gang running, so that a start that takes long (a
# big model's load) or a job whose report never says (a command job without progress) costs one
# read per second for two minutes, and no pass.
PROGRESS_POLL_SECONDS = 5.0
FIRST_STEP_POLL_SECONDS = 1.0
FIRST_STEP_WATCH_SECONDS = 120.0


def first_step_seen(progress: Mapping[str, Any] | None) -> bool:
    """Whether rank 0's report shows a step done in this start: the built-in runtime's start-up
    timeline reaches ``firstStep``; a report without a timeline counts any step past 0."""
    if not progress:
        return False
    startup = progress.get(ProgressKey.STARTUP)
    if isinstance(startup, Mapping):
        return StartupPhase.FIRST_STEP in startup
    step = progress.get(ProgressKey.STEP)
    return isinstance(step, int) and step >= 1


def progress_poll_seconds(progress: Mapping[str, Any] | None, running_for: float) -> float:
    """How long after a read of rank 0's progress the loop reads it again, ``running_for`` seconds
    after it saw this start's gang running."""
    if first_step_seen(progress) or running_for >= FIRST_STEP_WATCH_SECONDS:
        return PROGRESS_POLL_SECONDS
    return FIRST_STEP_POLL_SECONDS
